"""Live capture through ``torch.profiler`` (Kineto), read back without writing trace JSON.

``KinetoSource.start()`` opens a ``torch.profiler.profile`` session with CUDA activities when a GPU
is present, CPU ops only when asked and the allocator's ``[memory]`` events (``profile_memory``) with
the ``memory`` activity; ``stop()`` closes it, copies the plain fields of
``prof.profiler.kineto_results.events()`` (``_KinetoEvent`` objects) out of torch at once and
returns a ``KinetoCapture`` whose ``to_batch()`` (later, e.g. from a background thread) converts them
into an ``EventBatch``: no torch result object outlives its window (see ``KinetoCapture``).
When operators are recorded, ``nn.Module`` calls are recorded too (``records_modules``), as
recorded traces have them. Kineto's own log lines at each start and stop
(``USDT: ... profiler_start``) are kept off the job's stderr (``stderr_filter``).

Each ``_KinetoEvent`` is turned into the same typed event the trace-file reader decodes from JSON
(category = ``activity_type()``, args = ``metadata_json()`` plus the correlation fields) and then goes
through ``trace_files``' conversion, so live and file captures give identical kinds and columns.
Field meanings (``torch/csrc/autograd/init.cpp``): ``device_index`` is the device, or the process id
for CPU events; ``device_resource_id`` is the stream, or the thread id for CPU events;
``correlation_id`` is the CUPTI correlation id of device and runtime events and the op's own id
(the JSON "External id") for CPU ops; ``linked_correlation_id`` is the linked CPU op's id.

Kineto's metadata (bytes of copies and sets, grid, block, registers, shared memory, sync details)
reaches ``metadata_json()`` only when the experimental config sets ``expose_kineto_event_metadata``
(without it the text is empty): the source always asks for it. On an older torch without
the option, a window that captured GPU activities is read back through the Chrome trace torch
writes (``_ProfilerResult.save``, a private temporary file) instead, so no field is lost; so is
every window on a torch whose event objects have no ``activity_type()`` (2.11 has none).

Imports torch only when a source is created; never imports otel_profiler.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import threading
from typing import Any, Callable, Iterable, Iterator

from cuda_tracer.model.events import EventBatch, Kind, kinds_in
from cuda_tracer.profile import RankProfile, TraceError
from cuda_tracer.capture import module_names
from cuda_tracer.capture.kineto_events import event_row, rows_to_profile
from cuda_tracer.capture.stderr_filter import kineto_lines_dropped
from cuda_tracer.capture.subscriber import ProfilerBusy, other_profiler_active, own_session
from cuda_tracer.trace_json.files import read_trace
from cuda_tracer.trace_json.mend import mend_trace_file

log = logging.getLogger("otel_profiler." + __name__)  # a child of the otel_profiler logger

GPU_ACTIVITIES = frozenset({"kernel", "memcpy", "memset", "sync", "runtime", "driver"})
CPU_ACTIVITIES = frozenset({"cpu_op"})
MEMORY_ACTIVITY = "memory"  # profile_memory: the allocator's [memory] events (a CPU-side record)

_ACTIVITY_OF_KIND = {
    Kind.KERNEL: "kernel", Kind.MEMCPY: "memcpy", Kind.MEMSET: "memset", Kind.SYNC: "sync",
    Kind.RUNTIME: "runtime", Kind.DRIVER: "driver", Kind.CPU_OP: "cpu_op",
    Kind.USER_ANNOTATION: "cpu_op", Kind.PYTHON_FUNCTION: "cpu_op", Kind.STEP: "cpu_op",
    Kind.GPU_USER_ANNOTATION: "kernel", Kind.MEMORY: MEMORY_ACTIVITY, Kind.INSTANT: "cpu_op",
}
MODULE_PREFIX = "nn.Module: "
"""Python function events kept from a live window: module calls only (the rest is every Python call)."""


def cuda_available() -> bool:
    """True when torch is imported and sees a CUDA device (never imports torch itself)."""
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_available())
    except Exception:
        log.debug("asking torch whether CUDA is available failed", exc_info=True)
        return False


def unavailable_reason(activities: Iterable[str]) -> str | None:
    """Why ``KinetoSource(activities)`` would capture nothing, or None when it can run."""
    wanted = set(activities)
    if "torch" not in sys.modules:
        return "torch is not imported"
    if wanted & CPU_ACTIVITIES or MEMORY_ACTIVITY in wanted:
        return None
    if wanted & GPU_ACTIVITIES and cuda_available():
        return None
    return "no CUDA device and CPU ops not requested"


_starting = threading.local()  # ``ours``: this thread is starting one of our own windows
_compiling_job = False  # the job compiles (``compiling_job``): windows record no module calls


def compiling_job() -> None:
    """The job calls ``torch.compile``: from now on no window records module calls, whose Python
    tracer (``with_stack``) would record every Python call of Dynamo's compilations in a window
    (a compiled-autograd job's window grew to 9.5 GB)."""
    global _compiling_job
    _compiling_job = True
    module_names.remove_all()


def watch_user_profilers(on_user_start: Callable[[], None]) -> None:
    """Call ``on_user_start()`` (in the starting thread, before torch does anything) whenever a
    profiler that is not one of our windows starts in this process: ``torch.profiler.profile``, the
    autograd profiler, ``emit_nvtx``, in any form (context manager, ``start()``, a schedule's warm-up).
    Patches the two functions of ``torch.autograd.profiler`` every one of them calls; once per process."""
    module = sys.modules.get("torch.autograd.profiler")
    if module is None:
        return
    for name in ("_prepare_profiler", "_enable_profiler"):
        original = getattr(module, name, None)
        if original is None or getattr(original, "otel_profiler_watch", False):
            continue

        def starting(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if not getattr(_starting, "ours", False):
                try:
                    on_user_start()
                except Exception:
                    log.debug("yielding to the job's own profiler failed", exc_info=True)
            return _original(*args, **kwargs)

        starting.otel_profiler_watch = True  # type: ignore[attr-defined]
        setattr(module, name, starting)


def other_profiler() -> str | None:
    """Why Kineto must not start now (``cuda_tracer.capture.subscriber`` rules), or None."""
    return other_profiler_active()


class PythonTracerFailed(RuntimeError):
    """torch's Python tracer (``with_stack``, for module calls) failed as a window stopped (torch 2.6:
    ``Python replay stack is empty``); later windows record operators without module calls."""


class KinetoSource:
    """One torch.profiler session per capture window."""

    def __init__(self, activities: Iterable[str], rank: int = -1) -> None:
        import torch.profiler as tp

        self.activities = frozenset(activities)
        self.rank = rank
        kinds = []
        if self.activities & CPU_ACTIVITIES or MEMORY_ACTIVITY in self.activities:
            kinds.append(tp.ProfilerActivity.CPU)
        if self.activities & GPU_ACTIVITIES and cuda_available():
            kinds.append(tp.ProfilerActivity.CUDA)
        self._kinds = kinds
        self._prof: Any = None
        self._owned: Any = None
        self.metadata_exposed = False  # set by start(): does metadata_json() carry Kineto's metadata?
        self.modules_failed = False  # torch's Python tracer failed once: no module calls from then on
        self._module_order: module_names.ModuleCallOrder | None = None  # a window's module calls

    @property
    def running(self) -> bool:
        return self._prof is not None

    def start(self) -> None:
        """Begin capturing. Raises ``ProfilerBusy`` when another profiler holds the process."""
        import torch.profiler as tp

        reason = other_profiler()
        if reason is not None:
            raise ProfilerBusy(reason)
        modules = self.records_modules
        owned = own_session("torch_profiler")
        owned.__enter__()  # our session: the CUPTI source's detector must not count it as the user's
        try:  # Kineto may write its device probe's line as early as the profile is made (torch 2.4)
            with kineto_lines_dropped(), cycle_warning_held():
                prof = tp.profile(activities=self._kinds, record_shapes=self.records_shapes, with_stack=modules,
                                  profile_memory=MEMORY_ACTIVITY in self.activities,
                                  experimental_config=self._experimental_config())
                _starting.ours = True
                try:
                    prof.start()
                finally:
                    _starting.ours = False
                if modules:  # after the start: the hook sees what torch's tracer sees
                    self._module_order = module_names.start_order()
        except BaseException:
            owned.__exit__(None, None, None)
            raise
        self._prof, self._owned = prof, owned

    @property
    def records_shapes(self) -> bool:
        """Whether windows record operators' input shapes (``record_shapes``): when operators are
        recorded, so that FLOPs, MFU and the roofline come from live windows too. Costs 3 to 6%
        of a step's time inside a window on a CPU loop (``benchmarks/overhead.py``)."""
        return bool(self.activities & CPU_ACTIVITIES)

    @property
    def records_modules(self) -> bool:
        """Whether windows record ``nn.Module`` calls: when operators are recorded (``cpu_op``). In
        eager mode torch records them through its Python tracer (``with_stack``), whose other Python
        function events are dropped at copy-out (``MODULE_PREFIX``). ``with_modules`` is not asked
        for: it only ever recorded TorchScript models, and torch 2.15 warns about it. Not in a job
        that compiles (``compiling_job``), nor after the Python tracer failed once."""
        return bool(self.activities & CPU_ACTIVITIES) and not (self.modules_failed or _compiling_job)

    def _experimental_config(self) -> Any:
        """Kineto's experimental options: event metadata always exposed, cuda_sync events (opt-in in
        torch.profiler) when ``sync`` is wanted with CUDA. Sets :attr:`metadata_exposed`; an option
        this torch does not know is dropped rather than failing the window."""
        import torch.profiler as tp

        options: dict[str, Any] = {"expose_kineto_event_metadata": True}
        if "sync" in self.activities and tp.ProfilerActivity.CUDA in self._kinds:
            options["enable_cuda_sync_events"] = True
        self.metadata_exposed = False
        try:
            import torch

            config_type = torch._C._profiler._ExperimentalConfig
        except Exception:  # no experimental config at all
            log.debug("torch has no experimental profiler config; none is set", exc_info=True)
            return None
        without_metadata = {k: v for k, v in options.items() if k != "expose_kineto_event_metadata"}
        for attempt in (options, without_metadata, {}):
            try:
                config = config_type(**attempt)
            except TypeError:  # an older torch without one of these options
                continue
            self.metadata_exposed = "expose_kineto_event_metadata" in attempt
            return config
        return None

    def stop(self) -> "KinetoCapture":
        prof, self._prof = self._prof, None
        if prof is None:
            return KinetoCapture(None, self.activities, self.rank)
        try:
            with kineto_lines_dropped():
                prof.stop()
        except RuntimeError as exc:
            if not self.records_modules or "profiler_python" not in str(exc):
                raise
            _release(prof)
            if not _disabled_left_over():
                raise  # torch keeps its profiler on: no later window can start
            self.modules_failed = True
            raise PythonTracerFailed(str(exc).split("\n")[0]) from exc
        finally:
            self._owned.__exit__(None, None, None)
            order, self._module_order = self._module_order, None
            names = order.stop() if order is not None else {}
        capture = KinetoCapture(prof.profiler.kineto_results, self.activities, self.rank,
                                self.reads_through_file, names)
        _release(prof)
        capture.copy_out()
        return capture

    @property
    def reads_through_file(self) -> bool:
        """Read the window through the trace file: on a torch whose event objects cannot name their
        kind (no ``activity_type()``, as in torch 2.11), in a GPU window on a torch whose events carry
        no metadata, and in a window recording memory (the event objects carry no allocator totals)."""
        import torch.profiler as tp

        return (MEMORY_ACTIVITY in self.activities or not events_name_their_kind()
                or (not self.metadata_exposed and tp.ProfilerActivity.CUDA in self._kinds))


def _disabled_left_over() -> bool:
    """After a stop that failed half-way, turn off the profiler torch left enabled (its events are
    lost), so that the next window can start. False when it stays on."""
    try:
        import torch

        autograd = torch._C._autograd
        if autograd._profiler_enabled():
            with kineto_lines_dropped():
                autograd._disable_profiler()
        if autograd._profiler_enabled():
            return False
        profiler = sys.modules.get("torch.autograd.profiler")
        said_stopped = getattr(profiler, "_run_on_profiler_stop", None)  # torch's Python-side flag
        if callable(said_stopped):
            said_stopped()
        return not getattr(profiler, "_is_profiler_enabled", False)
    except Exception:
        log.debug("turning off the profiler left enabled by a failed stop failed", exc_info=True)
        return False


def events_name_their_kind() -> bool:
    """Whether this torch's ``_KinetoEvent`` has ``activity_type()`` (the trace's category), without
    which no event object can be told a kernel from a copy or an operator."""
    try:
        import torch

        return hasattr(torch._C._autograd._KinetoEvent, "activity_type")
    except Exception:  # no such class: the file is the one reading left
        log.debug("torch has no _KinetoEvent class; windows are read through the trace file", exc_info=True)
        return False


# torch 2.10 and 2.11 give this at the first profile of a process started without ``acc_events``,
# cycles or not (pytorch/pytorch#180348; 2.12 gives it only when a cycle's events are cleared).
# ``acc_events=True`` would silence it but makes torch parse every event at each stop.
CYCLE_WARNING = "clears events at the end of each cycle"


@contextlib.contextmanager
def cycle_warning_held() -> Iterator[None]:
    """Keep torch's cycle warning (``CYCLE_WARNING``) out of the job's warnings while a window
    starts: for that moment torch's ``_warn_once`` passes on every message but that one, which is
    not marked as shown either, so the job's own profiles warn as they would have. Touches no
    warning filter (changing those would show the job's earlier warnings again)."""
    module = sys.modules.get("torch.profiler.profiler")
    original = getattr(module, "_warn_once", None)
    if not callable(original):
        yield
        return

    def warn_once_but_the_cycle_warning(message: Any, *args: Any, **kwargs: Any) -> None:
        if CYCLE_WARNING not in str(message):
            original(message, *args, **kwargs)

    setattr(module, "_warn_once", warn_once_but_the_cycle_warning)
    try:
        yield
    finally:
        setattr(module, "_warn_once", original)


def _release(prof: Any) -> None:
    """Free the torch.profiler objects of a stopped window now, in this thread.

    ``torch.profiler.profile`` sits in reference cycles (its ``action_map`` holds its own bound
    methods), so without this it would be freed by the cyclic garbage collector, in whatever thread
    allocates at that moment: in the flush thread, while the training thread starts or stops the
    next window, that corrupts the heap (SIGSEGV, ``free(): invalid next size``). Emptying both
    objects' attributes breaks the cycles, so reference counting frees them here and now."""
    inner = getattr(prof, "profiler", None)
    for obj in (inner, prof):
        try:
            vars(obj).clear()
        except TypeError:  # no __dict__: nothing of ours to break
            pass


class KinetoCapture:
    """The result of one window; ``to_batch()`` converts it.

    torch's result object must not outlive its window in another thread: destroying it while the
    next window starts or stops corrupts the heap (seen in Kineto's trace logger as SIGSEGV or
    ``free(): invalid next size`` with back-to-back windows). So
    ``copy_out()``, called by ``KinetoSource.stop()`` in the thread that owns the profiler and before
    the next window starts, takes the events' plain fields (or torch's trace file) out and drops
    the torch object; ``to_batch()`` then converts those copies in any thread.

    ``via_file``: read the window through the Chrome trace torch writes rather than the event
    objects (for a torch whose events carry no metadata, see the module docstring)."""

    def __init__(self, results: Any, activities: frozenset[str], rank: int,
                 via_file: bool = False, names: dict[str, str] | None = None) -> None:
        self._results = results
        self.module_names = names or {}  # torch's names of module calls -> ours (``module_names``)
        self.activities = activities
        self.rank = rank
        self.via_file = via_file
        self._rows: list[tuple] | None = None  # the events' fields, once copied out
        self._trace_folder: tempfile.TemporaryDirectory | None = None  # torch's trace, via_file

    def copy_out(self) -> None:
        """Copy what ``to_batch`` needs out of torch's result object, then drop that object."""
        results, self._results = self._results, None
        if results is None:
            return
        if self.via_file:
            folder = tempfile.TemporaryDirectory(prefix="otel-profiler-kineto-")  # created 0700
            with kineto_lines_dropped():  # torch 2.4 probes the devices as it writes the trace
                results.save(os.path.join(folder.name, "window.json"))
            self._trace_folder = folder
        else:
            rows = [event_row(e) for e in results.events()]
            self._rows = [r for r in rows if r is not None
                          and (r[0] != "python_function" or r[1].startswith(MODULE_PREFIX))]
        del results

    def to_batch(self) -> EventBatch:
        """The window's events (once: a second call gives an empty batch)."""
        self.copy_out()  # a capture made without KinetoSource.stop()
        rows, self._rows = self._rows, None
        folder, self._trace_folder = self._trace_folder, None
        if folder is not None:
            with folder:
                batch = modules_only(_read_window_file(os.path.join(folder.name, "window.json")).batch)
            if len(batch):
                batch.columns["rank"][:] = self.rank
        elif rows is not None:
            batch = rows_to_profile(rows, self.rank).batch
        else:
            return EventBatch.empty()
        batch.strings = module_names.renamed(batch.strings, self.module_names)
        return keep_activities(batch, self.activities)


def _read_window_file(path: str) -> RankProfile:
    """torch's trace of a window; one with stray bytes in a name (torch 2.4) is mended first."""
    try:
        return read_trace(path)
    except TraceError:
        mend_trace_file(path)
        return read_trace(path)  # a TraceError now: the flush leaves this window's events out


def modules_only(batch: EventBatch) -> EventBatch:
    """The batch without its Python function events other than module calls (``MODULE_PREFIX``),
    as ``copy_out`` keeps the event objects."""
    import numpy as np

    from cuda_tracer.model.array_sets import distinct

    python = batch.kind == Kind.PYTHON_FUNCTION
    names = distinct(batch.name[python])  # each name checked once, not each event
    other = names[[not batch.strings[i].startswith(MODULE_PREFIX) for i in names.tolist()]]
    if not len(other):
        return batch
    return batch.take(np.flatnonzero(~(python & np.isin(batch.name, other))))


def keep_activities(batch: EventBatch, activities: frozenset[str]) -> EventBatch:
    """Only the rows whose kind belongs to a requested activity."""
    import numpy as np

    wanted = [int(k) for k, a in _ACTIVITY_OF_KIND.items() if a in activities]
    return batch.take(kinds_in(batch.kind, wanted))
