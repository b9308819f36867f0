"""What reaches a terminal: text made safe to print, and warnings on one line, for every layer
(``otel_profiler.names`` and ``otel_profiler.profiler_warnings`` build on this).

- ``terminal_safe(text)``: control characters (C0, DEL, C1: so every escape sequence's ESC or
  CSI) and lone surrogates (undecodable bytes of a file name) written as Python escapes (``\\x1b``,
  ``\\n``, ``\\udcff``), so a name in a trace, a file name or a process name can neither move the
  cursor, clear the screen, retitle the window nor write the clipboard, and stays on its line.
- ``say_once(message)`` prints ``otel-profiler: warning: <message>`` (made safe) on stderr once per
  message and never raises. Where Python's warning machinery is being recorded
  (``warnings.catch_warnings(record=True)``, pytest) or redirected (``logging.captureWarnings``),
  the message is issued as a ``ProfilerWarning`` instead, so it is recorded there, and filters
  (``-W ignore::...``) apply. Printed directly otherwise, because Python's own display takes two
  lines (file and line number, then the source line that issued it), which tells a user nothing.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import warnings

log = logging.getLogger("otel_profiler." + __name__)

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: "re.Match[str]") -> str:
    char = match.group()
    code = ord(char)
    return _SHORT_ESCAPES.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def terminal_safe(text: str) -> str:
    """``text`` with its control characters and lone surrogates escaped (see the module docstring);
    one pass, no copy when there is nothing to escape."""
    text = str(text)
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text


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


def write_line(line: str) -> None:
    """``line`` and its newline on stderr in one write: ``print`` writes them apart, so a line another
    thread or process prints at the same moment could land between them."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def say_once(message: str, stacklevel: int = 2) -> None:
    """Tell the user once, on one line, never raising (stderr may be unusable, e.g. inside a
    signal handler). ``stacklevel`` as ``warnings.warn`` takes it, counted from the caller."""
    try:
        message = terminal_safe(message)
        if not _default_display():
            warnings.warn(f"otel-profiler: {message}", ProfilerWarning, stacklevel=stacklevel + 1)
            return
        with _lock:
            if message in _said:
                return
            _said.add(message)
        if not _filtered_out():
            write_line(f"otel-profiler: warning: {message}")
    except Exception:
        log.debug("printing a warning line failed", exc_info=True)
