"""The profiler's warnings. Inside a training process, ``warn`` says each message once, on one line
(``otel-profiler: warning: ...`` on stderr), and never raises. Outside one (the command line, the
exporter process), ``print_warning`` prints the same line every time it is called.

Where Python's warning machinery is being recorded (``warnings.catch_warnings(record=True)``,
pytest) or redirected (``logging.captureWarnings``), the message is issued as a
``ProfilerWarning`` instead, so it is recorded there, and filters (``-W ignore::...``) apply.
Printed directly otherwise, because Python's own display takes two lines (file and line number,
then the source line of the profiler that issued it), which tells a user nothing.
"""

from __future__ import annotations

import sys
import threading
import warnings


class ProfilerWarning(RuntimeWarning):
    """Everything the profiler has to tell the user (bad settings, backing off, a failure)."""


_said: set[str] = set()
_lock = threading.Lock()


def _default_display() -> bool:
    """Whether warnings would be shown by Python's default display (nobody records them)."""
    original = getattr(warnings, "_showwarning_orig", None)
    impl = getattr(warnings, "_showwarnmsg_impl", None)
    return original is not None and warnings.showwarning is original and \
        getattr(impl, "__module__", None) == "warnings" and getattr(impl, "__name__", "") == "_showwarnmsg_impl"


def _filtered_out() -> bool:
    """A ``-W``/``filterwarnings`` rule that silences ProfilerWarning (or all warnings)."""
    for action, message, category, module, _ in warnings.filters:
        if issubclass(ProfilerWarning, category) and (message is None or message.match("otel-profiler")) \
                and module is None:
            return action == "ignore"
    return False


def warn(message: str) -> None:
    """Tell the user once, on one line, never raising (stderr may be unusable, e.g. inside a
    signal handler)."""
    try:
        if not _default_display():
            warnings.warn(f"otel-profiler: {message}", ProfilerWarning, stacklevel=3)
            return
        with _lock:
            if message in _said:
                return
            _said.add(message)
        if not _filtered_out():
            print(f"otel-profiler: warning: {message}", file=sys.stderr, flush=True)
    except Exception:
        pass


def print_warning(message: str) -> None:
    """The command line's and the exporter process's warning: the same one line, every time."""
    print(f"otel-profiler: warning: {message}", file=sys.stderr, flush=True)
