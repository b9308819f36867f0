"""When the loop's first iteration began: it has no step boundary before it, so its start is read
from what the torch hooks report before the first boundary (``steps.sources.StepSources``).

- **A training forward pass**: the last call, before the first backward pass, of the first module
  called with gradients on (the model). A dry run or an evaluation pass with gradients on before
  the loop is followed by the loop's own call of the model, which replaces it; with gradient
  accumulation the first micro-batch's forward pass is the one before the first backward pass.
- **The first optimizer step**, when no backward pass came before it (an LBFGS closure runs the
  whole iteration inside the step): the earlier of the two.
- An iteration *ran* before the first boundary only when a backward pass or an optimizer step was
  seen: a forward pass alone (a dry run before a loop that calls ``step()`` at its top) does not
  make the first boundary end a step 0.
"""

from __future__ import annotations


class FirstStep:
    """The first iteration's evidence, until the first step boundary reads it (``at_boundary``)."""

    def __init__(self) -> None:
        self._model: int | None = None  # id() of the first module called with gradients on
        self.forward_ns: int | None = None  # its last call before the first backward pass
        self._backward = False
        self._optimizer_ns: int | None = None  # when the first optimizer step began
        self._backward_before_optimizer = False
        self.iteration_ran = False  # a backward pass or an optimizer step was seen
        self.done = False  # the first boundary has passed

    def forward(self, module_key: int, now: int) -> None:
        """A module was called with gradients on (``module_key``: its ``id()``)."""
        if self._backward or self.done:
            return
        if self._model is None:
            self._model = module_key
        if module_key == self._model:
            self.forward_ns = now

    def backward(self) -> None:
        self._backward = self.iteration_ran = True

    def optimizer(self, now: int) -> None:
        if self._optimizer_ns is None:
            self._optimizer_ns = now
            self._backward_before_optimizer = self._backward
        self.iteration_ran = True

    def at_boundary(self, now: int) -> tuple[bool, int | None]:
        """At a boundary with no step in progress: (whether it ends a step 0 rather than starts one,
        when that step began or None where it was not seen). Only the first boundary reads it."""
        if self.done:
            return False, None
        self.done = True
        optimizer = None if self._backward_before_optimizer else self._optimizer_ns
        starts = [t for t in (self.forward_ns, optimizer) if t is not None and t < now]
        return self.iteration_ran, min(starts) if starts and self.iteration_ran else None
