"""The GPU work the checks profile: known transfers, a memset, synchronizations and a small training loop.

Every function imports torch itself, so this module imports on a machine without torch or a GPU.
What each piece must produce in a capture is stated next to it; tests/gpu/test_gpu_capture.py checks it.
"""

from __future__ import annotations

import time
from typing import Any

COPY_BYTES = 8 << 20  # each explicit copy moves 8 MiB
MEMSET_BYTES = 4 << 20


def memset_device(tensor: Any, value: int = 0) -> str:
    """A real cudaMemset on ``tensor``'s memory (torch's own zero_ is a fill kernel, not a memset).

    Uses cuda-python's runtime bindings, else CuPy; returns which one ran.
    """
    import torch

    ptr, nbytes = tensor.data_ptr(), tensor.numel() * tensor.element_size()
    stream = torch.cuda.current_stream().cuda_stream
    errors = []
    try:
        from cuda.bindings import runtime

        try:
            err, = runtime.cudaMemsetAsync(ptr, value, nbytes, stream)
        except TypeError:  # bindings that want a cudaStream_t object
            err, = runtime.cudaMemsetAsync(ptr, value, nbytes, runtime.cudaStream_t(stream))
        if int(err) == 0:
            return "cuda.bindings"
        errors.append(f"cudaMemsetAsync returned {err}")
    except Exception as exc:
        errors.append(f"cuda.bindings: {exc!r}")
    try:
        import cupy

        cupy.cuda.runtime.memsetAsync(ptr, value, nbytes, stream)
        return "cupy"
    except Exception as exc:
        errors.append(f"cupy: {exc!r}")
    return "none: " + "; ".join(errors)


def transfers_and_syncs() -> dict[str, Any]:
    """HtoD and DtoH copies from pinned and from pageable memory, one memset, and three kinds of sync.

    Expected in a capture: Memcpy HtoD (Pinned -> Device), HtoD (Pageable -> Device),
    DtoH (Device -> Pinned), DtoH (Device -> Pageable); Memset (Device) of MEMSET_BYTES;
    a stream sync, an event sync and a context (device) sync.
    """
    import torch

    n = COPY_BYTES // 4
    pinned = torch.ones(n, dtype=torch.float32).pin_memory()
    pageable = torch.ones(n, dtype=torch.float32)
    dev_a = pinned.to("cuda", non_blocking=True)
    dev_b = pageable.to("cuda")
    back_pinned = torch.empty(n, dtype=torch.float32).pin_memory()
    back_pinned.copy_(dev_a, non_blocking=True)
    back_pageable = dev_b.cpu()
    scratch = torch.empty(MEMSET_BYTES // 4, dtype=torch.float32, device="cuda")
    memset_api = memset_device(scratch)
    torch.cuda.current_stream().synchronize()  # stream sync
    event = torch.cuda.Event()
    event.record()
    event.synchronize()  # event sync
    torch.cuda.synchronize()  # context/device sync
    assert float(back_pinned[0]) == 1.0 and float(back_pageable[-1]) == 1.0
    return {"copy_bytes": COPY_BYTES, "memset_bytes": MEMSET_BYTES, "memset_api": memset_api}


class Trainer:
    """A small real training loop: an MLP on synthetic data, input copied from pinned memory each step.

    One step = HtoD input copy, forward, backward, optimizer step, loss.item() (DtoH + sync).
    """

    def __init__(self, width: int = 2048, depth: int = 4, batch: int = 512, seed: int = 0) -> None:
        import torch

        torch.manual_seed(seed)
        layers: list = []
        for _ in range(depth):
            layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
        self.model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).cuda()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        self.x = torch.randn(batch, width).pin_memory()
        self.y = torch.randint(0, 10, (batch,)).pin_memory()
        self.loss_fn = torch.nn.CrossEntropyLoss()

    def step(self, annotate: bool = False, index: int = 0) -> float:
        import torch

        if annotate:
            torch.cuda.nvtx.range_push(f"step {index}")
        x = self.x.to("cuda", non_blocking=True)
        y = self.y.to("cuda", non_blocking=True)
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.opt.step()
        value = float(loss.item())
        if annotate:
            torch.cuda.nvtx.range_pop()
        return value

    def timed_steps(self, n: int) -> list[float]:
        """Wall time of each of ``n`` steps in seconds (each ends in loss.item(), i.e. a sync)."""
        times = []
        for i in range(n):
            t0 = time.perf_counter()
            self.step(index=i)
            times.append(time.perf_counter() - t0)
        return times
