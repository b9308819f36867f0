"""The process-wide profiling session every way of enabling ends in (API, env var, `run`, instrumentor).

A session owns the settings (``otel_profiler.config``), its ``Lifecycle`` (recording, closing,
closed), the step counter, and its parts, each an object of its own that owns its state and is
handed the parts it works with:

- ``output.RankOutput``: the profile folder, this rank's identity and metadata; at exit only this
  rank's last part is written here: ``summary.json`` is left to ``run`` or to one detached process
  per folder (``summary_later``, when ``OTEL_PROFILER_SUMMARY_AT_EXIT`` is on);
- ``windows.capture.DetailedWindows``: the window policy (``windows.policy``) applied at each step:
  detailed windows (``windows.state.WindowState``) opened, handed over in parts and closed (Kineto
  when torch is imported, else CUPTI);
- ``steps.sources.StepSources``: where steps come from when the code does not say (the torch hooks
  report to the session, which hands their reports on), and the time fallback window;
- ``windows.flushing.Flusher``: the flush thread that writes buffered events and finished windows as
  the next part (once ``OTEL_PROFILER_FLUSH_EVENTS`` accumulate, at least every ``..._INTERVAL_S``);
- ``hygiene.ProcessHygiene``: SIGTERM (flush, then die of the signal) and fork (a forked child
  records nothing, never inherits the flush lock held);
- ``wiring.ExportWiring``: the metrics (started at the first recorded step) and the OTLP exporter
  (made at the first write); at exit the exporter gets ``CLOSE_NETWORK_S`` of network time, then
  spools what is not delivered; a frozen exporter is killed, not waited for (``docs/delivery.md``);
- ``trace_context``: the parent's ``TRACEPARENT`` (each rank's run span, sent with the last part),
  the job's OpenTelemetry span current as each step begins (docs/trace-context.md).

Never raising into user code: any failure gives one warning and turns profiling off, except a
profile folder that cannot be written (full disk, read-only): one warning, and the rest goes on.
Flushed on normal exit, ``KeyboardInterrupt`` (atexit) and ``os._exit`` too (``exit_hooks``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from time import perf_counter_ns
from typing import Any, Callable, Mapping

from .. import config
from ..logs import enable_from_env
from ..profiler_warnings import ProfilerWarning, warn, write_line  # noqa: F401 (ProfilerWarning: this module's API)
from . import summary_later
from .child_processes import SleepingChild, announce_run, children_trained, inherited_run
from .exit_hooks import close_at_exit, forget_at_exit
from .hygiene import ProcessHygiene, install_fork_hooks
from .lifecycle import Lifecycle
from .options import StepRangeOption, apply_overrides, upload_warnings
from .output import RankOutput
from .resource import attributes, distributed_position, run_id
from .samples.cuda_memory import SNAPSHOT_NAME, CudaMemory
from .samples.host_samples import CpuTimeline, job_root
from .steps import markers
from .steps.evidence import TIME_FALLBACK_S, StepEvidence
from .steps.sources import StepSources
from .trace_context import RunSpan, UserSpans, parent_from_settings
from .windows.capture import DetailedWindows
from .windows.flushing import Flusher
from .windows.policy import WindowPolicy
from .wiring import EXPORTER_CHILD_ENV, ExportWiring, exporter_factory as _exporter_factory

log = logging.getLogger(__name__)

_current: "Session | None" = None
_start_lock = threading.Lock()
_forked_child = False
CLOSE_NETWORK_S = 5.0
"""At exit, the exporter keeps sending this long at most; then what is not delivered is spooled."""


def current() -> "Session | None":
    """The running session, or None."""
    return _current


def start_session(origin: str, overrides: Mapping[str, Any] | None = None,
                  environ: Mapping[str, str] | None = None) -> "Session | None":
    """Start (or return) the process's session. Bad settings: one warning, None. Never raises."""
    global _current
    with _start_lock:
        if _current is not None:
            return _current
        if _forked_child or os.environ.get(EXPORTER_CHILD_ENV):
            return None  # a forked child, or our own exporter process: nothing of the job runs here
        session = None
        try:
            env = dict(os.environ if environ is None else environ)
            enable_from_env(env)
            problems, steps = apply_overrides(env, overrides or {})
            settings = config.load(env)
            problems += settings.warnings
            for notice in settings.notices:  # one feature off or a name unknown: profiling goes on
                warn(notice)
            if problems:
                warn("profiling is off because of invalid settings: " + "; ".join(problems))
                return None
            if settings.otel_sdk_disabled:
                return None
            for line in settings.exporter_warnings() + upload_warnings(settings):
                warn(line)
            session = Session(settings, origin, steps)
            session.start()
        except Exception as exc:  # never into user code
            warn(f"profiling is off: could not start ({type(exc).__name__}: {exc})")
            if session is not None:
                session.close()  # undo a half-done start: recording off, handlers and hooks back
            return None
        _current = session
        return session


class Session:
    """One process's profiling session, composed of its parts (see the module docstring); it keeps
    the step counter and tells each part what it needs."""

    # What the torch hooks report (``steps.torch_steps.TorchHooks``, ``integrations.keras``): the
    # parts' own methods, bound in ``__init__`` (no extra call on the hot path of every backward pass).
    optimizer_made: Callable[[], None]
    optimizer_took_over: Callable[[int], None]
    optimizer_step_started: Callable[[], None]
    backward_done: Callable[[], None]
    torch_work: Callable[..., bool]
    torch_scope_entered: Callable[[], None]
    torch_scope_left: Callable[[], None]

    def __init__(self, settings: config.Settings, origin: str, steps: StepRangeOption | None = None,
                 run: tuple[str, str] | None = None) -> None:
        """``run``: the run id and folder of the job this process is a child of (``child_processes``)."""
        self.settings = settings
        self.lifecycle = Lifecycle()
        position = distributed_position()
        run = run or inherited_run()
        if run is not None:
            identity, folder = run
        else:
            identity = run_id(settings.run_id)
            folder = settings.profile_dir or os.path.join(settings.output_dir, identity)
        activities = frozenset(settings.activities)
        self.output = RankOutput(os.path.abspath(folder), origin, identity, position, attributes(settings),
                                 activities, child_of_run=run is not None)
        step_range = settings.steps if steps is None else steps.step_range
        self.policy = WindowPolicy(step_range, settings.every_steps,
                                   settings.window_steps, settings.duration_s,
                                   settings.slow_step_factor, perf_counter_ns())
        self.windows = DetailedWindows(self.policy, activities, settings.window_part_steps,
                                       rank=lambda: self.output.rank)
        self.step_sources = StepSources(self, self.windows, self.policy, settings.duration_s,
                                        settings.duration_s or TIME_FALLBACK_S)
        self.wiring = ExportWiring(settings, self.output.resource, identity)
        sources, windows = self.step_sources, self.windows
        self.optimizer_made = sources.optimizer_made
        self.optimizer_took_over = sources.optimizer_took_over
        self.optimizer_step_started = sources.optimizer_step_started
        self.backward_done = sources.backward_done
        self.torch_work = sources.torch_work
        self.torch_scope_entered = windows.torch_scope_entered
        self.torch_scope_left = windows.torch_scope_left
        # One writer at a time; held around fork. Re-entrant: the SIGTERM handler may flush while
        # the interrupted main thread is itself inside flush().
        self.lock = threading.RLock()
        self.hygiene = ProcessHygiene(self.lifecycle, self.lock, self.close)
        self._step = 0  # number of the step in progress
        self._step_start: int | None = None
        self.wants_nvtx = settings.nvtx
        self._thread: threading.Thread | None = None
        self._trigger: Any = None
        self._remote: Any = None  # remote_capture.RemoteCapture: the app's capture requests
        self._remove_step_hook: Callable[[], None] | None = None
        self._restore_signal: Any = None
        output = self.output
        self.cuda_memory = CudaMemory(
            lambda reason: os.path.join(output.folder, SNAPSHOT_NAME.format(rank=output.rank, reason=reason)),
            "memory" in activities, self.settings.memory_snapshot)
        self.cpu_timeline = CpuTimeline(self.settings.cpu_sample_s, job_root(run is not None))
        self.run_span = RunSpan(parent_from_settings(settings), time.time_ns())  # TRACEPARENT: its parent
        self.user_spans = UserSpans(settings.mark_user_spans, settings.run_id or identity)
        self.flusher = Flusher(self.lock, self.lifecycle, self.windows, self.output, self.wiring,
                               self.cpu_timeline, self.user_spans, self.run_span, self.meta,
                               self.settings.flush_interval_s,
                               self.settings.flush_events)

    @property
    def closed(self) -> bool:
        return self.lifecycle.closed

    @property
    def folder(self) -> str:
        return self.output.folder

    @property
    def rank(self) -> int:
        return self.output.rank

    @property
    def step(self) -> int:
        """The number of the step in progress."""
        return self._step

    @property
    def metrics(self) -> Any:
        """The metrics service, once the flush thread started it."""
        return self.wiring.metrics

    @property
    def evidence(self) -> StepEvidence:
        return self.step_sources.evidence

    # ------------------------------------------------------------------ lifecycle
    def start(self, hooks: Any = None) -> None:
        """Start recording; ``hooks``: torch hooks already installed in this process (a forked child's)."""
        settings = self.settings
        # Import now whatever writing at exit needs: a module first imported during interpreter
        # shutdown can make a Ctrl-C'd job exit 1 instead of dying of SIGINT as it should.
        import cuda_tracer.capture.cupti  # noqa: F401  (imports neither torch nor cupti-python)
        import cuda_tracer.capture.kineto  # noqa: F401  (does not import torch)

        from ..metrics.publisher import metrics_wanted

        if metrics_wanted(self.settings):  # they may start at exit, for a run shorter than one flush poll
            from ..metrics import profile as profile_metrics, system as system_metrics  # noqa: F401
        self.wiring.prepare(_exporter_factory())  # imports the exporter now, not at the first write
        markers.active = True
        close_at_exit(self._close_at_exit)  # atexit, and before an os._exit
        install_fork_hooks(_before_fork, _after_fork_parent, _after_fork_child)
        self.hygiene.install_sigterm()
        from .windows.triggers import UdpTrigger, install_signal

        if settings.signal:
            self._restore_signal = install_signal(lambda: self.policy.request("signal"))
        if settings.trigger_port:
            try:
                self._trigger = UdpTrigger(settings.trigger_port + self.output.position["local_rank"],
                                           self.policy.request)
            except OSError as exc:
                warn(f"trigger port unavailable ({exc}); on-demand capture by the trigger socket is off")
        if hooks is not None:
            hooks.sink = self
            self._hook_installed(hooks)
        elif settings.auto_steps:
            from .steps.torch_steps import when_torch_imported

            when_torch_imported(self, self._hook_installed)
        announce_run(self.output.run_id, self.output.folder)
        from . import remote_capture

        self._remote = remote_capture.start_for(self)
        self._thread = threading.Thread(target=self.flusher.loop, name="otel-profiler-flush", daemon=True)
        self._thread.start()
        if settings.duration_s and "torch" in sys.modules:  # else: from the first torch work
            self.windows.update(0, perf_counter_ns())

    def _hook_installed(self, hooks: Any) -> None:
        self.step_sources.torch_hooks = self.windows.torch_hooks = hooks
        self._remove_step_hook = hooks.remove
        from cuda_tracer.capture.kineto import watch_user_profilers

        watch_user_profilers(self._user_profiler_starting)

    def _user_profiler_starting(self) -> None:
        """The job starts a torch profiler of its own (``DetailedWindows.yield_to_user_profiler``)."""
        if not self.lifecycle.closed:
            self.windows.yield_to_user_profiler(self._step + (self._step_start is not None))

    def _close_at_exit(self) -> None:
        self.lifecycle.exiting = True
        self.close()

    def flush(self) -> None:
        """Write what is buffered as the next part of this rank (and submit it to the exporter)."""
        self.flusher.flush()

    def meta(self) -> dict[str, Any]:
        """This rank's metadata (``rank-<r>.json``)."""
        recording: dict[str, Any] = {
            "detailed_capture": self.windows.detail_off or "on",
            "windows": self.windows.meta(),
            "steps": self._step,
            "step_source": self.step_sources.source_name(),
        }
        if cuda_memory := self.cuda_memory.meta():
            recording["cuda_memory"] = cuda_memory
        if cpu_samples := self.cpu_timeline.meta():
            recording["cpu_samples"] = cpu_samples
        return self.output.meta(recording, self.run_span.meta())

    def close(self) -> None:
        """Stop capturing, write everything left, close the exporter. Idempotent, never raises."""
        global _current
        lifecycle = self.lifecycle
        if lifecycle.closed:  # stopped quietly or after a failure: metrics may still be running
            self.wiring.close_metrics()
            return
        lifecycle.closed = True
        lifecycle.closing = True
        try:
            thread = self._thread
            if thread is not None and thread.ident is not None and thread is not threading.current_thread():
                thread.join(timeout=10)
            if self.windows.window is not None:  # the step in progress, if any, is the window's last
                if self.step_sources.time_deadline is not None:
                    self.step_sources.end_time_window()
                else:
                    self.windows.close(self._step + (self._step_start is not None))
            self.step_sources.say_no_steps(lambda: children_trained(self.output.folder))
            self._unhook()
            self.cuda_memory.close()
            self.wiring.start_metrics_when_due()  # a run shorter than one poll
            if thread is None or not thread.is_alive():  # the timeline is the flush thread's
                self.cpu_timeline.maybe_sample(final=True)
            self.flush()
            markers.active = False
            self.wiring.close_exporter(self.output.folder, CLOSE_NETWORK_S)
            if self.settings.summary_at_exit and self.output.writer.parts:
                # summary.json is made after the job, by a detached low-priority process: reading
                # every rank back must not cost this process memory or time at its exit
                summary_later.start(self.output.folder, exiting=lifecycle.exiting or lifecycle.in_signal)
                write_line(self.output.written_line())
        except Exception as exc:
            warn(f"could not finish writing the profile ({type(exc).__name__}: {exc})")
        finally:
            self._unhook()  # again, in case the work above failed before it got there
            self.wiring.close_metrics()  # after the last flush was observed; never raises
            markers.active = False
            if _current is self:
                _current = None
            forget_at_exit(self._close_at_exit)

    # ------------------------------------------------------------------ steps
    def step_boundary(self, manual: bool, explicit_start: bool = False) -> None:
        """The step in progress ends now and the next begins (``step()`` and the optimizer hook)."""
        try:
            evidence = self.step_sources.evidence
            if manual:
                if evidence.manual("step()"):
                    self.step_sources.source_decided()
            elif not explicit_start:
                decided = evidence.optimizer_step()
                if decided is None:
                    return  # the code marks its own steps; the optimizer hook stays quiet
                if decided:
                    self.step_sources.source_decided()
            if self.lifecycle.closed:
                return
            now = perf_counter_ns()
            if explicit_start:
                if self._step_start is None:
                    self._step_start = now
                    self.user_spans.step_began(self._step, self.output.rank)
                    self.windows.update(self._step, now)
                return
            self.advance(now)
        except Exception as exc:
            self.fail(exc)

    def advance(self, now: int, window: bool = True) -> None:
        """A step boundary at ``now`` (``perf_counter_ns``): the step in progress is recorded."""
        if not self.output.rank_known:
            self.output.learn_rank()
        if self._step_start is not None:
            self._record_step(self._step, self._step_start, now)
            self._step += 1
        else:  # the first boundary: steps are numbered as the loop counts its iterations, from 0
            ran, start = self.step_sources.first_step_start(now)
            if start is not None:
                self._record_step(self._step, start, now)
            self._step += ran
        self._step_start = now
        self.user_spans.step_began(self._step, self.output.rank)
        if window:
            self.windows.update(self._step, now)

    def forget_step_start(self) -> None:
        self._step_start = None

    def step_begin(self, number: int) -> None:
        """``step_context(number)`` entered."""
        try:
            if self.step_sources.evidence.manual("step_context"):
                self.step_sources.source_decided()
            if not self.lifecycle.closed:
                self._step = number
                self.user_spans.step_began(number, self.output.rank)
                self.windows.update(number, perf_counter_ns())
        except Exception as exc:
            self.fail(exc)

    def step_end(self, number: int, start: int, end: int) -> None:
        """``step_context(number)`` left."""
        try:
            if not self.lifecycle.closed:
                if not self.output.rank_known:
                    self.output.learn_rank()
                self._record_step(number, start, end)
                self._step = number + 1
                self._step_start = None
                self.step_sources.first_step.done = True
        except Exception as exc:
            self.fail(exc)

    def _record_step(self, number: int, start: int, end: int) -> None:
        markers.local.events.append((markers.STEP, f"ProfilerStep#{number}", start, end, number))
        self.policy.step_finished(number, end - start, captured=self.windows.window is not None, now_ns=end)
        self.wiring.metrics_due = True
        self.cuda_memory.step_end(number)

    def safe_point(self) -> None:
        self.windows.safe_point(self._step)

    # ------------------------------------------------------------------ undoing
    def _unhook(self) -> None:
        """Give back the optimizer hook, the trigger socket and the signal handlers. Never raises."""
        undo, self._remove_step_hook = self._remove_step_hook, None
        trigger, self._trigger = self._trigger, None
        remote, self._remote = self._remote, None
        restore, self._restore_signal = self._restore_signal, None
        for step in (undo, trigger.close if trigger else None, remote.stop if remote else None,
                     self.hygiene.uninstall_sigterm):
            if step is not None:
                try:
                    step()
                except Exception:
                    log.debug("undoing a session hook failed", exc_info=True)
        if restore is not None:
            try:
                restore(at_exit=self.lifecycle.exiting)
            except Exception:
                log.debug("restoring a signal trigger failed", exc_info=True)

    def fail(self, exc: BaseException) -> None:
        """Turn profiling off after an internal error (one warning; ``Lifecycle.fail``)."""
        self.lifecycle.fail(exc)

    # ------------------------------------------------------------------ fork
    def before_fork(self) -> None:
        self.hygiene.before_fork()

    def after_fork_in_parent(self) -> None:
        self.hygiene.after_fork_in_parent()

    def after_fork_in_child(self) -> None:
        """A forked child (e.g. a DataLoader worker) records nothing and writes nothing."""
        self.lock = self.flusher.lock = self.hygiene.in_child(self._close_at_exit)
        self._thread = None
        self.windows.forget_after_fork()
        self._trigger = self._remote = None
        self.wiring.forget_after_fork()

    def after_fork_in_new_child(self) -> None:
        """In the child: record nothing, SIGTERM back to the default action, then unblocked; the
        torch hooks wake a session of the child's own if it trains (``child_processes``)."""
        self.after_fork_in_child()
        self.hygiene.after_fork_in_new_child()
        hooks = self.step_sources.torch_hooks
        if hooks is not None:
            hooks.sink = SleepingChild(lambda: _start_in_forked_child(self.settings, self.output, hooks))


def _start_in_forked_child(settings: config.Settings, parent: RankOutput, hooks: Any) -> "Session | None":
    """A forked child trains: its own session, in the parent's run and folder, with the hooks it
    inherited. Closed by ``multiprocessing``'s exit finalizers too (its children end in ``os._exit``)."""
    global _current
    with _start_lock:
        if _current is not None:
            return _current
        session = Session(settings, "fork", run=(parent.run_id, parent.folder))
        try:
            session.start(hooks)
        except Exception as exc:
            warn(f"profiling is off in process {os.getpid()}: could not start ({type(exc).__name__}: {exc})")
            session.close()
            return None
        _current = session
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:
        mp_util.Finalize(None, session._close_at_exit, exitpriority=100)
    return session


# ---------------------------------------------------------------------- the process-wide fork hooks
def _before_fork() -> None:
    session = _current
    if session is not None:
        session.before_fork()


def _after_fork_parent() -> None:
    session = _current
    if session is not None:
        session.after_fork_in_parent()


def _after_fork_child() -> None:
    global _current, _forked_child, _start_lock
    _forked_child = True
    _start_lock = threading.Lock()
    markers.active = False
    markers.reset_after_fork()
    session, _current = _current, None
    if session is not None:
        session.after_fork_in_new_child()
