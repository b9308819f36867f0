"""The session's detailed windows: the window policy (``windows``) applied at each step boundary.

A window opens when the policy wants one, is handed over in parts of
``OTEL_PROFILER_WINDOW_PART_STEPS`` steps (bounded memory), and closes when the policy stops wanting
it; each closed window becomes a ``PROFILER`` event of its own. The detailed source is Kineto
(``torch.profiler``) when torch is imported, else CUPTI through cupti-python; another profiler
holding the process makes capture back off for the run. ``DetailedWindows`` owns this state (a
``WindowState`` per window); the session holds one and tells it each step boundary.

One rule keeps torch's heap whole: a window never starts inside a torch ``record_function`` scope
that was opened while the previous window ran. torch calls such a scope's end callback with the
context the stopped profiler gave it, and the new profiler writes the end time into the stopped
one's freed events (heap corruption: SIGSEGV or ``free(): invalid next size`` some windows later).
The optimizer hooks run inside ``Optimizer.step``'s scope, so a start that would land there
(``_start_fenced``) waits for the next safe point: the next module call or backward pass, or the
next step boundary (whose scope opened after the stop). A part handed over there waits the same
way, so long windows are handed over without a gap.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable

import numpy as np

from cuda_tracer.model.events import EventBatch, Kind

from ...profiler_warnings import warn
from .policy import WindowPolicy
from .state import DEFERRED_PART, DEFERRED_START, WindowState

MAX_WINDOWS_IN_META = 1000


class DetailedWindows:
    """Opening, splitting and closing detailed windows of one session.

    ``finished`` holds what the flush writes next: ``(capture, window)`` pairs, window None for a
    part of a window still open; ``wake`` asks the flush thread to write now."""

    def __init__(self, policy: WindowPolicy, activities: frozenset[str], part_steps: int,
                 rank: Callable[[], int]) -> None:
        self.policy = policy
        self.activities = activities
        self.part_steps = part_steps
        self._rank = rank
        self.window: WindowState | None = None  # the window open now
        self.windows: list[WindowState] = []  # closed windows, for the metadata
        self.finished: list[tuple[Any, WindowState | None]] = []
        self.wake = False  # a plain flag, never a lock: signal handlers set it too
        self.source: Any = None  # the detailed source (Kineto or CUPTI) of the last window
        self.detail_off: str | None = None  # why detailed capture does not run
        self.backed_off = False
        self._told_no_cupti = False
        self.torch_hooks: Any = None  # torch_steps.TorchHooks once installed: watches module calls
        self.in_torch_scope = False  # inside the leading optimizer's step: a torch record_function scope
        self.start_fenced = False  # a start now would land in a torch scope opened while the source ran
        self.lost_steps = 0  # steps of the window just closed whose capture torch's Python tracer lost

    @property
    def waiting(self) -> bool:
        """The open window waits for a safe point (a start or a part's hand-over)."""
        window = self.window
        return window is not None and window.deferred is not None

    def source_running(self) -> bool:
        return self.source is not None and self.source.running

    def update(self, step: int, now: int) -> None:
        """Step ``step`` begins at ``now`` (``perf_counter_ns``): open, split or close as the policy says."""
        reason = self.policy.want(step, now)
        window = self.window
        if reason and window is None:
            self.open(reason, step)
        elif not reason and window is not None:
            self.close(step)
            self._replace_lost_window(step)
        elif window is not None and window.deferred:
            self._resume(step)
        elif window is not None and window.captured and step - window.part_first_step >= self.part_steps:
            self._next_part(window, step)

    def open(self, reason: str, step: int) -> None:
        window = WindowState(reason=reason, first_step=step, start_ns=time.time_ns(), part_first_step=step)
        self.window = window
        if self._detail_source() is not None:
            self._start_part(window, step)

    def _start_part(self, window: WindowState, step: int) -> None:
        """Start capturing the next part of ``window``, or leave the start to the next safe point."""
        if self.start_fenced:
            window.deferred = DEFERRED_START
            self._watch_for_safe_point()
            return
        window.deferred = None
        try:
            self.source.start()
        except Exception as exc:  # someone else holds the profiler: back off for good
            self.back_off(f"{exc}", announced=getattr(exc, "announced", False))
            return
        window.captured = True
        window.parts += 1
        window.part_first_step = step

    def _next_part(self, window: WindowState, step: int) -> None:
        """Hand over what a long window captured so far and go on capturing (bounded memory)."""
        if self.start_fenced:  # the restart would land in the scope: hand over at the safe point
            window.deferred = DEFERRED_PART
            self._watch_for_safe_point()
            return
        self._hand_over_part(window)
        self._start_part(window, step)

    def _hand_over_part(self, window: WindowState) -> None:
        try:
            self.finished.append((self.stop_source(), None))
            self.wake = True
        except Exception as exc:
            window.captured = False
            self.stop_failed(exc)

    def _resume(self, step: int) -> None:
        """Do what waited for a safe point: a part's hand-over (and restart), or a start.

        Called at a safe point, or at the next step boundary: there a part still running is
        handed over but its restart waits again if the boundary is fenced."""
        window = self.window
        if window is None or self.backed_off:
            return
        deferred, window.deferred = window.deferred, None
        if deferred == DEFERRED_PART:
            if not self.source_running():
                return
            self._hand_over_part(window)
            if self.backed_off:
                return
        self._start_part(window, step)

    def safe_point(self, step: int) -> None:
        """Torch work outside any scope of the previous window (a module call, a backward pass
        returned): whatever waited for one is done now. Cheap when nothing waits."""
        window = self.window
        if window is not None and window.deferred is not None and not self.start_fenced:
            self._resume(step)

    def torch_scope_entered(self) -> None:
        """torch opened a ``record_function`` scope around what we are called from (the leading
        optimizer's step): no detailed window may start in it if one was running when it opened,
        nor after one stopped in it, until ``torch_scope_left``."""
        self.start_fenced = self.source_running() or (self.in_torch_scope and self.start_fenced)
        self.in_torch_scope = True

    def torch_scope_left(self) -> None:
        self.in_torch_scope = self.start_fenced = False

    def _watch_for_safe_point(self) -> None:
        hooks = self.torch_hooks
        if hooks is not None:
            hooks.watch_module_calls()

    def stop_source(self) -> Any:
        """Stop the detailed source; inside a torch scope, later starts in it are fenced."""
        if self.in_torch_scope:
            self.start_fenced = True
        return self.source.stop()

    def close(self, step: int) -> None:
        """The open window ends before step ``step``: stop capturing, hand it to the flush."""
        window, self.window = self.window, None
        if window is None:
            return
        window.end_ns = time.time_ns()
        window.last_step = step - 1
        capture = None
        window.deferred = None
        self.lost_steps = 0
        if window.captured and self.source_running():
            try:
                capture = self.stop_source()
            except Exception as exc:
                window.captured = False  # its events are lost
                if self.stop_failed(exc):
                    self.lost_steps = step - window.part_first_step
        if len(self.windows) < MAX_WINDOWS_IN_META:
            self.windows.append(window)
        self.finished.append((capture, window))
        self.wake = True

    def drop(self, reason: str) -> None:
        """Forget the closed windows of ``reason`` (one swap: the flush thread reads the list whole)."""
        if any(w.reason == reason for w in self.windows):
            self.windows = [w for w in self.windows if w.reason != reason]

    def any_of(self, *reasons: str) -> bool:
        return any(w.reason in reasons for w in self.windows)

    def meta(self) -> list[dict[str, Any]]:
        """The closed windows as the rank's metadata lists them."""
        return [w.as_meta() for w in self.windows]

    def forget_after_fork(self) -> None:
        """In a forked child: nothing captured here is this process's."""
        self.finished = []
        self.source = None

    def _detail_source(self) -> Any:
        """The detailed source for a window opening now, else None (``detail_off`` says why).

        Kineto (``torch.profiler``) when torch is imported; without torch, CUPTI through cupti-python
        for GPU activities (TensorFlow, JAX). Chosen at each window: torch may be imported later.
        CUPTI missing is said once and skips the window (a later one may use Kineto); CUPTI held by
        another profiler makes ``start`` raise, and detailed capture backs off for the run.
        """
        if self.backed_off:
            return None
        from cuda_tracer.capture import cupti, kineto

        use_kineto = "torch" in sys.modules or not self.activities & kineto.GPU_ACTIVITIES
        self.detail_off = (kineto if use_kineto else cupti).unavailable_reason(self.activities)
        if self.detail_off is not None:
            if not use_kineto and not self._told_no_cupti:
                self._told_no_cupti = True
                warn(f"GPU capture without torch is unavailable: {self.detail_off}; "
                     "steps and annotations are still recorded")
            return None
        make = kineto.KinetoSource if use_kineto else cupti.CuptiWindowSource
        if type(self.source) is not make:
            self.source = make(self.activities, rank=self._rank())
        return self.source

    def stop_failed(self, exc: Exception) -> bool:
        """A window's capture could not be stopped: it is lost. When only torch's Python tracer
        failed (module calls), later windows go on without module calls (one warning) and True is
        returned; otherwise detailed capture backs off for the run."""
        from cuda_tracer.capture.kineto import PythonTracerFailed

        if isinstance(exc, PythonTracerFailed):
            warn(f"a detailed window was lost and module calls are not recorded for the rest of this run "
                 f"(torch's Python tracer failed: {exc}); operators are still recorded, and as many steps "
                 "as were lost are captured again in its place")
            return True
        self.back_off(f"the detailed source failed to stop ({exc})")
        return False

    def _replace_lost_window(self, step: int) -> None:
        """The window that just closed lost its last part to torch's Python tracer: the steps from
        ``step`` on are captured in its place, as many as were lost (a ``retry`` window, without
        module calls, so it cannot fail the same way)."""
        lost, self.lost_steps = self.lost_steps, 0
        if lost > 0 and not self.backed_off:
            self.policy.retry(step, lost)
            self.open("retry", step)

    def yield_to_user_profiler(self, step: int) -> None:
        """The job starts a torch profiler of its own before ``step``: the window open now ends
        there (what it captured is kept) and detailed capture backs off for the run, so the job's
        profiler runs as it would without us (one warning)."""
        if self.backed_off:
            return
        if self.window is not None:
            self.close(step)
        self.back_off("the job started a torch.profiler session of its own")

    def back_off(self, why: str, announced: bool = False) -> None:
        """Another profiler holds the process (or ours failed): no more detailed windows.
        ``announced``: the source has already warned, so the user gets one line, not two."""
        if not self.backed_off and not announced:
            warn(f"detailed GPU/op capture is off for this run: {why}; "
                 "annotations and steps are still recorded")
        self.backed_off = True
        self.detail_off = why


def window_event(window: WindowState, rank: int) -> EventBatch:
    """A PROFILER event spanning one detailed window, with its reason and step range."""
    end = window.start_ns if window.end_ns is None else window.end_ns
    batch = EventBatch.from_columns(["otel-profiler window", "reason", "first_step", "last_step"],
                                    kind=[Kind.PROFILER], name=[0], start_ns=[window.start_ns],
                                    end_ns=[end], rank=[rank], pid=[os.getpid()])
    batch.extra_row = np.zeros(3, np.int64)
    batch.extra_key = np.arange(1, 4, dtype=np.int32)
    batch.extra_value = [window.reason, window.first_step, -1 if window.last_step is None else window.last_step]
    return batch
