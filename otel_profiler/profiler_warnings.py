"""The profiler's warnings and error lines, each on one line, every name in it made safe for a
terminal (``cuda_tracer.terminal_lines.terminal_safe``: a trace's, a file's or a process's name
cannot send escape sequences).

Inside a training process, ``warn`` says each message once (``otel-profiler: warning: ...`` on
stderr) and never raises, or issues it as a ``ProfilerWarning`` where warnings are recorded
(``cuda_tracer.terminal_lines.say_once``). Outside one (the command line, the exporter process),
``print_warning`` and ``print_error`` print their line every time they are called.
"""

from __future__ import annotations

from cuda_tracer.terminal_lines import ProfilerWarning, say_once, terminal_safe, write_line

__all__ = ["ProfilerWarning", "print_error", "print_warning", "warn", "write_line"]


def warn(message: str) -> None:
    """Tell the user once, on one line, never raising."""
    say_once(message, stacklevel=3)


def print_warning(message: str) -> None:
    """The command line's and the exporter process's warning: the same one line, every time."""
    write_line(f"otel-profiler: warning: {terminal_safe(message)}")


def print_error(message: str) -> None:
    """The command line's error line (``otel-profiler: error: ...``), naming the input and what
    is wrong with it."""
    write_line(f"otel-profiler: error: {terminal_safe(message)}")
