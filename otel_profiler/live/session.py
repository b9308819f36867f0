"""The process-wide profiling session every way of enabling ends in (API, env var, `run`, instrumentor).

A session owns: the settings (``otel_profiler.config``), this process's identity
(``resource``), the step counter and the window policy (``windows``), the detailed source (opened
only inside windows: ``cuda_tracer.kineto`` when torch is imported, else ``cuda_tracer.cupti`` for GPU
activities), a flush thread that moves buffered annotations, steps and finished windows into parts of
the profile folder (``output``) and hands each batch to the OTLP exporter when one is configured,
the metrics (``metrics.MetricsService``, started at the first recorded step, fed every written batch),
and the process hygiene:

- flush on normal exit and ``KeyboardInterrupt`` (atexit) and on ``SIGTERM`` (a handler, installed only
  where the program has none, that flushes and then dies of the signal as before);
- fork safety: the flush lock is taken around ``fork`` so a child never inherits it held, and a
  forked child (a DataLoader worker) stops recording and drops the parent's buffers, so it neither
  deadlocks nor writes the parent's data twice;
- bounded memory: buffers are written out once ``OTEL_PROFILER_FLUSH_EVENTS`` accumulate, and at
  least every ``OTEL_PROFILER_FLUSH_INTERVAL_S``;
- never raising into user code: any failure gives one warning and turns profiling off, except a
  profile folder that cannot be written (full disk, read-only): one warning, and recording,
  metrics and OTLP export go on;
- at exit the exporter gets ``CLOSE_NETWORK_S`` of network time, then spools what is not
  delivered (``docs/delivery.md``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import sys
import threading
import time
from time import perf_counter_ns
from typing import Any, Iterator, Mapping

import numpy as np

from cuda_tracer.events import EventBatch, Kind

from ..version import __version__
from .. import config
from . import markers
from .output import RankWriter, write_summary
from .compute import compute_resources
from .cuda_memory import CudaMemory
from .host_samples import CpuTimeline
from ..profiler_warnings import ProfilerWarning, warn  # noqa: F401 (ProfilerWarning: part of this module's API)
from .resource import attributes, distributed_position, run_id
from .step_evidence import TIME_FALLBACK_S, StepEvidence, StepSources
from .windows import WindowPolicy

_current: "Session | None" = None
_start_lock = threading.Lock()
_forked_child = False
_fork_hooks_installed = False
MAX_WINDOWS_IN_META = 1000
FLUSH_POLL_S = 0.2
CLOSE_NETWORK_S = 5.0
"""At exit, the exporter keeps sending this long at most; then what is not delivered is spooled."""
EXPORTER_CHILD_ENV = "_OTEL_PROFILER_EXPORTER_CHILD"
"""Set (internally) in the environment our exporter process is spawned with: no session starts there."""


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
            problems = _apply_overrides(env, overrides or {})
            settings = config.load(env)
            problems += settings.warnings
            for notice in settings.notices:  # one feature off or a name unknown: profiling goes on
                warn(notice)
            if problems:
                warn("profiling is off because of invalid settings: " + "; ".join(problems))
                return None
            if settings["OTEL_SDK_DISABLED"]:
                return None
            for line in config.exporter_warnings(settings.values):  # turns off only what it names
                warn(line)
            session = Session(settings, origin)
            session.start()
        except Exception as exc:  # never into user code
            warn(f"profiling is off: could not start ({type(exc).__name__}: {exc})")
            if session is not None:
                session.close()  # undo a half-done start: recording off, handlers and hooks back
            return None
        _current = session
        return session


def _apply_overrides(env: dict[str, str], overrides: Mapping[str, Any]) -> list[str]:
    """``Profiler(steps="1:5")`` → ``OTEL_PROFILER_STEPS=1:5`` in ``env``; unknown names are problems."""
    problems = []
    for key, value in overrides.items():
        name = "OTEL_PROFILER_" + key.upper()
        if name not in config.VARIABLES:
            problems.append(f"unknown option {key!r}")
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, tuple) and len(value) == 2 and name == "OTEL_PROFILER_STEPS":
            text = f"{value[0]}:{value[1]}"
        elif isinstance(value, (list, tuple, set, frozenset)):
            text = ",".join(map(str, value))
        else:
            text = str(value)
        env[name] = text
    return problems


class Session(StepSources):
    def __init__(self, settings: config.Settings, origin: str) -> None:
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
        self.policy = WindowPolicy(v["OTEL_PROFILER_STEPS"], v["OTEL_PROFILER_EVERY_STEPS"],
                                   v["OTEL_PROFILER_WINDOW_STEPS"], v["OTEL_PROFILER_DURATION_S"],
                                   v["OTEL_PROFILER_SLOW_STEP_FACTOR"], perf_counter_ns())
        self.writer = RankWriter(self.folder, self.rank)
        self.resource = attributes(v)
        self.closed = False
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
        self.cuda_memory = CudaMemory(self.folder, self.rank, "memory" in self.activities,
                                      v["OTEL_PROFILER_MEMORY_SNAPSHOT"])
        self.cpu_timeline = CpuTimeline(v["OTEL_PROFILER_CPU_SAMPLE_S"])
        self._compute: dict[str, Any] | None = None  # read once, by the first flush

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        v = self.settings.values
        # Import now whatever writing at exit needs: a module first imported during interpreter
        # shutdown can make a Ctrl-C'd job exit 1 instead of dying of SIGINT as it should.
        import cuda_tracer.cupti  # noqa: F401  (imports neither torch nor cupti-python)
        import cuda_tracer.kineto  # noqa: F401  (does not import torch)

        if v["OTEL_PROFILER_SUMMARY_AT_EXIT"]:
            from ..analysis import summary  # noqa: F401
        from ..metrics.publisher import metrics_wanted

        if metrics_wanted(v):  # they may start at exit, for a run shorter than one flush poll
            from ..metrics import profile as profile_metrics, system as system_metrics  # noqa: F401
        self._make_exporter = _exporter_factory()
        markers.active = True
        atexit.register(self.close)
        _install_fork_hooks()
        self._install_sigterm()
        from .triggers import UdpTrigger, install_signal

        if v["OTEL_PROFILER_SIGNAL"]:
            self._restore_signal = install_signal(self.policy.request)
        if v["OTEL_PROFILER_TRIGGER_PORT"]:
            try:
                self._trigger = UdpTrigger(v["OTEL_PROFILER_TRIGGER_PORT"] + self.position["local_rank"],
                                           self.policy.request)
            except OSError as exc:
                warn(f"trigger port unavailable ({exc}); on-demand capture by UDP is off")
        if v["OTEL_PROFILER_AUTO_STEPS"]:
            from ..integrations.torch import when_torch_imported

            when_torch_imported(self, self._hook_installed)
        self._thread = threading.Thread(target=self._flush_loop, name="otel-profiler-flush", daemon=True)
        self._thread.start()
        if v["OTEL_PROFILER_DURATION_S"] and "torch" in sys.modules:  # else: from the first torch work
            self._update_window(0, perf_counter_ns())

    def _hook_installed(self, hooks: Any) -> None:
        self._torch_hooks = hooks
        self._remove_step_hook = hooks.remove

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
                self._exporter.close(timeout_s=CLOSE_NETWORK_S)
            if self.settings["OTEL_PROFILER_SUMMARY_AT_EXIT"] and self.writer.parts:
                try:
                    write_summary(self.folder)
                except OSError as exc:
                    self._cannot_write(exc)
                    return
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
                atexit.unregister(self.close)
            except Exception:
                pass

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
        self.policy.step_finished(number, end - start, captured=self._window is not None)
        self._metrics_due = True
        self.cuda_memory.rank = self.rank
        self.cuda_memory.step_end(number)

    # ------------------------------------------------------------------ metrics
    def _start_metrics(self) -> None:
        """Once a step was recorded, not in ``start``: a launcher's session (the torchrun agent)
        records no step and must not take rank 0's Prometheus port. Runs in the flush thread, so
        the imports, the endpoint and the samplers never delay a training step. Never raises."""
        self._metrics_made = True
        try:
            from ..metrics.publisher import MetricsService

            self.metrics = MetricsService().start(self.settings, self.resource, run_id=self.run_id)
            self._watch_exporter()
        except Exception as exc:
            warn(f"metrics are off ({type(exc).__name__}: {exc})")

    def _watch_exporter(self) -> None:
        """Connect metrics and the exporter once both exist: its drop counters become metrics and
        OTLP metrics go out through it."""
        with self._watch_lock:
            if self.metrics is None or self._exporter is None or self._exporter_watched:
                return
            self._exporter_watched = True
        self.metrics.attach_exporter(self._exporter)

    def _unhook(self) -> None:
        """Give back the optimizer hook, the trigger socket and the signal handlers. Never raises."""
        undo, self._remove_step_hook = self._remove_step_hook, None
        trigger, self._trigger = self._trigger, None
        restore, self._restore_signal = self._restore_signal, None
        for step in (undo, trigger.close if trigger else None, restore, self._uninstall_sigterm):
            if step is not None:
                try:
                    step()
                except Exception:
                    pass

    def _close_metrics(self) -> None:
        metrics, self.metrics = self.metrics, None
        if metrics is not None:
            metrics.close()  # never raises

    # ------------------------------------------------------------------ windows
    def _update_window(self, step: int, now: int) -> None:
        reason = self.policy.want(step, now)
        window = self._window
        if reason and window is None:
            self._open_window(reason, step)
        elif not reason and window is not None:
            self._close_window(step)
        elif window is not None and window["captured"] and step - window["part_first_step"] >= self._part_steps:
            self._next_window_part(step)

    def _open_window(self, reason: str, step: int) -> None:
        window = {"reason": reason, "first_step": step, "start_ns": time.time_ns(), "captured": False,
                  "parts": 0, "part_first_step": step}
        self._window = window
        source = self._detail_source()
        if source is None:
            return
        try:
            source.start()
            window["captured"] = True
            window["parts"] = 1
        except Exception as exc:  # someone else holds the profiler: back off for good
            self._back_off(f"{exc}", announced=getattr(exc, "announced", False))

    def _next_window_part(self, step: int) -> None:
        """Hand over what a long window captured so far and go on capturing (bounded memory)."""
        window = self._window
        try:
            self._finished.append((self._source.stop(), None))
            self._wake = True
            self._source.start()
            window["parts"] += 1
            window["part_first_step"] = step
        except Exception as exc:
            window["captured"] = False
            self._back_off(f"the detailed source failed to restart ({exc})")

    def _close_window(self, step: int) -> None:
        window, self._window = self._window, None
        if window is None:
            return
        window["end_ns"] = time.time_ns()
        window["last_step"] = step - 1
        capture = None
        window.pop("part_first_step", None)
        if window["captured"] and self._source is not None and self._source.running:
            try:
                capture = self._source.stop()
            except Exception as exc:
                self._back_off(f"the detailed source failed to stop ({exc})")
        if len(self._windows) < MAX_WINDOWS_IN_META:
            self._windows.append(window)
        self._finished.append((capture, window))
        self._wake = True

    def _detail_source(self) -> Any:
        """The detailed source for a window opening now, else None (``_detail_off`` says why).

        Kineto (``torch.profiler``) when torch is imported; without torch, CUPTI through cupti-python
        for GPU activities (TensorFlow, JAX). Chosen at each window: torch may be imported later.
        CUPTI missing is said once and skips the window (a later one may use Kineto); CUPTI held by
        another profiler makes ``start`` raise, and detailed capture backs off for the run.
        """
        if self._backed_off:
            return None
        from cuda_tracer import cupti, kineto

        use_kineto = "torch" in sys.modules or not self.activities & kineto.GPU_ACTIVITIES
        self._detail_off = (kineto if use_kineto else cupti).unavailable_reason(self.activities)
        if self._detail_off is not None:
            if not use_kineto and not self._told_no_cupti:
                self._told_no_cupti = True
                warn(f"GPU capture without torch is unavailable: {self._detail_off}; "
                     "steps and annotations are still recorded")
            return None
        make = kineto.KinetoSource if use_kineto else cupti.CuptiWindowSource
        if type(self._source) is not make:
            self._source = make(self.activities, rank=self.rank)
        return self._source

    def _back_off(self, why: str, announced: bool = False) -> None:
        """Another profiler holds the process (or ours failed): no more detailed windows.
        ``announced``: the source has already warned, so the user gets one line, not two."""
        if not self._backed_off and not announced:
            warn(f"detailed GPU/op capture is off for this run: {why}; "
                 "annotations and steps are still recorded")
        self._backed_off = True
        self._detail_off = why

    # ------------------------------------------------------------------ writing
    def _flush_loop(self) -> None:
        interval = self.settings["OTEL_PROFILER_FLUSH_INTERVAL_S"]
        limit = self.settings["OTEL_PROFILER_FLUSH_EVENTS"]
        while not self.closed:
            time.sleep(FLUSH_POLL_S)  # polling, not an Event: nothing here may hold a lock that
            if self.closed:           # a signal handler in the main thread could wait for
                return
            if self._metrics_due and not self._metrics_made:
                self._start_metrics()
            self.cpu_timeline.maybe_sample()
            if (self._wake or self._finished or markers.pending() >= limit
                    or time.monotonic() - self._last_flush >= interval):
                self._wake = False
                self.flush()

    def flush(self) -> None:
        """Write what is buffered as the next part of this rank (and submit it to the exporter)."""
        try:
            with self.lock:
                self._last_flush = time.monotonic()
                batches = [markers.drain(self.rank, forget_dead_threads=not self._in_signal)]
                n = len(self._finished)  # slice + del: each atomic, so no racing append is lost
                finished = self._finished[:n]
                del self._finished[:n]
                for capture, window in finished:  # window None: a part of a window still open
                    if capture is not None:
                        batches.append(capture.to_batch())
                    if window is not None:
                        batches.append(_window_event(window, self.rank))
                batch = EventBatch.concat(b for b in batches if len(b))
                if not len(batch):
                    return
                if self.writer.parts == 0 and not self._settle_identity():
                    self._stop_quietly()
                    return
                batch.columns["rank"][:] = self.rank
                meta = self.meta()
                try:
                    if not self.writer.write(meta, batch):  # another live process holds this rank
                        self._stop_quietly()
                        return
                except OSError as exc:  # the folder is unusable or the disk full: export goes on
                    self._cannot_write(exc)
                if self.metrics is not None:
                    self.metrics.observe_batch(batch, meta)
                if not self._exporter_made:
                    self._exporter_made = True
                    self._exporter = self._make_exporter(self.settings, self.resource["service.name"])
                    self._watch_exporter()
                if self._exporter is not None:
                    self._exporter.submit(meta, batch)
        except Exception as exc:
            self._fail(exc)

    def _cannot_write(self, exc: OSError) -> None:
        """One warning the first time a part cannot be written; recording, metrics and OTLP
        export go on (later parts are tried again: a disk may get space back)."""
        if not self._write_failed:
            self._write_failed = True
            warn(f"cannot write the profile folder {self.folder} ({exc.strerror or exc}); "
                 "parts are not saved there, steps, metrics and OTLP export go on")

    def _learn_rank(self) -> None:
        """Take rank and world size from torch.distributed when the launcher set no ``RANK``
        (``torch.multiprocessing.spawn`` jobs); checked at step boundaries until known."""
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is None or not dist.is_available() or not dist.is_initialized():
                return
            rank, world = dist.get_rank(), dist.get_world_size()
        except Exception:
            return
        self._rank_known = True
        if self.writer.parts == 0:  # nothing written under the old number yet
            self.rank = rank
            self.position.update(rank=rank, world_size=world)
            self.resource.update({"ml.rank": rank, "ml.world_size": world})
            self.writer = RankWriter(self.folder, rank)

    def _settle_identity(self) -> bool:
        """Before the first write. False for a multiprocessing helper with no rank of its own (a
        spawned DataLoader worker): it writes nothing, so it never takes rank 0 from the trainer."""
        if self._rank_known:
            return True
        self._learn_rank()
        mp = sys.modules.get("multiprocessing")
        return self._rank_known or mp is None or mp.parent_process() is None

    def _stop_quietly(self) -> None:
        """This process is not the one that writes its rank: record nothing more, say nothing."""
        self.closed = True
        markers.active = False

    def meta(self) -> dict[str, Any]:
        """This rank's metadata (``rank-<r>.json``)."""
        torch = sys.modules.get("torch")
        versions = {"otel_profiler": __version__, "python": sys.version.split()[0]}
        if torch is not None:
            versions["torch"] = getattr(torch, "__version__", "?")
        return {
            "source": f"live:{self.origin}",
            "format": "otel-profiler.live",
            "rank": self.rank,
            "local_rank": self.position["local_rank"],
            "world_size": self.position["world_size"],
            "host_name": socket.gethostname(),
            "pid": os.getpid(),
            "run_id": self.run_id,
            "resource": self.resource,
            "versions": versions,
            "device_properties": _device_properties(),
            "activities": sorted(self.activities),
            "detailed_capture": self._detail_off or "on",
            "windows": self._windows,
            "steps": self._step,
            "step_source": self._step_source(),
            **({"cuda_memory": cm} if (cm := self.cuda_memory.meta()) else {}),
            **({"cpu_samples": cs} if (cs := self.cpu_timeline.meta()) else {}),
            "compute": self._compute_resources(),
        }

    def _compute_resources(self) -> dict[str, Any]:
        if self._compute is None:
            self._compute = compute_resources()
        return self._compute

    def _fail(self, exc: BaseException) -> None:
        """Turn profiling off after an internal error (one warning), also when it is the last flush
        of ``close`` that fails (the only write of a short job); silent once stopped otherwise."""
        if self._failed or (self.closed and not self._closing):
            return
        self._failed = True
        warn(f"profiling is off after an internal error ({type(exc).__name__}: {exc})")
        self.closed = True
        markers.active = False

    # ------------------------------------------------------------------ signals and fork
    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return  # the program handles SIGTERM itself (and usually exits through atexit)
            signal.signal(signal.SIGTERM, self._on_sigterm)
        except (ValueError, OSError):
            pass

    def _uninstall_sigterm(self) -> None:
        if self._in_signal or threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except (ValueError, OSError):
            pass

    def _holds_sigterm(self) -> bool:
        """Our SIGTERM handler is the installed one (callable from any thread)."""
        try:
            return signal.getsignal(signal.SIGTERM) == self._on_sigterm
        except (ValueError, OSError):
            return False

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        """Write what is left, then die of SIGTERM as the program would have without us."""
        try:
            self._in_signal = True
            self.close()
        except BaseException:
            pass
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    def after_fork_in_child(self) -> None:
        """A forked child (e.g. a DataLoader worker) records nothing and writes nothing."""
        self.closed = True
        self.lock = threading.RLock()
        self._thread = None
        self._finished = []
        self._source = None
        self._trigger = None
        self.metrics = None  # its threads did not survive the fork; the parent owns its port
        self._watch_lock = threading.Lock()
        try:
            atexit.unregister(self.close)
        except Exception:
            pass
        try:  # SIGTERM kills the child as it would without us (e.g. Pool.terminate of its workers)
            if self._holds_sigterm():
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except (ValueError, OSError):
            pass


def _before_fork() -> None:
    session = _current
    if session is not None:
        session._fork_held = session.lock.acquire(timeout=5)
        session._fork_masked = session._holds_sigterm() and _block_sigterm()


def _after_fork_parent() -> None:
    session = _current
    if session is not None:
        if getattr(session, "_fork_masked", False):
            session._fork_masked = False
            _unblock_sigterm()
        if getattr(session, "_fork_held", False):
            session._fork_held = False
            session.lock.release()


def _after_fork_child() -> None:
    global _current, _forked_child, _start_lock
    _forked_child = True
    _start_lock = threading.Lock()
    markers.active = False
    markers.reset_after_fork()
    session, _current = _current, None
    if session is not None:
        session.after_fork_in_child()  # SIGTERM back to the default action
        if getattr(session, "_fork_masked", False):
            _unblock_sigterm()  # a SIGTERM sent since the fork (Pool.terminate) now kills the child


def _block_sigterm() -> bool:
    """Block SIGTERM in the forking thread (the child inherits the mask). Without this, a SIGTERM
    that reaches a new child before it runs (a Pool torn down at once) hits the inherited Python
    handler and is discarded by CPython's after-fork reset of pending signals: the child never dies.
    True when this call blocked it (it was not blocked already)."""
    try:
        return signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    except (AttributeError, ValueError, OSError):
        return False


def _unblock_sigterm() -> None:
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    except (AttributeError, ValueError, OSError):
        pass


def _install_fork_hooks() -> None:
    global _fork_hooks_installed
    if not _fork_hooks_installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent,
                            after_in_child=_after_fork_child)
        _fork_hooks_installed = True


# ---------------------------------------------------------------------- helpers
def _window_event(window: dict[str, Any], rank: int) -> EventBatch:
    """A PROFILER event spanning one detailed window, with its reason and step range."""
    end = window.get("end_ns", window["start_ns"])
    batch = EventBatch.from_columns(["otel-profiler window", "reason", "first_step", "last_step"],
                                    kind=[Kind.PROFILER], name=[0], start_ns=[window["start_ns"]],
                                    end_ns=[end], rank=[rank], pid=[os.getpid()])
    batch.extra_row = np.zeros(3, np.int64)
    batch.extra_key = np.arange(1, 4, dtype=np.int32)
    batch.extra_value = [window["reason"], window["first_step"], window.get("last_step", -1)]
    return batch


def _device_properties() -> list[dict[str, Any]]:
    from cuda_tracer.kineto import cuda_available

    if not cuda_available():
        return []
    torch = sys.modules["torch"]
    out = []
    try:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out.append({"id": i, "name": p.name, "totalGlobalMem": p.total_memory,
                        "computeMajor": p.major, "computeMinor": p.minor,
                        "numSms": p.multi_processor_count})
    except Exception:
        pass
    return out


def _exporter_factory() -> Any:
    """A function making the OTLP exporter (None when none is configured); imports it now."""
    try:
        from ..export.exporter import exporter_from_env
    except ImportError:
        return lambda settings, service: None

    def make(settings: config.Settings, service: str) -> Any:
        try:
            with _exporter_child_marked():
                return exporter_from_env(settings, default_service=service)
        except Exception as exc:
            warn(f"OTLP export is off ({type(exc).__name__}: {exc})")
            return None

    return make


@contextlib.contextmanager
def _exporter_child_marked() -> Iterator[None]:
    """Mark the environment while the exporter's processes are spawned (its worker and
    multiprocessing's resource tracker inherit it), so the bootstrap in them starts no session.

    multiprocessing's spawn takes no per-process environment, so the mark is in ``os.environ`` for
    the few milliseconds the exporter takes to start; a process another thread starts in that time
    is not profiled either.
    """
    os.environ[EXPORTER_CHILD_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(EXPORTER_CHILD_ENV, None)
