"""The process-wide profiling session every way of enabling ends in (API, env var, `run`, instrumentor).

A session owns the settings (``otel_profiler.config``), this process's identity (``resource``), the
step counter, and its parts, each mixed into :class:`Session` from a module of its own:

- ``capture``: the window policy (``windows``) applied at each step: detailed windows opened, handed
  over in parts and closed (Kineto when torch is imported, else CUPTI);
- ``flushing``: the flush thread that writes buffered annotations, steps and finished windows as the
  next part (bounded memory: once ``OTEL_PROFILER_FLUSH_EVENTS`` accumulate, at least every
  ``OTEL_PROFILER_FLUSH_INTERVAL_S``);
- ``output``: the profile folder, this rank's identity and metadata; at exit only this rank's last
  part is written here: ``summary.json`` is left to ``run`` or to one detached process per folder
  (``summary_later``, when ``OTEL_PROFILER_SUMMARY_AT_EXIT`` is on);
- ``hygiene``: SIGTERM (flush, then die of the signal as before) and fork (a forked child records
  and writes nothing, never inherits the flush lock held);
- ``wiring``: the metrics (started at the first recorded step) and the OTLP exporter (made at the
  first write); at exit the exporter gets ``CLOSE_NETWORK_S`` of network time, then spools what is
  not delivered; a frozen exporter is killed, not waited for (``docs/delivery.md``);
- ``step_evidence``: where steps come from when the code does not say.
- ``trace_context``: the parent's ``TRACEPARENT`` (each rank's run span, sent with the last part) and
  the job's own OpenTelemetry span current as each step begins (docs/trace-context.md).

Never raising into user code: any failure gives one warning and turns profiling off, except a
profile folder that cannot be written (full disk, read-only): one warning, and recording, metrics
and OTLP export go on. Flushed on normal exit and ``KeyboardInterrupt`` (atexit) too.
"""

from __future__ import annotations

import atexit
import logging
import operator
import os
import sys
import threading
import time
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any, Mapping

from .. import config
from ..config.parsers import StepRange
from ..logs import enable_from_env
from ..profiler_warnings import ProfilerWarning, warn  # noqa: F401 (ProfilerWarning: part of this module's API)
from .steps import markers
from .windows.capture import CaptureWindows
from .samples.cuda_memory import SNAPSHOT_NAME, CudaMemory
from .samples.host_samples import CpuTimeline
from .windows.flushing import Flushing
from .hygiene import ProcessHygiene, install_fork_hooks
from . import summary_later
from .output import RankOutput, RankWriter
from .resource import attributes, distributed_position, run_id
from .steps.evidence import TIME_FALLBACK_S, StepEvidence, StepSources
from .trace_context import UserSpans, parent_from_settings
from .windows.policy import WindowPolicy
from .wiring import EXPORTER_CHILD_ENV, ExportWiring
from .wiring import exporter_factory as _exporter_factory

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
            problems, steps = _apply_overrides(env, overrides or {})
            settings = config.load(env)
            problems += settings.warnings
            for notice in settings.notices:  # one feature off or a name unknown: profiling goes on
                warn(notice)
            if problems:
                warn("profiling is off because of invalid settings: " + "; ".join(problems))
                return None
            if settings["OTEL_SDK_DISABLED"]:
                return None
            for line in config.exporter_warnings(settings.values) + _upload_warnings(settings):
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


def _upload_warnings(settings: config.Settings) -> list[str]:
    """Why a set ``OTEL_PROFILER_UPLOAD`` will send nothing. The post-exit summarizer uploads; under
    ``run``, which turns that off in the job, ``run`` uploads and says it instead."""
    url = settings["OTEL_PROFILER_UPLOAD"].strip()
    if not url or not settings["OTEL_PROFILER_SUMMARY_AT_EXIT"]:
        return []
    from ..export.upload import http_url

    problem = http_url(url) or ("" if settings["OTEL_PROFILER_UPLOAD_TOKEN"].strip()
                                else "OTEL_PROFILER_UPLOAD_TOKEN is not set")
    return [f"OTEL_PROFILER_UPLOAD: {problem}; the profile will not be uploaded"] if problem else []


@dataclass(frozen=True)
class StepRangeOption:
    """A step range given as a value (``Profiler(steps=(100, 110))``, ``steps=None`` for none): it
    replaces ``OTEL_PROFILER_STEPS``, whose text form is for the environment only."""

    step_range: StepRange | None


def step_range_option(value: Any) -> StepRangeOption | str:
    """``value`` (a pair of step numbers, or None) as a step range; a problem (one line) otherwise."""
    if value is None:
        return StepRangeOption(None)
    try:
        if len(value) == 2 and not any(isinstance(n, bool) for n in value):
            first, stop = operator.index(value[0]), operator.index(value[1])
            if 0 <= first < stop:
                return StepRangeOption(StepRange((first, stop)))
    except TypeError:
        pass
    return f"steps={value!r}: expected (START, STOP) step numbers with 0 <= START < STOP, e.g. (100, 110)"


def _apply_overrides(env: dict[str, str], overrides: Mapping[str, Any]) -> tuple[list[str], StepRangeOption | None]:
    """``Profiler(every_steps=10)`` → ``OTEL_PROFILER_EVERY_STEPS=10`` in ``env``; unknown names are
    problems. A step range given as a value (a pair, or None) is returned as one, not written."""
    problems = []
    steps = None
    for key, value in overrides.items():
        name = "OTEL_PROFILER_" + key.upper()
        if name not in config.VARIABLES:
            problems.append(f"unknown option {key!r}")
            continue
        if name == "OTEL_PROFILER_STEPS" and (value is None or isinstance(value, (tuple, list))):
            env.pop(name, None)  # the value replaces the variable
            option = step_range_option(value)
            if isinstance(option, str):
                problems.append(option)
            else:
                steps = option
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (list, tuple, set, frozenset)):
            text = ",".join(map(str, value))
        else:
            text = str(value)
        env[name] = text
    return problems, steps


class Session(StepSources, CaptureWindows, Flushing, RankOutput, ProcessHygiene, ExportWiring):
    def __init__(self, settings: config.Settings, origin: str, steps: StepRangeOption | None = None) -> None:
        v = settings.values
        self.settings = settings
        self.origin = origin
        self.position = distributed_position()
        self.rank = self.position["rank"]
        self.run_id = run_id(v["OTEL_PROFILER_RUN_ID"])
        folder = v["OTEL_PROFILER_PROFILE_DIR"] or os.path.join(v["OTEL_PROFILER_OUTPUT_DIR"], self.run_id)
        self.folder = os.path.abspath(folder)
        self.activities = frozenset(v["OTEL_PROFILER_ACTIVITIES"])
        self._part_steps = v["OTEL_PROFILER_WINDOW_PART_STEPS"]
        step_range = v["OTEL_PROFILER_STEPS"] if steps is None else steps.step_range
        self.policy = WindowPolicy(step_range, v["OTEL_PROFILER_EVERY_STEPS"],
                                   v["OTEL_PROFILER_WINDOW_STEPS"], v["OTEL_PROFILER_DURATION_S"],
                                   v["OTEL_PROFILER_SLOW_STEP_FACTOR"], perf_counter_ns())
        self.writer = RankWriter(self.folder, self.rank)
        self.resource = attributes(v)
        self.closed = False
        self._exiting = False  # closing from atexit: the interpreter is ending
        # One writer at a time; held around fork. Re-entrant: the SIGTERM handler may flush while
        # the interrupted main thread is itself inside flush().
        self.lock = threading.RLock()
        self._step = 0  # number of the step in progress
        self._step_start: int | None = None
        self._manual_steps = False
        self.evidence = StepEvidence()
        self._torch_hooks: Any = None
        self._first_torch_ns: int | None = None
        self._time_deadline: int | None = None  # a "time" fallback window is open until then
        self._fallback_said = False
        self._time_window_s = v["OTEL_PROFILER_DURATION_S"] or TIME_FALLBACK_S  # (step_evidence)
        self.wants_nvtx = v["OTEL_PROFILER_NVTX"]
        self._source: Any = None
        self._detail_off: str | None = None  # why detailed capture does not run
        self._backed_off = False
        self._told_no_cupti = False
        self._window: dict[str, Any] | None = None
        self._in_torch_scope = False  # see capture: no window starts in a scope of the previous one
        self._start_fenced = False
        self._windows: list[dict[str, Any]] = []
        self._finished: list[tuple[Any, dict[str, Any] | None]] = []  # (capture, window) to write
        self._wake = False  # a plain flag, never a lock: signal handlers set it too
        self._thread: threading.Thread | None = None
        self._last_flush = time.monotonic()
        self._exporter: Any = None
        self._exporter_made = False  # made at the first write: launchers that record nothing
                                     # (the torchrun agent) never start an exporter process
        self._make_exporter: Any = None
        self.metrics: Any = None  # MetricsService, made once a step was recorded
        self._metrics_due = False  # a step was recorded: the flush thread starts the metrics
        self._metrics_made = False
        self._exporter_watched = False
        self._watch_lock = threading.Lock()
        self._trigger: Any = None
        self._remove_step_hook: Any = None
        self._restore_signal: Any = None
        self._in_signal = False  # closing from the SIGTERM handler: take no lock we can avoid
        self._closing = False  # inside close(): a failing last flush still warns
        self._failed = False
        self._write_failed = False  # a part could not be written (said once)
        self._rank_known = "RANK" in os.environ
        self.cuda_memory = CudaMemory(
            lambda reason: os.path.join(self.folder, SNAPSHOT_NAME.format(rank=self.rank, reason=reason)),
            "memory" in self.activities, self.settings["OTEL_PROFILER_MEMORY_SNAPSHOT"])
        self.cpu_timeline = CpuTimeline(self.settings["OTEL_PROFILER_CPU_SAMPLE_S"])
        self._compute: dict[str, Any] | None = None  # read once, by the first flush
        self.trace_parent = parent_from_settings(settings)  # TRACEPARENT: the run span's parent
        self.run_start_ns = time.time_ns()
        self._run_event_sent = False
        self.user_spans = UserSpans(v["OTEL_PROFILER_MARK_USER_SPANS"], v["OTEL_PROFILER_RUN_ID"] or self.run_id)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        v = self.settings.values
        # Import now whatever writing at exit needs: a module first imported during interpreter
        # shutdown can make a Ctrl-C'd job exit 1 instead of dying of SIGINT as it should.
        import cuda_tracer.capture.cupti  # noqa: F401  (imports neither torch nor cupti-python)
        import cuda_tracer.capture.kineto  # noqa: F401  (does not import torch)

        from ..metrics.publisher import metrics_wanted

        if metrics_wanted(self.settings):  # they may start at exit, for a run shorter than one flush poll
            from ..metrics import profile as profile_metrics, system as system_metrics  # noqa: F401
        self._make_exporter = _exporter_factory()
        markers.active = True
        atexit.register(self._close_at_exit)
        install_fork_hooks(_before_fork, _after_fork_parent, _after_fork_child)
        self._install_sigterm()
        from .windows.triggers import UdpTrigger, install_signal

        if v["OTEL_PROFILER_SIGNAL"]:
            self._restore_signal = install_signal(self.policy.request)
        if v["OTEL_PROFILER_TRIGGER_PORT"]:
            try:
                self._trigger = UdpTrigger(v["OTEL_PROFILER_TRIGGER_PORT"] + self.position["local_rank"],
                                           self.policy.request)
            except OSError as exc:
                warn(f"trigger port unavailable ({exc}); on-demand capture by the trigger socket is off")
        if v["OTEL_PROFILER_AUTO_STEPS"]:
            from .steps.torch_steps import when_torch_imported

            when_torch_imported(self, self._hook_installed)
        self._thread = threading.Thread(target=self._flush_loop, name="otel-profiler-flush", daemon=True)
        self._thread.start()
        if v["OTEL_PROFILER_DURATION_S"] and "torch" in sys.modules:  # else: from the first torch work
            self._update_window(0, perf_counter_ns())

    def _hook_installed(self, hooks: Any) -> None:
        self._torch_hooks = hooks
        self._remove_step_hook = hooks.remove

    def _close_at_exit(self) -> None:
        self._exiting = True
        self.close()

    def close(self) -> None:
        """Stop capturing, write everything left, close the exporter. Idempotent, never raises."""
        global _current
        if self.closed:  # stopped quietly or after a failure: metrics may still be running
            self._close_metrics()
            return
        self.closed = True
        self._closing = True
        try:
            thread = self._thread
            if thread is not None and thread.ident is not None and thread is not threading.current_thread():
                thread.join(timeout=10)
            if self._window is not None:  # the step in progress, if any, is the window's last
                if self._time_deadline is not None:
                    self._end_time_window()
                else:
                    self._close_window(self._step + (self._step_start is not None))
            self._say_no_steps()
            self._unhook()
            self.cuda_memory.close()
            if self._metrics_due and not self._metrics_made:  # a run shorter than one poll
                self._start_metrics()
            self.flush()
            markers.active = False
            if self._exporter is not None:
                if self.metrics is not None:
                    self.metrics.export_now(last=True)  # the last OTLP metrics, after the last batch
                self._exporter.profile_folder = self.folder  # named if batches are lost
                self._exporter.close(timeout_s=CLOSE_NETWORK_S)
            if self.settings["OTEL_PROFILER_SUMMARY_AT_EXIT"] and self.writer.parts:
                # summary.json is made after the job, by a detached low-priority process: reading
                # every rank back must not cost this process memory or time at its exit
                summary_later.start(self.folder, exiting=self._exiting or self._in_signal)
                print(f"otel-profiler: profile of rank {self.rank} written to {self.folder} "
                      f"(`otel-profiler summary {self.folder}`)", file=sys.stderr)
        except Exception as exc:
            warn(f"could not finish writing the profile ({type(exc).__name__}: {exc})")
        finally:
            self._unhook()  # again, in case the work above failed before it got there
            self._close_metrics()  # after the last flush was observed; never raises
            markers.active = False
            if _current is self:
                _current = None
            try:
                atexit.unregister(self._close_at_exit)
            except Exception:
                log.debug("unregistering the exit hook failed", exc_info=True)

    # ------------------------------------------------------------------ steps
    def step_boundary(self, manual: bool, explicit_start: bool = False) -> None:
        """The step in progress ends now and the next begins (``step()`` and the optimizer hook)."""
        try:
            if manual:
                self._manual_steps = True
                if self.evidence.manual("step()"):
                    self._source_decided()
            elif not explicit_start:
                decided = self.evidence.optimizer_step()
                if decided is None:
                    return  # the code marks its own steps; the optimizer hook stays quiet
                if decided:
                    self._source_decided()
            if self.closed:
                return
            now = perf_counter_ns()
            if explicit_start:
                if self._step_start is None:
                    self._step_start = now
                    self.user_spans.step_began(self._step, self.rank)
                    self._update_window(self._step, now)
                return
            self._advance(now)
        except Exception as exc:
            self._fail(exc)

    def _advance(self, now: int, window: bool = True) -> None:
        """A step boundary at ``now`` (``perf_counter_ns``): the step in progress is recorded."""
        if not self._rank_known:
            self._learn_rank()
        if self._step_start is not None:
            self._record_step(self._step, self._step_start, now)
            self._step += 1
        self._step_start = now
        self.user_spans.step_began(self._step, self.rank)
        if window:
            self._update_window(self._step, now)

    def step_begin(self, number: int) -> None:
        """``step_context(number)`` entered."""
        try:
            self._manual_steps = True
            if self.evidence.manual("step_context"):
                self._source_decided()
            if not self.closed:
                self._step = number
                self.user_spans.step_began(number, self.rank)
                self._update_window(number, perf_counter_ns())
        except Exception as exc:
            self._fail(exc)

    def step_end(self, number: int, start: int, end: int) -> None:
        """``step_context(number)`` left."""
        try:
            if not self.closed:
                if not self._rank_known:
                    self._learn_rank()
                self._record_step(number, start, end)
                self._step = number + 1
                self._step_start = None
        except Exception as exc:
            self._fail(exc)

    def _record_step(self, number: int, start: int, end: int) -> None:
        markers.local.events.append((markers.STEP, f"ProfilerStep#{number}", start, end, number))
        self.policy.step_finished(number, end - start, captured=self._window is not None, now_ns=end)
        self._metrics_due = True
        self.cuda_memory.step_end(number)

    def _unhook(self) -> None:
        """Give back the optimizer hook, the trigger socket and the signal handlers. Never raises."""
        undo, self._remove_step_hook = self._remove_step_hook, None
        trigger, self._trigger = self._trigger, None
        restore, self._restore_signal = self._restore_signal, None
        for step in (undo, trigger.close if trigger else None, self._uninstall_sigterm):
            if step is not None:
                try:
                    step()
                except Exception:
                    log.debug("undoing a session hook failed", exc_info=True)
        if restore is not None:
            try:
                restore(at_exit=self._exiting)
            except Exception:
                log.debug("restoring a signal trigger failed", exc_info=True)

    def _fail(self, exc: BaseException) -> None:
        """Turn profiling off after an internal error (one warning), also when it is the last flush
        of ``close`` that fails (the only write of a short job); silent once stopped otherwise."""
        if self._failed or (self.closed and not self._closing):
            return
        self._failed = True
        warn(f"profiling is off after an internal error ({type(exc).__name__}: {exc})")
        self.closed = True
        markers.active = False


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
