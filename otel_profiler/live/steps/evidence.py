"""Which evidence marks the training steps of this process, and the time window when there is none.

``StepEvidence`` is the decision alone (no torch, no I/O, easy to test); ``sources.StepSources`` is
the session's side: what the framework hooks call.

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
