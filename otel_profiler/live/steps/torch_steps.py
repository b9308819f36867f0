"""Automatic training steps for PyTorch, from whatever evidence the training loop gives.

Hooks, all installed through ``import_hooks.when_imported`` so the bootstrap never imports torch:

- every ``Optimizer.step`` (``register_optimizer_step_pre_hook`` / ``..._post_hook``, global): the
  pre-hook says "an optimizer steps" (so backward passes inside an LBFGS closure are not steps), the
  post-hook ends a step. With several optimizers one leads (``StepLeader``): a GAN's two
  optimizers stepping in one iteration give one step per iteration, and optimizers that take turns
  (one per layer, trained in sequence) each lead while it is their turn, so every step counts once;
- ``Optimizer.__init__``: an optimizer exists, so backward passes wait longer for its first step
  (gradient accumulation);
- ``torch.Tensor.backward``: one call per backward pass (Dynamo handles ``Tensor.backward`` by its
  name and never runs the patched method while tracing; ``torch.autograd.backward``, which it does
  trace, is left alone);
- with ``OTEL_PROFILER_NVTX=true`` and a GPU, ``annotate`` ranges become NVTX ranges too
  (``markers.nvtx``);
- a global module forward pre-hook while the session wants to hear of torch work (the first module
  call starts the time fallback; later calls close it once its time is up). It removes itself, and
  is never registered again once the job calls ``torch.compile`` (``torch.compile`` is wrapped for
  that: the call itself counts as torch work).

``torch.compile`` never sees the profiler: Dynamo warns about, guards on and traces a global module
hook, so none exists while compiled code may run; the optimizer and backward hooks that compiled
code can reach (``torch.compile(opt.step)``, compiled autograd) return at once while Dynamo traces
them (``torch.compiler.is_compiling``, a constant to Dynamo), so nothing of ours enters a graph.

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

from cuda_tracer.capture.kineto import compiling_job

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


def tracing_probe(torch: ModuleType) -> Callable[[], bool]:
    """``torch.compiler.is_compiling`` (True while Dynamo traces or runs a compiled graph; Dynamo
    folds it to a constant), or a probe that says False on a torch without it."""
    probe = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return probe if callable(probe) else _never


def _never() -> bool:
    return False


def _ignore(*_args: Any) -> None:
    return None


def _step_owner(target: Any, optimizer_class: type, module_class: type) -> Any:
    """What ``torch.compile(target)`` compiles a step of: the optimizer of a bound ``step``, the
    function itself when its code calls ``step`` or ``backward`` (a training step), else None
    (a model, or a function that does neither)."""
    owner = getattr(target, "__self__", None)
    if isinstance(owner, optimizer_class):
        return owner
    if target is None or isinstance(target, module_class):
        return None
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    names = set(getattr(code, "co_names", ()))
    return target if names & {"step", "backward"} else None


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
        self.compiled = False  # the job called torch.compile: no global module hook from then on
        self._optimizer_hooks: list[Any] = []  # the global optimizer step hooks' handles
        self._optimizer_step_began: Callable[[Any, Any, Any], None] = _ignore
        self._optimizer_step_ended: Callable[[Any, Any, Any], None] = _ignore
        self._restore_backward: Callable[[], None] = _ignore

    def install(self) -> None:
        import torch
        from torch.optim.optimizer import Optimizer, register_optimizer_step_post_hook, \
            register_optimizer_step_pre_hook

        hooks = self  # the sink is read at each call: a forked child gets a new one
        leader = StepLeader()
        tracing = tracing_probe(torch)

        def pre(optimizer: Any, args: Any, kwargs: Any) -> None:
            if tracing():
                return  # inside a compiled optimizer step: nothing of ours in its graph
            try:
                if leader.leads(optimizer):
                    hooks.sink.torch_scope_entered()  # both hooks run inside Optimizer.step's scope
                    hooks.sink.optimizer_step_started()
            except Exception:
                log.debug("the optimizer step's pre hook failed", exc_info=True)

        def post(optimizer: Any, args: Any, kwargs: Any) -> None:
            if tracing():
                return
            leading = False
            try:
                earlier = leader.stepped(optimizer, perf_counter_ns())
                leading = leader.leads(optimizer)
                if leading:
                    hooks.sink.torch_scope_entered()  # again: a pre-hook may have been missed
                    if earlier is not None:  # its turn began with its previous step
                        hooks.sink.optimizer_took_over(earlier)
                    hooks.sink.step_boundary(manual=False)
            except Exception:
                log.debug("the optimizer step's post hook failed", exc_info=True)
            finally:
                if leading:
                    hooks.sink.torch_scope_left()

        self._optimizer_step_began, self._optimizer_step_ended = pre, post
        self._optimizer_hooks = [register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)]
        self._undo.append(self._remove_optimizer_hooks)

        original_init = Optimizer.__init__

        @functools.wraps(original_init)
        def init(opt: Any, *args: Any, **kwargs: Any) -> None:
            original_init(opt, *args, **kwargs)
            if tracing():
                return
            try:
                hooks.sink.optimizer_made()
            except Exception:
                log.debug("noting a new optimizer failed", exc_info=True)

        Optimizer.__init__ = init  # type: ignore[method-assign, assignment]  # the wrapper has the original's signature
        self._undo.append(lambda: _restore(Optimizer, "__init__", init, original_init))

        tensor = torch.Tensor
        original_backward = tensor.backward

        @functools.wraps(original_backward)
        def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = original_backward(self, *args, **kwargs)
            if tracing():
                return result
            try:
                hooks.sink.backward_done()
            except Exception:
                log.debug("reporting a backward pass failed", exc_info=True)
            return result

        tensor.backward = backward  # type: ignore[method-assign]  # the wrapper has the original's signature
        self._restore_backward = lambda: _restore(tensor, "backward", backward, original_backward)
        self._undo.append(self._give_backward_back)
        self._wrap_compile(torch, Optimizer)
        self.watch_module_calls()
        if getattr(self.sink, "wants_nvtx", False) and torch.cuda.is_available():
            nvtx = torch.cuda.nvtx
            markers.nvtx = (nvtx.range_push, nvtx.range_pop, nvtx.range_start, nvtx.range_end)
            self._undo.append(_nvtx_off)

    def _wrap_compile(self, torch: ModuleType, optimizer_class: type) -> None:
        """``torch.compile`` (also behind ``Module.compile``) first takes the module hook away for
        good, and counts as torch work (the time fallback starts there in a compiled job).

        Compiling what steps (an optimizer's ``step``, or a function whose code calls ``step`` or
        ``backward``: a compiled training step) takes the global optimizer hooks away (Dynamo would
        trace them and guard on them) and, for a function, gives ``Tensor.backward`` back (Dynamo
        would inline the patched one); each call of the compiled function is then reported as an
        optimizer step from around it, outside what Dynamo sees."""
        original_compile = getattr(torch, "compile", None)
        if not callable(original_compile):
            return
        module_class = torch.nn.Module

        @functools.wraps(original_compile)
        def compile(*args: Any, **kwargs: Any) -> Any:
            stepping = None
            try:
                target = args[0] if args else kwargs.get("model")
                stepping = _step_owner(target, optimizer_class, module_class)
                if stepping is not None:
                    self._remove_optimizer_hooks()
                    if stepping is target:
                        self._give_backward_back()
                if not self.compiled:
                    self.compiled = True
                    self.stop_watching_module_calls()
                    compiling_job()  # no module calls in windows: they would record Dynamo's every call
                    self.sink.torch_work()
            except Exception:
                log.debug("noting torch.compile failed", exc_info=True)
            compiled = original_compile(*args, **kwargs)
            if stepping is not None:
                return self._reporting_steps(compiled, stepping)
            if isinstance(compiled, module_class):
                self._hear_first_training_forward(compiled)
            return compiled

        setattr(torch, "compile", compile)
        self._undo.append(lambda: _restore(torch, "compile", compile, original_compile))

    def watch_module_calls(self) -> None:
        """Report module calls to ``sink.torch_work()`` until it returns False (never in a job that
        compiles: Dynamo would see the hook)."""
        if self._forward_hook is not None or self.compiled:
            return
        from torch.nn.modules.module import register_module_forward_pre_hook

        self._forward_hook = register_module_forward_pre_hook(self._reporter(self.stop_watching_module_calls))

    def _reporter(self, stop: Callable[[], None]) -> Callable[[Any, Any], None]:
        """A forward pre-hook that reports module calls to ``sink.torch_work`` (the module, for a
        call with gradients on) and calls ``stop`` once the session wants no more, or on a failure."""
        from torch import is_grad_enabled

        def hook(module: Any, args: Any) -> None:
            try:
                if not self.sink.torch_work(module if is_grad_enabled() else None):
                    stop()
            except Exception:
                log.debug("a module forward hook failed; it is removed", exc_info=True)
                stop()

        return hook

    def _hear_first_training_forward(self, compiled_module: Any) -> None:
        """A hook of ``compiled_module``'s own (the ``OptimizedModule`` that ``torch.compile``
        returned; its hooks run outside the compiled code, and Dynamo neither sees nor guards on
        them) reports its calls with gradients on (the first step's start), until the session
        wants no more module calls. Never raises."""
        handles: list[Any] = []
        try:
            handles.append(compiled_module.register_forward_pre_hook(
                self._reporter(lambda: handles.pop().remove() if handles else None)))
        except Exception:
            log.debug("a compiled module took no forward hook", exc_info=True)

    def _reporting_steps(self, compiled_step: Any, optimizer: Any) -> Any:
        """``compiled_step`` (a compiled optimizer ``step`` or training step) with a step of
        ``optimizer`` (the optimizer, or the function itself) reported before and after each call,
        as the global hooks report eager steps."""
        began, ended = self._optimizer_step_began, self._optimizer_step_ended

        @functools.wraps(compiled_step)
        def step(*args: Any, **kwargs: Any) -> Any:
            began(optimizer, args, kwargs)
            result = compiled_step(*args, **kwargs)
            ended(optimizer, args, kwargs)
            return result

        return step

    def _give_backward_back(self) -> None:
        restore, self._restore_backward = self._restore_backward, _ignore
        restore()

    def _remove_optimizer_hooks(self) -> None:
        handles, self._optimizer_hooks = self._optimizer_hooks, []
        for handle in handles:
            handle.remove()

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
    """Install the hooks as soon as ``torch`` is loaded (with ``torch.optim`` and ``torch.compile``
    defined); hand them to ``installed``."""
    from ..import_hooks import when_imported

    def install(_module: ModuleType) -> None:
        hooks = TorchHooks(sink)
        installed(hooks)
        hooks.install()

    when_imported("torch", install)
