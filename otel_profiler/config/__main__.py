"""``python -m otel_profiler.config``: the table of every variable, as docs/configuration.md holds it."""

from . import markdown_table

print(markdown_table())
