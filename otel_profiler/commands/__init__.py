"""One module per ``otel-profiler`` subcommand; each defines ``register(subparsers)``."""

COMMANDS = ("summary", "report", "run", "trigger", "export", "replay")
"""Subcommand modules, in the order ``--help`` lists them."""
