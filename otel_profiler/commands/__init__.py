"""One module per ``otel-profiler`` subcommand; each defines ``register(subparsers)``."""

COMMANDS = ("summary",)
"""Subcommand modules, in the order ``--help`` lists them."""
