"""Keras: a callback that marks training steps and epochs, annotates phases and drives the windows.

``ProfilerCallback`` (Keras 3, any backend; TensorFlow's ``tf.keras`` is Keras 3 since TF 2.16):

- every train batch is one step (``step_context``), numbered across epochs and ``fit`` calls, so
  ``OTEL_PROFILER_STEPS`` and the other window rules count train batches;
- ``train``, ``test`` (evaluation, also the validation inside ``fit``) and ``predict`` phases and each
  ``epoch`` (attribute ``epoch``) are annotations;
- each step is also TensorFlow's own step marker, ``tf.profiler.experimental.Trace("train",
  step_num=n, _r=1)`` (when TensorFlow is loaded; it costs a flag check while TF's profiler is off),
  so a TF profiler capture of the same run has the same step numbers (``cuda_tracer.tensorflow.xplane``);
- it starts profiling when no session runs (``Profiler(**options)``, options as ``OTEL_PROFILER_*``),
  flushes to the profile folder when each ``fit``/``evaluate``/``predict`` call ends, and the session
  it started ends at exit or at ``callback.stop()`` (one session, so one profile for several calls);
  inside a zero-code session it only joins.

Zero-code: :func:`when_keras_imported` (called by the bootstrap) waits for ``keras`` to be imported
(never importing it itself) and then wraps ``keras.Model.fit``, ``evaluate`` and ``predict`` so that
each call gets one ``ProfilerCallback`` appended to its ``callbacks`` unless it already has one.
Nothing else is patched. This module imports Keras only when ``ProfilerCallback`` is first used.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import logging
import sys
from typing import Any

from ..api import Profiler, annotation_begin, annotation_end, step_context

log = logging.getLogger(__name__)

__all__ = ["ProfilerCallback", "when_keras_imported", "patch_model"]

_step_numbers = itertools.count()  # one train-step numbering per process, across fit() calls
_PATCHED = "__otel_profiler_patched__"


class _Hooks:
    """The callback's behaviour, independent of the Keras base class (mixed in below)."""

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.profiler_options = options
        self._profiler: Profiler | None = None
        self._phases: list[tuple] = []  # open phase annotations, outermost first
        self._epoch: tuple | None = None
        self._step: step_context | None = None
        self._tf_step: Any = None

    # ------------------------------------------------------------------ phases
    def _phase_begin(self, phase: str) -> None:
        if self._profiler is None:
            self._profiler = Profiler(**self.profiler_options).start()
        self._phases.append(annotation_begin(phase))

    def _phase_end(self) -> None:
        if self._phases:
            annotation_end(self._phases.pop())
        if not self._phases:  # after each fit/evaluate/predict call, its events are on disk
            from ..live.session import current

            session = current()
            try:
                if session is not None:
                    session.flush()
            except Exception:  # the session warns and turns itself off; never into model.fit
                log.debug("flushing the session after a Keras phase failed", exc_info=True)

    def stop(self) -> str | None:
        """Stop the profiling this callback started (else it stops at exit); returns the folder."""
        profiler, self._profiler = self._profiler, None
        return profiler.stop() if profiler is not None else None

    def on_train_begin(self, logs: Any = None) -> None:
        self._phase_begin("train")

    def on_train_end(self, logs: Any = None) -> None:
        self._end_step()
        self._phase_end()

    def on_test_begin(self, logs: Any = None) -> None:
        self._phase_begin("test")

    def on_test_end(self, logs: Any = None) -> None:
        self._phase_end()

    def on_predict_begin(self, logs: Any = None) -> None:
        self._phase_begin("predict")

    def on_predict_end(self, logs: Any = None) -> None:
        self._phase_end()

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._epoch = annotation_begin("epoch", epoch=int(epoch))

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self._epoch is not None:
            annotation_end(self._epoch)
            self._epoch = None

    # ------------------------------------------------------------------ steps
    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self._end_step()  # a batch whose end callback never came (an exception in user code)
        number = next(_step_numbers)
        self._tf_step = _tf_step_marker(number)
        self._step = step_context(number).__enter__()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self._end_step()

    def _end_step(self) -> None:
        step, self._step = self._step, None
        if step is not None:
            step.__exit__(None, None, None)
        marker, self._tf_step = self._tf_step, None
        if marker is not None:
            marker.__exit__(None, None, None)


def _tf_step_marker(number: int) -> Any:
    """TensorFlow's step marker for step ``number``, entered; None when TF is not loaded."""
    tf_profiler = sys.modules.get("tensorflow.python.profiler.trace")
    if tf_profiler is None:
        return None
    try:
        marker = tf_profiler.Trace("train", step_num=number, _r=1)
        marker.__enter__()
        return marker
    except Exception:
        log.debug("the Keras step marker could not start", exc_info=True)
        return None


@functools.lru_cache(maxsize=None)
def _callback_class() -> type:
    import keras

    return type("ProfilerCallback", (_Hooks, keras.callbacks.Callback), {
        "__doc__": "Keras callback: steps, epochs, phases and profiling windows (see "
                   "``otel_profiler.integrations.keras``). Keyword options as for ``Profiler``.",
        "__module__": __name__,
    })


def __getattr__(name: str) -> Any:
    if name == "ProfilerCallback":  # built on first use, so importing this module never imports Keras
        return _callback_class()
    raise AttributeError(name)


# ---------------------------------------------------------------------- zero-code
def when_keras_imported() -> None:
    """Patch ``keras.Model`` as soon as ``keras`` is imported (at once if it already is)."""
    from ..live.import_hooks import when_imported

    when_imported("keras", lambda module: patch_model(module.Model))


def patch_model(model_class: type) -> None:
    """Wrap ``fit``, ``evaluate`` and ``predict`` of ``model_class`` to append a ``ProfilerCallback``."""
    for method in ("fit", "evaluate", "predict"):
        original = getattr(model_class, method, None)
        if original is None or getattr(original, _PATCHED, False):
            continue
        setattr(model_class, method, _with_callback(original))


def _with_callback(original: Any) -> Any:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
            given = bound.arguments.get("callbacks")
            if given is None or isinstance(given, (list, tuple)):  # not a ready CallbackList
                callbacks, cls = list(given or []), _callback_class()
                if not any(isinstance(c, cls) for c in callbacks):
                    bound.arguments["callbacks"] = callbacks + [cls()]
                    args, kwargs = bound.args, bound.kwargs
        except Exception:  # never break the user's call: run it as it was
            log.debug("adding the profiler's callback to Keras fit failed; it runs as it was", exc_info=True)
        return original(*args, **kwargs)

    setattr(wrapper, _PATCHED, True)
    return wrapper



# ---------------------------------------------------------------------- custom training loops
def when_custom_loop(sink: Any) -> None:
    """Steps of custom loops (``tf.GradientTape`` without ``fit``), reported to ``sink`` (the session)
    the same way as torch's (``integrations.torch``): a Keras optimizer's ``apply`` (which
    ``apply_gradients`` calls) is an optimizer step; ``GradientTape.gradient`` is a backward pass.

    These are Python calls, so they are seen each step of an eager loop; inside a ``tf.function``
    they run only while it is traced, and such a loop falls back to the session's time window.
    Inside ``fit`` the callback's ``step_context`` marks the steps and outranks both.
    """
    from ..live.import_hooks import when_imported

    when_imported("tensorflow", lambda module: patch_gradient_tape(module.GradientTape, sink))
    when_imported("keras", lambda module: patch_optimizer(module.optimizers.Optimizer, sink))


def patch_gradient_tape(tape_class: type, sink: Any) -> None:
    """``tape.gradient(...)`` reports one backward pass when it returns."""
    original = getattr(tape_class, "gradient", None)
    if original is None or getattr(original, _PATCHED, False):
        return

    @functools.wraps(original)
    def gradient(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        try:
            sink.backward_done()
        except Exception:
            log.debug("reporting a Keras backward pass failed", exc_info=True)
        return result

    setattr(gradient, _PATCHED, True)
    tape_class.gradient = gradient  # type: ignore[attr-defined]


def patch_optimizer(optimizer_class: type, sink: Any) -> None:
    """The class in ``optimizer_class``'s MRO that defines ``apply`` (else ``apply_gradients``) gets
    a wrapper: an optimizer step begins, runs, ends. Nested calls (``apply_gradients`` → ``apply``)
    count once; ``__init__`` reports that an optimizer exists."""
    depth = [0]
    for name in ("apply", "apply_gradients"):
        owner = next((c for c in optimizer_class.__mro__ if name in c.__dict__), None)
        if owner is not None:
            break
    else:
        return
    original = owner.__dict__[name]
    if getattr(original, _PATCHED, False):
        return

    @functools.wraps(original)
    def apply(*args: Any, **kwargs: Any) -> Any:
        depth[0] += 1
        try:
            if depth[0] == 1:
                sink.optimizer_step_started()
        except Exception:
            log.debug("reporting a Keras optimizer step failed", exc_info=True)
        try:
            return original(*args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                try:
                    sink.step_boundary(manual=False)
                except Exception:
                    log.debug("reporting a Keras step boundary failed", exc_info=True)

    setattr(apply, _PATCHED, True)
    setattr(owner, name, apply)
    init = getattr(optimizer_class, "__init__")
    if not getattr(init, _PATCHED, False):
        @functools.wraps(init)
        def made(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            try:
                sink.optimizer_made()
            except Exception:
                log.debug("reporting a new Keras optimizer failed", exc_info=True)

        setattr(made, _PATCHED, True)
        optimizer_class.__init__ = made  # type: ignore[misc]
