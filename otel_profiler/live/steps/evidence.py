"""Which evidence marks the training steps of this process, and the time window when there is none.

``StepEvidence`` is the decision alone (no torch, no I/O, easy to test); ``StepSources`` is the
session's side, mixed into ``session.Session``: what the framework hooks call.

In order of evidence (a stronger source, once seen, wins for the rest of the run):

1. ``step()`` / ``step_context`` called by the program (``"step()"``, ``"step_context"``);
2. optimizer steps: any ``torch.optim.Optimizer.step`` (``"optimizer"``); backward passes run
   inside a step (LBFGS closures) or between steps (gradient accumulation) are not steps;
3. backward passes (``"backward"``), one per step, once ``grace`` of them came with no optimizer
   step (``grace_with_optimizer`` when an optimizer was constructed: it may be accumulating
   gradients). The passes seen while waiting become steps retroactively, so none is lost;
4. none of those: the session records a time window instead (``"time"``, ``Session``).
"""

from __future__ import annotations

import logging
import sys
from time import perf_counter_ns
from typing import Any, Callable

log = logging.getLogger(__name__)

MANUAL_SOURCES = ("step()", "step_context")
TIME_FALLBACK_S = 10.0
"""Length of the time window recorded when no step is seen (``OTEL_PROFILER_DURATION_S`` if set)."""
BACKWARD_GRACE = 8
BACKWARD_GRACE_WITH_OPTIMIZER = 512


class StepEvidence:
    def __init__(self, grace: int = BACKWARD_GRACE,
                 grace_with_optimizer: int = BACKWARD_GRACE_WITH_OPTIMIZER) -> None:
        self.source: str | None = None
        """The source steps come from, or None while undecided."""
        self.grace = grace
        self.grace_with_optimizer = grace_with_optimizer
        self.optimizer_made = False
        self.optimizer_seen = False
        self.switched_from: str | None = None
        """A weaker source steps came from before a stronger one appeared (e.g. ``"backward"``)."""
        self._pending: list[int] = []

    def manual(self, kind: str) -> bool:
        """The program marks a step itself (``kind``: ``step()`` or ``step_context``). True when this
        decides (or changes) the source."""
        if self.source in MANUAL_SOURCES:
            return False
        self._replace(kind)
        return True

    def optimizer_started(self) -> None:
        """An optimizer step begins: backward passes from now on are not steps of their own."""
        self.optimizer_seen = True
        self._pending.clear()

    def optimizer_step(self) -> bool | None:
        """An optimizer step ended. True: it is a step boundary and decides the source now; False:
        a boundary under the current source; None: not a boundary (the program marks its own)."""
        if self.source in MANUAL_SOURCES:
            return None
        self.optimizer_seen = True
        self._pending.clear()
        if self.source == "optimizer":
            return False
        self._replace("optimizer")
        return True

    def backward(self, now_ns: int) -> list[int] | None:
        """A backward pass ended at ``now_ns``. The step boundaries to record now (several when this
        pass decides that backward passes are the steps: the ones seen while waiting), or None."""
        if self.source == "backward":
            return [now_ns]
        if self.source is not None or self.optimizer_seen:
            return None
        self._pending.append(now_ns)
        if len(self._pending) < (self.grace_with_optimizer if self.optimizer_made else self.grace):
            return None
        self.source = "backward"
        pending, self._pending = self._pending, []
        return pending

    def _replace(self, source: str) -> None:
        if self.source is not None and self.source != source:
            self.switched_from = self.source
        self.source = source
        self._pending.clear()


class StepSources:
    """The session's side of step evidence (mixed into ``session.Session``): what the framework hooks
    (``torch_steps``, ``integrations.keras``) call, and the time fallback window. Uses the
    session's step and window machinery (``_advance``, ``_open_window``, ``_close_window``)."""

    evidence: StepEvidence
    closed: bool
    settings: Any
    policy: Any
    _window: Any
    _windows: list
    _step: int
    _source: Any
    _torch_hooks: Any
    _first_torch_ns: int | None
    _time_deadline: int | None
    _fallback_said: bool
    _time_window_s: float
    _in_torch_scope: bool
    _start_fenced: bool
    _step_start: int | None
    _advance: Callable[..., None]  # the rest: the session's other parts (until they are objects)
    _fail: Callable[[BaseException], None]
    safe_point: Callable[[], None]
    _open_window: Callable[[str, int], None]
    _close_window: Callable[[int], None]
    _stop_source: Callable[[], Any]
    _back_off: Callable[..., None]

    def optimizer_made(self) -> None:
        """An optimizer was constructed (``torch_steps``)."""
        self.evidence.optimizer_made = True

    def torch_scope_entered(self) -> None:
        """torch opened a ``record_function`` scope around what we are called from (the leading
        optimizer's step): no detailed window may start in it if one was running when it opened,
        nor after one stopped in it (``capture``), until ``torch_scope_left``."""
        running = self._source is not None and self._source.running
        self._start_fenced = running or (self._in_torch_scope and self._start_fenced)
        self._in_torch_scope = True

    def torch_scope_left(self) -> None:
        self._in_torch_scope = self._start_fenced = False

    def optimizer_took_over(self, earlier_ns: int) -> None:
        """Another optimizer leads from now on (``torch_steps.StepLeader``): its previous step, at
        ``earlier_ns``, was a step boundary too (optimizers taking turns)."""
        try:
            if not self.closed and self.evidence.source == "optimizer":
                self._advance(earlier_ns, window=False)
        except Exception as exc:
            self._fail(exc)

    def optimizer_step_started(self) -> None:
        """An optimizer step begins: later backward passes in it are not steps of their own."""
        if self._first_torch_ns is None:
            self.torch_work()
        self.evidence.optimizer_started()

    def backward_done(self) -> None:
        """A backward pass ended: a step boundary once backward passes are the evidence."""
        evidence = self.evidence
        if evidence.source is not None and evidence.source != "backward":
            if self._window is not None and "deferred" in self._window:
                try:
                    self.safe_point()  # outside the backward's scopes: a deferred start can go
                except Exception as exc:
                    self._fail(exc)
            return  # hot path: a stronger source marks the steps
        try:
            if self.closed:
                return
            if self._first_torch_ns is None:
                self.torch_work()
            undecided = evidence.source is None
            boundaries = evidence.backward(perf_counter_ns())
            if not boundaries:
                return
            if undecided:
                self._source_decided()
            for i, at in enumerate(boundaries):
                self._advance(at, window=i == len(boundaries) - 1)
        except Exception as exc:
            self._fail(exc)

    def torch_work(self) -> bool:
        """Torch ran (a module call, a backward pass). The first time, with no step source yet, the
        time fallback window opens; once its time is up it closes. True: report module calls on."""
        try:
            if self.closed:
                return False
            now = perf_counter_ns()
            if self._first_torch_ns is None:
                self._first_torch_ns = now
                self._first_torch_work(now)
            self.safe_point()
            window = self._window
            waiting = window is not None and "deferred" in window  # fenced: inside an optimizer step
            if self._time_deadline is not None:
                if now < self._time_deadline:
                    return True
                self._end_time_window()
            return waiting
        except Exception as exc:
            self._fail(exc)
            return False

    def _first_torch_work(self, now: int) -> None:
        """``OTEL_PROFILER_DURATION_S`` counts from the first torch work (a window opened before torch
        was imported captured nothing and starts again); with no step source yet, the time fallback
        window opens. Both close after their time when no step comes to close them."""
        window = self._window
        if window is not None and window["reason"] == "duration" and not window["captured"]:
            self._window = window = None
        if window is not None:
            return
        if self.settings["OTEL_PROFILER_DURATION_S"]:
            self.policy.start_ns = now
            reason = "duration"
        elif self.evidence.source is None:
            reason = "time"
        else:
            return
        self._time_deadline = now + int(self._time_window_s * 1e9)
        self._open_window(reason, self._step)

    def _source_decided(self) -> None:
        """Steps have a source now: a time fallback window, open or already closed (the first step
        came after its time), is dropped from the run's windows (the windows the settings ask for
        follow the steps: one kind of window per run), and module calls need no watching any more."""
        evidence = self.evidence
        if evidence.source in MANUAL_SOURCES and evidence.switched_from in ("optimizer", "backward"):
            self._step_start = None  # the program's first mark ends the step the weaker source's
            # last boundary ended: one step, not two (so the mark starts the next step only)
        if any(w["reason"] == "time" for w in self._windows):
            self._windows = [w for w in self._windows if w["reason"] != "time"]  # one swap: the
            # flush thread reads the list whole
        if self._time_deadline is not None:
            self._time_deadline = None
            window = self._window
            if window is None or window["reason"] != "time":
                window = None  # a duration window goes on; the policy ends it at a step boundary
            else:
                self._window = None
            if window is not None and window["captured"] and self._source is not None and self._source.running:
                try:
                    self._stop_source()  # dropped: the steps' own windows replace it
                except Exception as exc:
                    self._back_off(f"the detailed source failed to stop ({exc})")
        hooks = self._torch_hooks
        if hooks is not None:
            hooks.stop_watching_module_calls()

    def _end_time_window(self) -> None:
        """Close the time fallback window (its time is up, or the process ends). Why it ran is said
        at the end of the run (``_say_no_steps``), and only if no step came after it."""
        self._time_deadline = None
        self._close_window(self._step)

    def _say_no_steps(self) -> None:
        """One line when torch ran but no step was ever seen (what was recorded instead)."""
        if self._fallback_said or self._first_torch_ns is None or self.evidence.source is not None:
            return
        self._fallback_said = True
        kept = (f"the first {self._time_window_s:g} s of torch work were recorded as a time window"
                if any(w["reason"] in ("time", "duration") for w in self._windows)
                else "the profile has no steps")
        try:
            print("otel-profiler: no training step seen (no step()/step_context, optimizer step or "
                  f"backward pass); {kept}", file=sys.stderr, flush=True)
        except Exception:
            log.debug("printing the no-step line failed", exc_info=True)

    def _step_source(self) -> str:
        """Where the steps come from: step(), step_context, optimizer, backward, time or none."""
        if self.evidence.source is not None:
            return self.evidence.source
        timed = self._time_deadline or any(w["reason"] in ("time", "duration") for w in self._windows)
        return "time" if timed and self._first_torch_ns is not None else "none"

