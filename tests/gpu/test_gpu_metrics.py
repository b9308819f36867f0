"""NVML system metrics against real NVML while a CUDA workload runs (skipped without a CUDA GPU).

Checks the readings' ranges and units (W from mW, Hz from MHz, bytes), ``hw.id`` = NVML UUID, this
process's per-process memory, energy growing, and on Hopper or newer the GPM ratios. GPM is optional:
NVML may not offer it (virtual machines, some drivers), which is reported as a skip, not a failure.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from gpu_env import cuda_available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU here")]


@pytest.fixture(scope="module")
def busy_gpu_points():
    """Two sampler ticks 1.5 s apart while a matmul loop keeps the GPU busy: (first, points)."""
    import torch

    from otel_profiler.metrics.system import SystemSampler

    stop = threading.Event()

    def work() -> None:
        a = torch.randn(4096, 4096, device="cuda")
        while not stop.is_set():
            a = (a @ a).tanh_()
            torch.cuda.synchronize()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    sampler = SystemSampler(1.0)
    try:
        assert sampler.has_gpu
        time.sleep(1.5)
        sampler.tick()
        first = {(p.spec.name, tuple(sorted(p.attributes.items()))): p.value for p in sampler.points()}
        time.sleep(1.5)
        sampler.tick()
    finally:
        stop.set()
        thread.join(10)
        sampler.close()
    return first, [p for p in sampler.points() if p.spec.source == "nvml"]


def test_nvml_sampler_on_a_busy_gpu(busy_gpu_points) -> None:
    from otel_profiler.metrics import points as m

    first, points = busy_gpu_points
    by = {}
    for p in points:
        if p.attributes["hw.name"] and p.attributes["hw.id"].startswith("GPU-"):
            by.setdefault(p.spec.name, []).append(p)
    # The device running the loop: the busiest one (NVML's order need not be CUDA's).
    uuid0 = max(by[m.GPU_UTILIZATION.name], key=lambda p: p.value).attributes["hw.id"]

    def one(spec, **attrs):
        hits = [p for p in by.get(spec.name, []) if all(p.attributes.get(k) == v for k, v in attrs.items())
                and p.attributes["hw.id"] == uuid0]
        assert hits, f"no {spec.name} {attrs}"
        return hits[0].value

    assert one(m.GPU_UTILIZATION) > 0.3  # the matmul loop keeps it busy
    used, limit = one(m.GPU_MEMORY_USAGE), one(m.GPU_MEMORY_LIMIT)
    assert 64e6 < used <= limit and limit > 1e9
    assert 10 < one(m.GPU_POWER) < 2000  # watts
    assert 10 <= one(m.GPU_TEMPERATURE) <= 110
    assert one(m.GPU_CLOCK, **{"otel_profiler.gpu.clock": "sm"}) > 100e6  # Hz
    energy = [p for p in points if p.spec is m.GPU_ENERGY][0]
    assert energy.value > first[(energy.spec.name, tuple(sorted(energy.attributes.items())))]
    pids = {p.attributes["process.pid"] for p in points if p.spec is m.GPU_PROCESS_MEMORY}
    assert os.getpid() in pids or not pids  # containers may hide other pids, never report ours wrongly


def test_gpm_ratios_where_nvml_offers_them(busy_gpu_points) -> None:
    import torch

    from otel_profiler.metrics import points as m

    if torch.cuda.get_device_capability(0)[0] < 9:
        pytest.skip("GPM needs Hopper or newer")
    gpm = {p.attributes["otel_profiler.gpu.unit"]: p.value for p in busy_gpu_points[1]
           if p.spec is m.GPU_GPM}
    if not gpm:
        pytest.skip("optional: NVML offers no GPM metrics on this device (common in virtual machines)")
    assert {"sm", "tensor", "dram"} <= set(gpm), gpm
    assert all(0.0 <= v <= 1.0 for v in gpm.values()) and gpm["sm"] > 0.1
