"""The session's side of step evidence: what the framework hooks report, and the time fallback window.

``StepSources`` owns the evidence (``evidence.StepEvidence``) and the time fallback's state; the
framework hooks (``torch_steps``, ``integrations.keras``) reach it through the session. It moves the
session's step counter through ``StepClock`` and opens and closes windows through
``windows.capture.DetailedWindows``.
"""

from __future__ import annotations

import logging
import sys
from time import perf_counter_ns
from typing import Any, Callable, Protocol

from ..windows.capture import DetailedWindows
from ..windows.policy import WindowPolicy
from .evidence import MANUAL_SOURCES, StepEvidence
from .first_step import FirstStep

log = logging.getLogger(__name__)


class StepClock(Protocol):
    """The session's step counter, as the step sources move it."""

    @property
    def closed(self) -> bool: ...

    @property
    def step(self) -> int: ...

    def advance(self, now: int, window: bool = True) -> None:
        """A step boundary at ``now`` (``perf_counter_ns``): the step in progress is recorded."""

    def forget_step_start(self) -> None:
        """The step in progress has no start any more (the next mark starts one)."""

    def fail(self, exc: BaseException) -> None:
        """Turn profiling off after an internal error (one warning)."""


class StepSources:
    """Where steps come from, for one session: the evidence, the torch hooks and the time fallback."""

    def __init__(self, clock: StepClock, windows: DetailedWindows, policy: WindowPolicy,
                 duration_s: float, time_window_s: float) -> None:
        self.clock = clock
        self.windows = windows
        self.policy = policy
        self.evidence = StepEvidence()
        self.duration_s = duration_s  # OTEL_PROFILER_DURATION_S: counts from the first torch work
        self.time_window_s = time_window_s  # the time fallback window's length
        self.torch_hooks: Any = None  # torch_steps.TorchHooks once installed
        self.first_torch_ns: int | None = None
        self.first_step = FirstStep()  # when the loop's first iteration began
        self.time_deadline: int | None = None  # a "time" (or "duration") window is open until then
        self._fallback_said = False

    def optimizer_made(self) -> None:
        """An optimizer was constructed (``torch_steps``)."""
        self.evidence.optimizer_made = True

    def optimizer_took_over(self, earlier_ns: int) -> None:
        """Another optimizer leads from now on (``torch_steps.StepLeader``): its previous step, at
        ``earlier_ns``, was a step boundary too (optimizers taking turns)."""
        try:
            if not self.clock.closed and self.evidence.source == "optimizer":
                self.clock.advance(earlier_ns, window=False)
        except Exception as exc:
            self.clock.fail(exc)

    def optimizer_step_started(self) -> None:
        """An optimizer step begins: later backward passes in it are not steps of their own."""
        if self.first_torch_ns is None:
            self.torch_work()
        self.first_step.optimizer(perf_counter_ns())
        self.evidence.optimizer_started()

    def backward_done(self) -> None:
        """A backward pass ended: a step boundary once backward passes are the evidence."""
        evidence = self.evidence
        self.first_step.backward()
        if evidence.source is not None and evidence.source != "backward":
            window = self.windows.window
            if window is not None and window.deferred is not None:  # (``windows.waiting``, inline)
                try:
                    self.windows.safe_point(self.clock.step)  # outside the backward's scopes
                except Exception as exc:
                    self.clock.fail(exc)
            return  # hot path: a stronger source marks the steps
        try:
            if self.clock.closed:
                return
            if self.first_torch_ns is None:
                self.torch_work()
            undecided = evidence.source is None
            boundaries = evidence.backward(perf_counter_ns())
            if not boundaries:
                return
            if undecided:
                self.source_decided()
            for i, at in enumerate(boundaries):
                self.clock.advance(at, window=i == len(boundaries) - 1)
        except Exception as exc:
            self.clock.fail(exc)

    def torch_work(self, training_module: Any = None) -> bool:
        """Torch ran (a module call, a backward pass). The first time, with no step source yet, the
        time fallback window opens; once its time is up it closes. True: report module calls on.
        ``training_module``: the module of a call with gradients on (``first_step``)."""
        try:
            if self.clock.closed:
                return False
            now = perf_counter_ns()
            if training_module is not None:
                self.first_step.forward(id(training_module), now)
            if self.first_torch_ns is None:
                self.first_torch_ns = now
                self._first_torch_work(now)
            windows = self.windows
            windows.safe_point(self.clock.step)
            waiting = windows.waiting  # fenced: inside an optimizer step
            if self.time_deadline is not None:
                if now < self.time_deadline:
                    return True
                self.end_time_window()
            return waiting
        except Exception as exc:
            self.clock.fail(exc)
            return False

    def _first_torch_work(self, now: int) -> None:
        """``OTEL_PROFILER_DURATION_S`` counts from the first torch work (a window opened before torch
        was imported captured nothing and starts again); with no step source yet, the time fallback
        window opens. Both close after their time when no step comes to close them."""
        windows = self.windows
        window = windows.window
        if window is not None and window.reason == "duration" and not window.captured:
            windows.window = window = None
        if window is not None:
            return
        if self.duration_s:
            self.policy.start_ns = now
            reason = "duration"
        elif self.evidence.source is None:
            reason = "time"
        else:
            return
        self.time_deadline = now + int(self.time_window_s * 1e9)
        windows.open(reason, self.clock.step)

    def first_step_start(self, now: int) -> tuple[bool, int | None]:
        """At a step boundary (``now``) with no step in progress: at the first, whether it ends a
        step 0 and when that began (``first_step.FirstStep``); at a later one, (False, None)."""
        return self.first_step.at_boundary(now)

    def source_decided(self) -> None:
        """Steps have a source now: a time fallback window, open or already closed (the first step
        came after its time), is dropped from the run's windows (the windows the settings ask for
        follow the steps: one kind of window per run), and module calls need no watching any more."""
        evidence = self.evidence
        windows = self.windows
        if evidence.source in MANUAL_SOURCES and evidence.switched_from in ("optimizer", "backward"):
            self.first_step.done = True  # the weaker source marked boundaries already
            self.clock.forget_step_start()  # the program's first mark ends the step the weaker
            # source's last boundary ended: one step, not two (so the mark starts the next step only)
        windows.drop("time")
        if self.time_deadline is not None:
            self.time_deadline = None
            window = windows.window
            if window is None or window.reason != "time":
                window = None  # a duration window goes on; the policy ends it at a step boundary
            else:
                windows.window = None
            if window is not None and window.captured and windows.source_running():
                try:
                    windows.stop_source()  # dropped: the steps' own windows replace it
                except Exception as exc:
                    windows.stop_failed(exc)
        hooks = self.torch_hooks
        if hooks is not None:
            hooks.stop_watching_module_calls()

    def end_time_window(self) -> None:
        """Close the time fallback window (its time is up, or the process ends). Why it ran is said
        at the end of the run (``say_no_steps``), and only if no step came after it."""
        self.time_deadline = None
        self.windows.close(self.clock.step)

    def say_no_steps(self, children_trained: Callable[[], bool] = lambda: False) -> None:
        """One line when torch ran but no step was ever seen (what was recorded instead), unless
        ``children_trained()``: the job's trainers are this process's children (Hogwild)."""
        if self._fallback_said or self.first_torch_ns is None or self.evidence.source is not None:
            return
        if children_trained():
            return
        self._fallback_said = True
        kept = (f"the first {self.time_window_s:g} s of torch work were recorded as a time window"
                if self.windows.any_of("time", "duration") else "the profile has no steps")
        try:
            print("otel-profiler: no training step seen (no step()/step_context, optimizer step or "
                  f"backward pass); {kept}", file=sys.stderr, flush=True)
        except Exception:
            log.debug("printing the no-step line failed", exc_info=True)

    def source_name(self) -> str:
        """Where the steps come from: step(), step_context, optimizer, backward, time or none."""
        if self.evidence.source is not None:
            return self.evidence.source
        timed = self.time_deadline or self.windows.any_of("time", "duration")
        return "time" if timed and self.first_torch_ns is not None else "none"
