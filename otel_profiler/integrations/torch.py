"""PyTorch: training steps found without code (optimizer steps, else backward passes, else a time
window) and NVTX mirroring of ``annotate``. The session installs these hooks itself when torch gets
imported (``OTEL_PROFILER_AUTO_STEPS``); they live in ``otel_profiler.live.steps.torch_steps``.
"""

from ..live.steps.torch_steps import TorchHooks, when_torch_imported

__all__ = ["TorchHooks", "when_torch_imported"]
