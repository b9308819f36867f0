"""Whether this machine can run the GPU checks, decided without importing torch where no GPU exists.

Also a small command line for run_gpu_checks.sh:

    python tests/gpu/gpu_env.py prerequisites OUT.json   # exit 1 (and "missing" in OUT.json) if one lacks
    python tests/gpu/gpu_env.py libcupti                 # the libcupti file cupti-python loads
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def cuda_available() -> bool:
    """True when an NVIDIA driver is present and torch sees a CUDA device."""
    if not (os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi")):
        return False
    try:
        import torch
    except Exception:
        return False
    return bool(torch.cuda.is_available())


def prerequisites() -> dict:
    """Versions of what the checks need, and a ``missing`` list naming what is absent."""
    found: dict = {"python": sys.version.split()[0]}
    missing = []
    for name in ("numpy", "msgspec", "pynvml", "pytest"):
        try:
            module = __import__(name)
            found[name] = getattr(module, "__version__", "present")
        except Exception as exc:
            missing.append(f"{name} ({type(exc).__name__}: {exc})")
    try:
        import torch

        found.update(torch=torch.__version__, torch_cuda=torch.version.cuda,
                     cuda_available=torch.cuda.is_available())
        if not torch.cuda.is_available():
            missing.append("a CUDA device visible to torch (torch.cuda.is_available() is False)")
        else:
            found["device"] = torch.cuda.get_device_name(0)
    except Exception as exc:
        missing.append(f"torch ({type(exc).__name__}: {exc})")
    sys.path.insert(0, str(REPO))
    from cuda_tracer.capture.cupti import load_cupti

    module, reason = load_cupti()
    if module is None:
        missing.append(f"cupti-python ({reason})")
    else:
        try:
            from importlib.metadata import version

            found["cupti_python"] = version("cupti-python")
        except Exception:
            found["cupti_python"] = "present"
    found["missing"] = missing
    return found


def libcupti_for_nvtx() -> str | None:
    """The libcupti cupti-python uses once torch is imported, as in the captures (torch's CUDA build
    loads its own libcupti first, and cupti-python then uses that copy)."""
    import torch  # noqa: F401  (first, as in tests/gpu/capture.py)

    sys.path.insert(0, str(REPO))
    from cuda_tracer.capture.cupti import libcupti_path, load_cupti, loaded_libcupti

    module, reason = load_cupti()
    if module is None:
        print(reason, file=sys.stderr)
        return None
    path = libcupti_path(module)
    if path is None:
        print(f"libcupti copies mapped: {loaded_libcupti()}", file=sys.stderr)
    return path


def main(argv: list[str]) -> int:
    if argv[:1] == ["prerequisites"] and len(argv) == 2:
        found = prerequisites()
        Path(argv[1]).write_text(json.dumps(found, indent=1, sort_keys=True))
        print(json.dumps(found, sort_keys=True))
        return 1 if found["missing"] else 0
    if argv == ["libcupti"]:
        path = libcupti_for_nvtx()
        print(path or "")
        return 0 if path else 1
    print("usage: gpu_env.py prerequisites OUT.json | libcupti", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
