"""What the trace's GPU platform calls things: CUDA or HIP/ROCm, and which API calls block the host.

- ``platform_of(batch, metas)``: ``"rocm"`` when the runtime calls are ``hip*``/``hsa*`` or a device is
  an AMD one, ``"cuda"`` when they are ``cuda*``/``cu*`` or a device/version says NVIDIA/CUDA,
  else ``"unknown"`` (a CPU-only profile).
- ``PLATFORM_WORDS``: the words a section title uses per platform (``CUDA API calls`` / ``HIP API
  calls``).
- ``blocking_call(name)``: ``"sync"`` for explicit synchronization (``cudaDeviceSynchronize``,
  ``hipStreamSynchronize``, ...), ``"copy"`` for copies that return only when the data has arrived
  (``cudaMemcpy``, ``hipMemcpyWithStream``, ``cuMemcpyDtoH_v2``: every non-``Async`` memcpy call),
  else None. Both hold the CPU until the GPU catches up, so both count as synchronization.
"""

from __future__ import annotations

import re
from typing import Iterable

import numpy as np

from cuda_tracer.model.array_sets import distinct
from cuda_tracer.model.events import EventBatch, Kind, kinds_in

SYNC_API = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
            "cudaStreamWaitEvent", "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
            "cuStreamWaitEvent", "hipDeviceSynchronize", "hipStreamSynchronize",
            "hipEventSynchronize", "hipStreamWaitEvent")
"""Explicit synchronization calls (``*WaitEvent`` makes a stream, not the host, wait)."""

HOST_BLOCKING_SYNC = tuple(n for n in SYNC_API if not n.endswith("WaitEvent"))
"""The synchronization calls that hold the host thread."""

_BLOCKING_COPY = re.compile(
    r"^(?:cuda|hip)Memcpy(?:2D|3D|Peer|ToSymbol|FromSymbol|ToArray|FromArray|DtoH|HtoD|DtoD|"
    r"WithStream|ParamTilde)?$|^cuMemcpy(?:DtoH|HtoD|DtoD|AtoH|HtoA|2D|3D|Peer)?(?:_v2)?$")

PLATFORM_WORDS = {
    "cuda": {"api": "CUDA API", "gpu": "GPU", "vendor": "NVIDIA"},
    "rocm": {"api": "HIP API", "gpu": "GPU", "vendor": "AMD"},
    "unknown": {"api": "GPU API", "gpu": "GPU", "vendor": ""},
}


def blocking_call(name: str) -> str | None:
    """``"sync"``, ``"copy"`` or None; see the module docstring."""
    if name in HOST_BLOCKING_SYNC:
        return "sync"
    if _BLOCKING_COPY.match(name):
        return "copy"
    return None


def blocking_names(names: Iterable[str]) -> set[str]:
    """The names among ``names`` that block the host (syncs and blocking copies)."""
    return {n for n in names if blocking_call(n)}


def platform_of(batch: EventBatch, metas: Iterable[dict] = ()) -> str:
    """``"cuda"``, ``"rocm"`` or ``"unknown"``; see the module docstring."""
    api = np.flatnonzero(kinds_in(batch.kind, (Kind.RUNTIME, Kind.DRIVER)))
    hip = cuda = 0
    for name_id in distinct(batch.name[api]).tolist():
        name = batch.strings[name_id]
        if name.startswith(("hip", "hsa")):
            hip += 1
        elif name.startswith("cu"):
            cuda += 1
    if hip or cuda:
        return "rocm" if hip > cuda else "cuda"
    for meta in metas:
        for d in meta.get("device_properties") or []:
            text = str(d.get("name", "")) if isinstance(d, dict) else ""
            if re.search(r"AMD|Radeon|Instinct|MI\d{3}", text):
                return "rocm"
            if "NVIDIA" in text or "Tesla" in text:
                return "cuda"
        versions = meta.get("versions") or {}
        if any(k.startswith(("cuda", "cupti")) for k in versions):
            return "cuda"
        if any(k.startswith(("hip", "rocm", "roctracer")) for k in versions):
            return "rocm"
    return "unknown"
