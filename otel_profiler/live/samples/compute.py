"""The compute resources of a profiled process, for the rank's metadata (``compute``): host, CPU
model and cores, memory, GPUs (name, UUID, memory; NVML when it is there, else torch), driver, CUDA
and framework versions, and the instance type where the environment names it (an environment
variable of the platform, else the machine's DMI product name). Reads local files and libraries only,
never the network; every part that cannot be read is left out.

It runs inside the training job, so it reads ``os.uname()``, ``os.confstr`` and ``/proc`` only: no
``platform`` call that starts a subprocess (``uname -p``: its warning filters reset the job's
once-per-location warning registry, so a warning the job already printed would print again), and
no import the job did not make itself (``pynvml`` warns on import)."""

from __future__ import annotations

import logging
import os
import socket
import sys
from typing import Any, Mapping

log = logging.getLogger(__name__)

INSTANCE_TYPE_VARIABLES = ("SM_CURRENT_INSTANCE_TYPE", "INSTANCE_TYPE")  # SageMaker, generic
DMI_PRODUCT = "/sys/devices/virtual/dmi/id/product_name"
NVIDIA_DRIVER = "/proc/driver/nvidia/version"


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return os.uname().machine or None


def _os_name() -> str:
    """``Linux-6.1.0-x86_64-with-glibc2.36``: what ``platform.platform(terse=True)`` says on
    Linux, built from ``os.uname()`` and the C library's own answer (no subprocess)."""
    name = os.uname()
    text = f"{name.sysname}-{name.release}-{name.machine}"
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        libc = ""
    if libc.startswith("glibc "):
        text += "-with-glibc" + libc.split(" ", 1)[1]
    return text


def _nvidia_driver() -> str | None:
    """The driver version the kernel module reports (``NVRM version: ... Kernel Module  550.54.15``)."""
    try:
        with open(NVIDIA_DRIVER, encoding="utf-8", errors="replace") as f:
            first = f.readline()
    except OSError:
        return None
    words = first.split("Kernel Module", 1)[-1].split() if "Kernel Module" in first else []
    return words[0] if words else None


def instance_type(env: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """``{value, source}``: the first platform variable set, else the DMI product name."""
    variables: Mapping[str, str] = os.environ if env is None else env
    for name in INSTANCE_TYPE_VARIABLES:
        if variables.get(name):
            return {"value": variables[name][:100], "source": name}
    try:
        with open(DMI_PRODUCT, encoding="utf-8", errors="replace") as f:
            value = f.read().strip()
        if value:
            return {"value": value[:100], "source": DMI_PRODUCT}
    except OSError:
        pass
    return None


def _gpus_nvml() -> tuple[list[dict[str, Any]], str | None]:
    nv = sys.modules.get("pynvml")  # only when the job imported it: importing it may warn
    if nv is None:
        raise LookupError("pynvml not imported by the job")
    nv.nvmlInit()
    try:
        driver = nv.nvmlSystemGetDriverVersion()
        gpus = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            name, uuid = nv.nvmlDeviceGetName(h), nv.nvmlDeviceGetUUID(h)
            gpus.append({"index": i, "name": name.decode() if isinstance(name, bytes) else name,
                         "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                         "memory_bytes": int(nv.nvmlDeviceGetMemoryInfo(h).total)})
        return gpus, driver.decode() if isinstance(driver, bytes) else driver
    finally:
        nv.nvmlShutdown()


def _gpus_torch() -> list[dict[str, Any]]:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        uuid = getattr(p, "uuid", None)
        out.append({"index": i, "name": p.name, "uuid": f"GPU-{uuid}" if uuid is not None else None,
                    "memory_bytes": int(p.total_memory)})
    return out


def compute_resources() -> dict[str, Any]:
    """What this machine and process have (see the module docstring). Never raises."""
    try:
        return _read()
    except Exception:
        log.debug("reading the compute resources failed; none are recorded", exc_info=True)
        return {}


def _read() -> dict[str, Any]:
    out: dict[str, Any] = {"host": socket.gethostname(), "os": _os_name(),
                           "cpu_model": _cpu_model()}
    try:
        import psutil

        out["cpu_cores"] = {"logical": psutil.cpu_count(), "physical": psutil.cpu_count(logical=False)}
        out["memory_bytes"] = int(psutil.virtual_memory().total)
    except Exception:
        log.debug("psutil could not count cores or memory", exc_info=True)
        out["cpu_cores"] = {"logical": os.cpu_count(), "physical": None}
    gpus: list[dict[str, Any]] = []
    driver: str | None = None
    try:
        gpus, driver = _gpus_nvml()
    except Exception:
        log.debug("NVML could not list the GPUs; torch is asked instead", exc_info=True)
        try:
            gpus = _gpus_torch()
        except Exception:
            log.debug("torch could not list the GPUs; none are recorded", exc_info=True)
            gpus = []
        driver = _nvidia_driver() if gpus else None
    out["gpus"] = gpus
    out["driver"] = driver
    versions = {"python": "%d.%d.%d" % sys.version_info[:3]}
    for name in ("torch", "tensorflow", "jax"):
        module = sys.modules.get(name)
        if module is not None:
            versions[name] = str(getattr(module, "__version__", "?"))
    torch = sys.modules.get("torch")
    cuda = getattr(getattr(torch, "version", None), "cuda", None) if torch is not None else None
    if cuda:
        versions["cuda"] = str(cuda)
    out["versions"] = versions
    out["instance_type"] = instance_type()
    return out
