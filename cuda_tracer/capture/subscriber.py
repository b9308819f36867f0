"""Who owns CUPTI in this process: detect another profiler, and back off with one warning.

Only one CUPTI activity subscriber can exist per process on most stacks (CUPTI before 13.3, or a
driver older than r610, answers a second ``cuptiSubscribe`` with
``CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED``), and the global activity callbacks are
process-wide: whoever registers last steals the other's buffers. A second subscriber can also break
the first one for good (Kineto never retries its one-shot init). So the rule is: when the user runs
Nsight or their own ``torch.profiler`` session, our sources do not start, and say so once.

What is detected (:func:`other_profiler_active`):

- Nsight Systems / Nsight Compute, or any CUPTI injection tool: ``CUDA_INJECTION64_PATH`` is set, or
  any ``NSYS_*`` variable (nsys sets them in the profiled process).
- A ``torch.profiler`` / autograd-profiler session the user started, when torch is already imported
  (this module never imports torch): ``torch.autograd.profiler._is_profiler_enabled`` or
  ``torch._C._autograd._profiler_enabled()``. A session that one of our own sources started is
  registered with :func:`own_session` and is not counted.
- TensorFlow's profiler (``tf.profiler.experimental.start``, the TensorBoard callback's
  ``profile_batch``, ``tf.profiler.experimental.Profile``): its module
  ``tensorflow.python.profiler.profiler_v2`` holds the running session in ``_profiler``.
- JAX's profiler (``jax.profiler.start_trace`` / ``trace``): ``jax._src.profiler._profile_state``
  holds it in ``profile_session``. Both are looked up in ``sys.modules`` only: never imported here.
- A failed CUPTI call: :func:`reason_from_cupti_error` turns its status code into the same kind of
  one-line reason.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from typing import Any, Iterator, Mapping

from cuda_tracer.terminal_lines import say_once

log = logging.getLogger("otel_profiler." + __name__)


class ProfilerBusy(RuntimeError):
    """A detailed source cannot start: another profiler holds the process, or CUPTI is unusable.

    ``announced``: the source has already told the user (one warning), so the caller need not.
    """

    def __init__(self, reason: str, announced: bool = False) -> None:
        super().__init__(reason)
        self.announced = announced


_OWN_SESSIONS: set[str] = set()
_WARNED: set[str] = set()
_LOCK = threading.Lock()

# CUptiResult codes (cupti_result.h; cupti-python's ``cupti.Result`` has the same values) that mean
# "someone else holds CUPTI" rather than a bug of ours. 39 is also what CUPTI answers when the process
# runs under nvprof, Nsight Systems/Compute or cuda-gdb (cupti_result.h).
CUPTI_ERROR_MULTIPLE_SUBSCRIBERS = 39
_CUPTI_FOREIGN_OWNER = {
    CUPTI_ERROR_MULTIPLE_SUBSCRIBERS: "another CUPTI subscriber owns this process (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)",
}


def other_profiler_active(environ: Mapping[str, str] | None = None,
                          count_own: bool = False) -> str | None:
    """A one-line reason when another profiler owns CUPTI in this process, else ``None``.

    ``count_own=True`` also counts a torch.profiler session that our Kineto source started: the
    CUPTI source must not start beside it either.
    """
    env = os.environ if environ is None else environ
    injection = env.get("CUDA_INJECTION64_PATH")
    if injection:
        return (f"a CUPTI injection tool (Nsight or similar) is loaded through "
                f"CUDA_INJECTION64_PATH={injection}")
    nsys = sorted(k for k in env if k.startswith("NSYS_"))
    if nsys:
        return f"running under Nsight Systems ({nsys[0]} is set)"
    if _torch_profiler_enabled():
        if "torch_profiler" not in _OWN_SESSIONS:
            return "a torch.profiler session started by the user is active in this process"
        if count_own:
            return "the profiler's own torch.profiler (Kineto) session holds CUPTI in this process"
    return _framework_profiler_active()


def _framework_profiler_active() -> str | None:
    """TensorFlow's or JAX's own profiler is running (both hold CUPTI). Never imports either."""
    tf_profiler = sys.modules.get("tensorflow.python.profiler.profiler_v2")
    if getattr(tf_profiler, "_profiler", None) is not None:
        return "TensorFlow's profiler (tf.profiler / TensorBoard profile_batch) is active in this process"
    jax_profiler = sys.modules.get("jax._src.profiler")
    state = getattr(jax_profiler, "_profile_state", None)
    if getattr(state, "profile_session", None) is not None:
        return "JAX's profiler (jax.profiler.trace / start_trace) is active in this process"
    return None


def _torch_profiler_enabled() -> bool:
    """True when torch is imported and its autograd/Kineto profiler is on. Never imports torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        profiler = sys.modules.get("torch.autograd.profiler")
        if profiler is not None and bool(getattr(profiler, "_is_profiler_enabled", False)):
            return True
        return bool(torch._C._autograd._profiler_enabled())
    except Exception:  # an odd torch build: no signal rather than a crash
        log.debug("asking torch whether its profiler is on failed", exc_info=True)
        return False


@contextlib.contextmanager
def own_session(name: str = "torch_profiler") -> Iterator[None]:
    """Marks a profiler session as ours while the block runs, so detection does not count it."""
    with _LOCK:
        _OWN_SESSIONS.add(name)
    try:
        yield
    finally:
        with _LOCK:
            _OWN_SESSIONS.discard(name)


def reason_from_cupti_error(exc: BaseException) -> str:
    """A one-line reason from a failed CUPTI call (cupti-python raises ``cuptiError`` with ``status``)."""
    status: Any = getattr(exc, "status", None)
    if isinstance(status, int) and status in _CUPTI_FOREIGN_OWNER:
        return _CUPTI_FOREIGN_OWNER[status]
    name = getattr(status, "name", None)
    text = f"{name} ({int(status)})" if name is not None else (str(exc) or type(exc).__name__)
    return f"CUPTI refused to start: {text}"


def back_off(source: str, reason: str) -> None:
    """Warns once per (source, reason) that ``source`` does not capture, and why."""
    key = f"{source}\0{reason}"
    with _LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    say_once(f"{source} GPU capture is off: {reason}")  # one line, as every warning of ours


def _reset_warnings_for_tests() -> None:
    with _LOCK:
        _WARNED.clear()
