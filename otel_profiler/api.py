"""The Python API a training script touches: ``Profiler``, ``annotate``, ``step``, ``step_context``.

``annotate`` is the hot path: entering pushes one ``perf_counter_ns`` on the calling thread's stack,
leaving pops it and appends one tuple to that thread's log (``otel_profiler.live.steps.markers``). No lock, no
OpenTelemetry span object. When no session records, the same calls cost a few hundred ns and keep
nothing. With ``OTEL_PROFILER_NVTX=true`` on a GPU, ``annotate`` ranges are also NVTX ranges
(``markers.nvtx``), so Nsight Systems shows them. Nothing here raises into user code once profiling is on; a failing session turns itself off
with one warning.
"""

from __future__ import annotations

import functools
import logging
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from .live.steps import markers

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from .live.session import Session

__all__ = ["Profiler", "annotate", "annotation_begin", "annotation_end", "step", "step_context"]

F = TypeVar("F", bound=Callable[..., Any])
_ANNOTATION = markers.ANNOTATION
_local = markers.local


class annotate:
    """A named range on the calling thread: ``with annotate("forward", layer=3):`` or ``@annotate("f")``.

    Ranges nest; one object may be entered by several threads or recursively.
    """

    __slots__ = ("name", "attributes")

    def __init__(self, name: str, **attributes: Any) -> None:
        self.name = name
        self.attributes = attributes or None

    def __enter__(self) -> "annotate":
        if markers.nvtx is not None:
            _nvtx_push(self.name)
        _local.stack.append(perf_counter_ns())
        return self

    def __exit__(self, *exc: Any) -> None:
        end = perf_counter_ns()
        log = _local
        if log.stack:
            start = log.stack.pop()
            if markers.active:
                log.events.append((_ANNOTATION, self.name, start, end, self.attributes))
        if markers.nvtx is not None:
            _nvtx_pop()

    def __call__(self, fn: F) -> F:
        name, attributes = self.name, self.attributes

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if markers.nvtx is not None:
                _nvtx_push(name)
            start = perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                if markers.active:
                    _local.events.append((_ANNOTATION, name, start, perf_counter_ns(), attributes))
                if markers.nvtx is not None:
                    _nvtx_pop()

        return wrapper  # type: ignore[return-value]


def annotation_begin(name: str, **attributes: Any) -> tuple:
    """Open a range that need not nest lexically; close it with :func:`annotation_end`."""
    if markers.nvtx is not None:
        return (name, perf_counter_ns(), attributes or None, _nvtx_start(name))
    return (name, perf_counter_ns(), attributes or None)


def annotation_end(handle: tuple) -> None:
    """Close a range opened by :func:`annotation_begin` (recorded on the closing thread)."""
    end = perf_counter_ns()
    try:
        name, start, attributes = handle[:3]
        nvtx_id = handle[3] if len(handle) > 3 else None
    except (TypeError, ValueError, IndexError):
        return
    if markers.active:
        _local.events.append((_ANNOTATION, name, start, end, attributes))
    if nvtx_id is not None and markers.nvtx is not None:
        try:
            markers.nvtx[3](nvtx_id)
        except Exception:
            log.debug("an NVTX range end failed", exc_info=True)


def _nvtx_push(name: str) -> None:
    try:
        markers.nvtx[0](name)  # type: ignore[index]
    except Exception:  # never into user code; NVTX gone (e.g. after fork): off
        log.debug("an NVTX push failed; NVTX is off", exc_info=True)
        markers.nvtx = None


def _nvtx_pop() -> None:
    try:
        markers.nvtx[1]()  # type: ignore[index]
    except Exception:
        log.debug("an NVTX pop failed; NVTX is off", exc_info=True)
        markers.nvtx = None


def _nvtx_start(name: str) -> Any:
    try:
        return markers.nvtx[2](name)  # type: ignore[index]
    except Exception:
        log.debug("an NVTX range start failed; NVTX is off", exc_info=True)
        markers.nvtx = None
        return None


def step() -> None:
    """Mark a training-step boundary: the current step ends and the next begins."""
    from .live.session import current

    session = current()
    if session is not None:
        session.step_boundary(manual=True)


_MAX_STEP = 2**63 - 2  # step numbers (and the next one) are int64 in the profile
_bad_step_said = False


def _step_number(value: Any) -> int | None:
    """``value`` as a step number (what ``int`` makes of it, from 0), or None; the first value
    that is none is named in one warning (later ones are not: a loop would repeat it)."""
    global _bad_step_said
    try:
        number = int(value)
        if 0 <= number <= _MAX_STEP:
            return number
    except Exception:  # TypeError, ValueError, OverflowError, or a user __int__ failing its own way
        log.debug("a step number could not be read as an integer", exc_info=True)
    if not _bad_step_said:
        _bad_step_said = True
        from .profiler_warnings import warn

        try:
            import reprlib

            shown = reprlib.repr(value)
        except Exception:
            log.debug("a step value could not be shown", exc_info=True)
            shown = f"a {type(value).__name__}"
        warn(f"step_context({shown}): not a step number (an integer from 0); such blocks are not "
             "recorded as steps")
    return None


class step_context:
    """``with step_context(n):`` records step ``n`` as exactly the time spent inside the block.
    A value that is no step number (``step_context("abc")``) gives one warning and records nothing;
    the block runs as it would without the profiler."""

    __slots__ = ("number", "_start")

    def __init__(self, number: int) -> None:
        self.number = _step_number(number)
        self._start = 0

    def __enter__(self) -> "step_context":
        from .live.session import current

        self._start = perf_counter_ns()
        number = self.number
        session = current() if number is not None else None
        if session is not None and number is not None:
            session.step_begin(number)
        return self

    def __exit__(self, *exc: Any) -> None:
        from .live.session import current

        number = self.number
        session = current() if number is not None else None
        if session is not None and number is not None:
            session.step_end(number, self._start, perf_counter_ns())


class Profiler:
    """Profile a block or a span of the program: ``with Profiler(): train()`` or ``start()``/``stop()``.

    Keyword options override the matching ``OTEL_PROFILER_*`` variables (``steps="100:110"`` is
    ``OTEL_PROFILER_STEPS``; ``activities="gpu,cpu_op"`` is ``OTEL_PROFILER_ACTIVITIES``) and are
    validated the same way. A step range may be given as a value: ``steps=(100, 110)`` (``None``
    for none) reaches the session as that pair. When a zero-code session already runs, the profiler joins it and
    ``stop()`` only flushes.
    """

    def __init__(self, **options: Any) -> None:
        self.options = options
        self._owned = False
        self._session: Session | None = None
        self.folder: str | None = None
        """The profile folder this run writes to (None before ``start`` or when profiling is off)."""

    def start(self) -> "Profiler":
        from .live.session import current, start_session

        existing = current()
        if existing is not None:
            self._session = existing
        else:
            self._session = start_session(origin="api", overrides=self.options)
            self._owned = self._session is not None
        if self._session is not None:
            self.folder = self._session.folder
            self._session.step_boundary(manual=False, explicit_start=True)
        return self

    def stop(self) -> str | None:
        """Stop (or, for a joined session, flush) and return the profile folder."""
        session, self._session = self._session, None
        if session is None:
            return None
        if self._owned:
            session.close()
        else:
            session.flush()
        return session.folder

    def __enter__(self) -> "Profiler":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
