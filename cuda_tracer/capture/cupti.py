"""Live GPU capture through NVIDIA's cupti-python (optional extra ``cupti``), for frameworks other than torch.

Lifecycle (:class:`CuptiSource`): ``start()`` checks that no other profiler owns CUPTI
(``cuda_tracer.capture.subscriber``), imports ``cupti`` lazily, registers the buffer callbacks, enables the
activity kinds and calibrates the clock; ``collect()`` flushes completed buffers and converts them;
``stop()`` disables the kinds, force-flushes and converts the rest. Any failure turns capture off
with one warning and a reason in :attr:`CuptiSource.reason`; nothing raises into the host program.

Hot path: CUPTI fills buffers on its own; ``_buffer_completed`` (called by cupti-python with the
buffer's record objects) only appends that list to a deque and returns. The records are views into
CUPTI's activity buffer, not copies: cupti-python's buffer manager counts the record objects of each
buffer (``BUFFER_BYTES``) and releases it when the last one goes (each record's deallocation
decrements that count; tests/gpu checks the records stay valid after the callback returns), so a
pending buffer pins its memory until
``collect()``/``stop()`` convert its records to columns and drop them. The deque is therefore bounded
twice, in records and in buffers; a buffer that would overflow either bound is dropped at once and
counted (``lost_records``), next to CUPTI's own count of records it had no buffer space for
(``cupti_dropped_records``, from ``activity_get_num_dropped_records``). Conversion to columns runs
in ``collect()``, on whichever thread the caller uses, never inside a CUDA call.

The live session uses it through :class:`CuptiWindowSource` (end of this module) when torch is not
imported; with torch it uses ``kineto.KinetoSource``, which holds CUPTI itself.

NVTX markers reach CUPTI only when ``NVTX_INJECTION64_PATH`` names libcupti before the process first
uses NVTX, and only the copy of libcupti that cupti-python loaded (a path to another copy loads a
second libcupti that no one reads): :func:`libcupti_path` names that copy, and
:meth:`CuptiSource.stats` says whether the variable was set and whether it names it.
"""

from __future__ import annotations

import collections
import ctypes
import importlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from cuda_tracer.capture.cupti_records import (ACTIVITY_KIND, RecordConverter, overhead_names_from,
                            strip_api_version)
from cuda_tracer.model.events import EventBatch
from cuda_tracer.capture.subscriber import (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS, ProfilerBusy, back_off,
                         other_profiler_active, reason_from_cupti_error)

log = logging.getLogger("otel_profiler." + __name__)  # a child of the otel_profiler logger

DEFAULT_ACTIVITIES = ("CONCURRENT_KERNEL", "MEMCPY", "MEMCPY2", "MEMSET", "RUNTIME", "DRIVER",
                      "SYNCHRONIZATION", "MARKER", "NAME", "OVERHEAD")
BUFFER_BYTES = 8 << 20  # NVIDIA's samples use 8 MiB with no record limit
MAX_PENDING_RECORDS = 2_000_000  # bound on converted-later records held in memory
MAX_PENDING_BUFFERS = 64  # ... and on the buffers they pin (64 x 8 MiB = 512 MiB)


# ---------------------------------------------------------------------------- the optional module
def load_cupti() -> tuple[Any, str | None]:
    """``(cupti.cupti module, None)``, or ``(None, reason)`` when cupti-python cannot be used here."""
    try:
        return importlib.import_module("cupti.cupti"), None
    except ModuleNotFoundError as exc:
        if exc.name in ("cupti", "cupti.cupti"):
            return None, "cupti-python is not installed (pip install -e '.[cupti]' in the otel-profiler clone)"
        return None, f"cupti-python failed to import: {exc}"
    except Exception as exc:  # e.g. libcupti or the CUDA driver missing: an OSError from dlopen
        return None, f"cupti-python failed to load: {type(exc).__name__}: {exc}"


def loaded_libcupti() -> list[str]:
    """Every libcupti file mapped into this process (``/proc/self/maps``), in load order."""
    found: list[str] = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(maxsplit=5)
                path = parts[5].strip() if len(parts) == 6 else ""
                if os.path.basename(path).startswith("libcupti.so") and path not in found:
                    found.append(path)
    except OSError:  # not Linux
        pass
    return found


def libcupti_path(cupti: Any) -> str | None:
    """The libcupti file that ``cupti`` (the loaded cupti-python module) uses: the one to name in
    ``NVTX_INJECTION64_PATH``. cupti-python loads it on its first call (a harmless
    ``get_timestamp()`` is made to be sure), reusing a copy already loaded under the same name, as
    torch's CUDA build loads one. None when no copy, or more than one, is mapped (then which one
    cupti-python uses cannot be told from here)."""
    try:
        cupti.get_timestamp()
    except Exception:  # no driver: libcupti may still have been loaded
        log.debug("CUPTI timestamp failed (no driver?); looking for a loaded libcupti anyway", exc_info=True)
    found = loaded_libcupti()
    return found[0] if len(found) == 1 else None


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


# ---------------------------------------------------------------------------- clock calibration
@dataclass(frozen=True)
class ClockCalibration:
    """``epoch_ns = cupti_ns + offset_ns``, known to within ``± uncertainty_ns``.

    CUPTI timestamps (``cupti.get_timestamp()`` and every record) are ns on CUPTI's own clock. On
    current Linux drivers that clock is usually already the realtime clock (offset near 0), but that
    is not promised, so we measure: read the wall clock, CUPTI's clock, the wall clock again, and
    take the CUPTI reading as simultaneous with the midpoint of the two wall readings. The error is at
    most half the bracket; of several samples the one with the narrowest bracket wins.
    """

    offset_ns: int
    uncertainty_ns: int

    def to_epoch(self, cupti_ns: int) -> int:
        return cupti_ns + self.offset_ns


def calibrate(cupti_now: Callable[[], int], wall_now: Callable[[], int] = time.time_ns,
              samples: int = 9) -> ClockCalibration:
    """Measure the CUPTI → Unix-epoch offset (see :class:`ClockCalibration`)."""
    best: tuple[int, int] | None = None  # (bracket, offset)
    for _ in range(max(1, samples)):
        w0 = wall_now()
        c = int(cupti_now())
        w1 = wall_now()
        bracket = w1 - w0
        if bracket < 0:  # wall clock stepped backwards between the reads: unusable sample
            continue
        offset = w0 + bracket // 2 - c
        if best is None or bracket < best[0]:
            best = (bracket, offset)
    if best is None:
        raise RuntimeError("the wall clock went backwards during every calibration sample")
    return ClockCalibration(offset_ns=best[1], uncertainty_ns=(best[0] + 1) // 2)


# ---------------------------------------------------------------------------- module-backed helpers
def api_namer(cupti: Any) -> Callable[[int, int], str]:
    """``(kind, cbid) -> "cudaLaunchKernel"`` through ``cupti.get_callback_name``, cached."""
    domains = {ACTIVITY_KIND["RUNTIME"]: cupti.CallbackDomain.RUNTIME_API,
               ACTIVITY_KIND["DRIVER"]: cupti.CallbackDomain.DRIVER_API}
    cache: dict[tuple[int, int], str] = {}

    def name(kind: int, cbid: int) -> str:
        key = (kind, cbid)
        found = cache.get(key)
        if found is None:
            try:
                found = strip_api_version(str(cupti.get_callback_name(domains[kind], cbid)))
            except Exception:
                log.debug("CUPTI could not name a callback id; a generic name stands in", exc_info=True)
                found = f"{'cuda' if kind == ACTIVITY_KIND['RUNTIME'] else 'cu'}_cbid_{cbid}"
            cache[key] = found
        return found

    return name


def read_dropped_records(cupti: Any) -> int:
    """Records CUPTI dropped for lack of buffer space since the last read (it resets on read).

    cupti-python mirrors the C call: ``activity_get_num_dropped_records(context, stream_id, dropped)``
    with ``dropped`` the address of a ``size_t``. Context 0 and stream 0 name the global queue that
    ``activity_register_callbacks`` buffers use.
    """
    dropped = ctypes.c_size_t(0)
    try:
        cupti.activity_get_num_dropped_records(0, 0, ctypes.addressof(dropped))
    except TypeError:  # a binding that returns the count instead
        return int(cupti.activity_get_num_dropped_records(0, 0) or 0)
    return int(dropped.value)


# ---------------------------------------------------------------------------- the source
class CuptiSource:
    """One CUPTI activity capture for this process. See the module docstring for the lifecycle."""

    name = "cupti"

    def __init__(self, activities: tuple[str, ...] = DEFAULT_ACTIVITIES,
                 buffer_bytes: int = BUFFER_BYTES, max_pending_records: int = MAX_PENDING_RECORDS,
                 rank: int = -1, module: Any = None,
                 max_pending_buffers: int = MAX_PENDING_BUFFERS) -> None:
        self.activities = tuple(activities)
        self.buffer_bytes = int(buffer_bytes)
        self.max_pending_records = int(max_pending_records)
        self.max_pending_buffers = int(max_pending_buffers)
        self.rank = rank
        self.reason: str | None = None
        self.clock: ClockCalibration | None = None
        self.enabled: list[str] = []
        self.refused: dict[str, str] = {}  # activity -> why CUPTI would not enable it
        self._module = module
        self._cupti: Any = None
        self._pending: collections.deque = collections.deque()
        # Each counter has one writer, so no lock is needed: the callback thread writes _appended
        # and _lost_records, the draining thread writes _drained.
        self._appended = 0
        self._drained = 0
        self._lost_records = 0
        self._cupti_dropped = 0
        self._converted = 0
        self._converter: RecordConverter | None = None
        self._lock = threading.Lock()  # one converter user at a time (collect vs stop)
        self.running = False

    # ---------------------------------------------------------------- CUPTI callbacks (hot path)
    def _buffer_requested(self) -> tuple[int, int]:
        return self.buffer_bytes, 0

    def _buffer_completed(self, activities: list) -> None:
        n = len(activities)
        if (self._appended - self._drained + n > self.max_pending_records
                or len(self._pending) >= self.max_pending_buffers):
            self._lost_records += n  # dropping the list releases the buffer back to cupti-python
            return
        self._pending.append(activities)
        self._appended += n

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> bool:
        """Begin capture. Returns False (and warns once, with :attr:`reason`) when it cannot."""
        if self.running:
            return True
        reason = other_profiler_active(count_own=True)
        cupti = self._module
        if reason is None and cupti is None:
            cupti, reason = load_cupti()
        if reason is not None:
            return self._give_up(reason)
        self.enabled, self.refused = [], {}
        try:
            cupti.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
            for activity in self.activities:
                try:
                    cupti.activity_enable(getattr(cupti.ActivityKind, activity))
                    self.enabled.append(activity)
                except Exception as exc:  # e.g. a kind this CUPTI/driver does not support
                    if getattr(exc, "status", None) == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS:
                        raise
                    self.refused[activity] = reason_from_cupti_error(exc)
            if not self.enabled:
                raise RuntimeError("CUPTI enabled none of the requested activity kinds")
            self.clock = calibrate(cupti.get_timestamp)
        except Exception as exc:
            self._disable(cupti)
            return self._give_up(reason_from_cupti_error(exc))
        self._cupti = cupti
        self._converter = RecordConverter(self.clock.offset_ns, api_namer(cupti),
                                          overhead_names_from(cupti), rank=self.rank)
        self.running = True
        return True

    def collect(self) -> EventBatch:
        """Convert every buffer CUPTI has completed so far (asks CUPTI to hand over full ones)."""
        if self.running:
            self._call("activity_flush_all", 0)
        return self._drain()

    def stop(self) -> EventBatch:
        """End capture: disable the kinds, force-flush partial buffers, convert what is left."""
        return self.convert(self.stop_records())

    def stop_records(self) -> list:
        """End capture like :meth:`stop`, but hand back the raw records unconverted (cheap), so the
        caller can :meth:`convert` them later, off the thread that runs the training step."""
        if self.running:
            cupti, self.running = self._cupti, False
            self._disable(cupti)
            self._call("activity_flush_all", 1)
        return self._take_pending()

    def stats(self) -> dict[str, Any]:
        """What was captured and lost, for the profile's metadata."""
        conv = self._converter
        return {
            "source": self.name,
            "running": self.running,
            "reason": self.reason,
            "enabled": list(self.enabled),
            "refused": dict(self.refused),
            "records_converted": self._converted,
            "lost_records": self._lost_records,
            "cupti_dropped_records": self._cupti_dropped,
            "clock_offset_ns": self.clock.offset_ns if self.clock else None,
            "clock_uncertainty_ns": self.clock.uncertainty_ns if self.clock else None,
            "unclosed_markers": len(conv.open_markers) if conv else 0,
            "unmatched_marker_ends": conv.unmatched_marker_ends if conv else 0,
            "skipped_records": {str(k): v for k, v in (conv.skipped if conv else {}).items()},
            **self._nvtx_injection(),
        }

    def _nvtx_injection(self) -> dict[str, Any]:
        """Whether NVTX_INJECTION64_PATH is set, and whether it names the libcupti in use."""
        injection = os.environ.get("NVTX_INJECTION64_PATH")
        cupti = self._cupti if self._cupti is not None else self._module
        library = libcupti_path(cupti) if cupti is not None else None
        return {"nvtx_injection": bool(injection), "libcupti": library,
                "nvtx_injection_is_libcupti": (None if not injection or library is None
                                               else _same_file(injection, library))}

    # ---------------------------------------------------------------- internals
    def _drain(self) -> EventBatch:
        return self.convert(self._take_pending())

    def _take_pending(self) -> list:
        """Every completed buffer's records, in order (no conversion)."""
        records: list = []
        while self._pending:
            buf = self._pending.popleft()
            self._drained += len(buf)
            records.extend(buf)
        if self._cupti is not None:
            try:
                self._cupti_dropped += read_dropped_records(self._cupti)
            except Exception:
                log.debug("reading CUPTI's dropped-record count failed", exc_info=True)
        return records

    def convert(self, records: list) -> EventBatch:
        """Records taken from this source, in the order taken, to an EventBatch."""
        with self._lock:  # the converter carries NVTX ranges open across buffers: one user at a time
            if self._converter is None or not records:
                return EventBatch.empty()
            self._converted += len(records)
            return self._converter.convert(records)

    def _disable(self, cupti: Any) -> None:
        for activity in self.enabled:
            try:
                cupti.activity_disable(getattr(cupti.ActivityKind, activity))
            except Exception:
                log.debug("disabling a CUPTI activity kind failed", exc_info=True)

    def _call(self, fn: str, *args: Any) -> None:
        try:
            getattr(self._cupti, fn)(*args)
        except Exception as exc:  # a flush failing must not take the training job down
            self.refused.setdefault(fn, reason_from_cupti_error(exc))

    def _give_up(self, reason: str) -> bool:
        self.reason = reason
        self.enabled = []
        back_off(self.name, reason)
        return False


# ---------------------------------------------------------------------------- the session's interface
# The live session drives every detailed source alike (as it drives ``kineto.KinetoSource``):
# ``running``; ``start()`` raises ``ProfilerBusy`` when capture cannot begin; ``stop()`` returns a
# capture whose ``to_batch()`` gives the window's EventBatch.
_CUPTI_KINDS = {"kernel": ("CONCURRENT_KERNEL",), "memcpy": ("MEMCPY", "MEMCPY2"), "memset": ("MEMSET",),
                "sync": ("SYNCHRONIZATION",), "runtime": ("RUNTIME",), "driver": ("DRIVER",)}
_ALWAYS = ("MARKER", "NAME", "OVERHEAD")  # NVTX ranges, thread/device names, CUPTI's own cost


def unavailable_reason(activities: Any) -> str | None:
    """Why ``CuptiWindowSource(activities)`` would capture nothing here, or None when it can try
    (the same question ``kineto.unavailable_reason`` answers for torch)."""
    if not set(activities) & set(_CUPTI_KINDS):
        return "no GPU activity requested"
    return load_cupti()[1]


def cupti_activities(activities: Any) -> tuple[str, ...]:
    """CUPTI activity kinds for ``OTEL_PROFILER_ACTIVITIES`` names (kernel, memcpy, ...), in
    ``DEFAULT_ACTIVITIES`` order; names CUPTI cannot capture (``cpu_op``) add nothing."""
    wanted = set(_ALWAYS).union(*(_CUPTI_KINDS.get(a, ()) for a in activities))
    return tuple(kind for kind in DEFAULT_ACTIVITIES if kind in wanted)


class CuptiCapture:
    """One window's raw records; ``to_batch()`` converts them (the session calls it from its flush
    thread, so a window's records are not converted while a training step waits)."""

    def __init__(self, source: CuptiSource, records: list) -> None:
        self._source, self._records = source, records

    def to_batch(self) -> EventBatch:
        records, self._records = self._records, []
        return self._source.convert(records)


class CuptiWindowSource:
    """The session's detailed source for jobs without torch (TensorFlow, JAX, plain CUDA), over
    :class:`CuptiSource`. ``start`` raises ``ProfilerBusy(reason, announced=True)`` when CUPTI cannot
    start: the source has already said why in its one warning."""

    def __init__(self, activities: Any, rank: int = -1, module: Any = None) -> None:
        self.source = CuptiSource(cupti_activities(activities), rank=rank, module=module)

    @property
    def running(self) -> bool:
        return self.source.running

    def start(self) -> None:
        if not self.source.start():
            raise ProfilerBusy(self.source.reason or "CUPTI did not start", announced=True)

    def stop(self) -> CuptiCapture:
        return CuptiCapture(self.source, self.source.stop_records())
