"""Automatic training steps for PyTorch, from whatever evidence the training loop gives.

Hooks, all installed through ``import_hooks.when_imported`` so the bootstrap never imports torch:

- every ``Optimizer.step`` (``register_optimizer_step_pre_hook`` / ``..._post_hook``, global): the
  pre-hook says "an optimizer steps" (so backward passes inside an LBFGS closure are not steps), the
  post-hook ends a step. With several optimizers one leads (``StepLeader``): a GAN's two
  optimizers stepping in one iteration give one step per iteration, and optimizers that take turns
  (one per layer, trained in sequence) each lead while it is their turn, so every step counts once;
- ``Optimizer.__init__``: an optimizer exists, so backward passes wait longer for its first step
  (gradient accumulation);
- ``torch.autograd.backward`` (``Tensor.backward`` calls it): one call per backward pass;
- with ``OTEL_PROFILER_NVTX=true`` and a GPU, ``annotate`` ranges become NVTX ranges too
  (``markers.nvtx``);
- a global module forward pre-hook while the session wants to hear of torch work (the first module
  call starts the time fallback; later calls close it once its time is up). It removes itself.

What counts as a step is decided by the session (``steps.sources.StepSources``); this module only
reports. Every hook catches everything: the training job never sees an error from here.
"""

from __future__ import annotations

import functools
import logging
import weakref
from time import perf_counter_ns
from types import ModuleType
from typing import Any, Callable

from . import markers

log = logging.getLogger(__name__)


class StepLeader:
    """Which optimizer's steps are the training steps. The first one seen stepping leads; another
    takes the lead when it steps twice with no step of the leader between (its turn has come: the
    leader's layer is trained), so a GAN's alternating optimizers keep one leader while optimizers
    that take turns each count in theirs. Only weak references are kept."""

    def __init__(self) -> None:
        self._leader: Any = None
        self._candidate: Any = None
        self._candidate_ns = 0

    def leads(self, optimizer: Any) -> bool:
        current = self._leader() if self._leader is not None else None
        if current is None:
            self._leader = weakref.ref(optimizer)
            return True
        return current is optimizer

    def stepped(self, optimizer: Any, now_ns: int) -> int | None:
        """``optimizer`` finished a step at ``now_ns``. When this makes it the leader, the time of
        its previous step (a step boundary too, not reported then), else None."""
        if self.leads(optimizer):
            self._candidate = None
            return None
        candidate = self._candidate() if self._candidate is not None else None
        if candidate is optimizer:
            self._leader, self._candidate = self._candidate, None
            return self._candidate_ns
        self._candidate, self._candidate_ns = weakref.ref(optimizer), now_ns
        return None


class TorchHooks:
    """Reports torch evidence to ``sink`` (the session): ``optimizer_step_started()``,
    ``step_boundary(manual=False)``, ``optimizer_took_over(earlier_ns)``, ``optimizer_made()``,
    ``backward_done()`` and ``torch_work()`` (returns True while it wants more module-call
    reports); ``torch_scope_entered()`` and
    ``torch_scope_left()`` bracket what runs inside ``Optimizer.step``'s profiler scope."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self._undo: list[Callable[[], None]] = []
        self._forward_hook: Any = None

    def install(self) -> None:
        import torch
        from torch.optim.optimizer import Optimizer, register_optimizer_step_post_hook, \
            register_optimizer_step_pre_hook

        sink = self.sink
        leader = StepLeader()

        def pre(optimizer: Any, args: Any, kwargs: Any) -> None:
            try:
                if leader.leads(optimizer):
                    sink.torch_scope_entered()  # both hooks run inside Optimizer.step's scope
                    sink.optimizer_step_started()
            except Exception:
                log.debug("the optimizer step's pre hook failed", exc_info=True)

        def post(optimizer: Any, args: Any, kwargs: Any) -> None:
            leading = False
            try:
                earlier = leader.stepped(optimizer, perf_counter_ns())
                leading = leader.leads(optimizer)
                if leading:
                    sink.torch_scope_entered()  # again: a pre-hook may have been missed
                    if earlier is not None:  # its turn began with its previous step
                        sink.optimizer_took_over(earlier)
                    sink.step_boundary(manual=False)
            except Exception:
                log.debug("the optimizer step's post hook failed", exc_info=True)
            finally:
                if leading:
                    sink.torch_scope_left()

        self._undo.append(register_optimizer_step_pre_hook(pre).remove)
        self._undo.append(register_optimizer_step_post_hook(post).remove)

        original_init = Optimizer.__init__

        @functools.wraps(original_init)
        def init(opt: Any, *args: Any, **kwargs: Any) -> None:
            original_init(opt, *args, **kwargs)
            try:
                sink.optimizer_made()
            except Exception:
                log.debug("noting a new optimizer failed", exc_info=True)

        Optimizer.__init__ = init  # type: ignore[method-assign, assignment]  # the wrapper has the original's signature
        self._undo.append(lambda: _restore(Optimizer, "__init__", init, original_init))

        autograd = torch.autograd
        original_backward = autograd.backward

        @functools.wraps(original_backward)
        def backward(*args: Any, **kwargs: Any) -> Any:
            result = original_backward(*args, **kwargs)
            try:
                sink.backward_done()
            except Exception:
                log.debug("reporting a backward pass failed", exc_info=True)
            return result

        autograd.backward = backward
        self._undo.append(lambda: _restore(autograd, "backward", backward, original_backward))
        self.watch_module_calls()
        if getattr(sink, "wants_nvtx", False) and torch.cuda.is_available():
            nvtx = torch.cuda.nvtx
            markers.nvtx = (nvtx.range_push, nvtx.range_pop, nvtx.range_start, nvtx.range_end)
            self._undo.append(_nvtx_off)

    def watch_module_calls(self) -> None:
        """Report module calls to ``sink.torch_work()`` until it returns False."""
        if self._forward_hook is not None:
            return
        from torch.nn.modules.module import register_module_forward_pre_hook

        def hook(module: Any, args: Any) -> None:
            try:
                if not self.sink.torch_work():
                    self.stop_watching_module_calls()
            except Exception:
                log.debug("the module forward hook failed; it stops watching module calls", exc_info=True)
                self.stop_watching_module_calls()

        self._forward_hook = register_module_forward_pre_hook(hook)

    def stop_watching_module_calls(self) -> None:
        handle, self._forward_hook = self._forward_hook, None
        if handle is not None:
            handle.remove()

    def remove(self) -> None:
        """Give every hook and patch back (idempotent, never raises)."""
        self.stop_watching_module_calls()
        undo, self._undo = self._undo, []
        for step in reversed(undo):
            try:
                step()
            except Exception:
                log.debug("removing a torch hook failed", exc_info=True)


def _nvtx_off() -> None:
    markers.nvtx = None


def _restore(owner: Any, name: str, ours: Any, original: Any) -> None:
    """Put ``original`` back unless someone patched over ours since (then leave theirs)."""
    if getattr(owner, name, None) is ours:
        setattr(owner, name, original)


def when_torch_imported(sink: Any, installed: Callable[[TorchHooks], None]) -> None:
    """Install the hooks as soon as ``torch.optim`` is loaded; hand them to ``installed``."""
    from ..import_hooks import when_imported

    def install(_module: ModuleType) -> None:
        hooks = TorchHooks(sink)
        installed(hooks)
        hooks.install()

    when_imported("torch.optim", install)
