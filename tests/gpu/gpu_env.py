"""Whether this machine can run the GPU checks, decided without importing torch where no GPU exists."""

from __future__ import annotations

import os
import shutil


def cuda_available() -> bool:
    """True when an NVIDIA driver is present and torch sees a CUDA device."""
    if not (os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi")):
        return False
    try:
        import torch
    except Exception:
        return False
    return bool(torch.cuda.is_available())
