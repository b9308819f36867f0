"""Which metrics need a GPU, which appear only once something happened, and which are on no
dashboard. The one place the tests read to decide what a CPU-only run must show.

* ``NEEDS_GPU``: series that only a run with a GPU produces (NVML samplers, GPU-op aggregates). A
  query reading any of them belongs to a *GPU-only* panel: on a CPU-only run it must parse and
  return nothing.
* ``ON_EVENT``: series that appear with the first occurrence (drops). Their queries must parse.
* ``NOT_SHOWN``: catalogue metrics deliberately on no dashboard, with the reason.
"""

from __future__ import annotations

from otel_profiler.metrics import points as m

NEEDS_GPU: frozenset[m.Spec] = frozenset(
    {s for s in m.CATALOGUE if s.source == "nvml"}
    | {m.GPU_BUSY, m.GPU_BUSY_TIME, m.GPU_SPAN_TIME, m.KERNEL_TIME, m.LAUNCH_DELAY, m.LAUNCH_LATENCY,
       m.MEMCPY_BYTES, m.MEMCPY_TIME, m.MEMCPY_THROUGHPUT, m.SYNC_TIME, m.QUEUE_DEPTH,
       m.GPU_MEMORY_PEAK_ALLOCATED, m.GPU_MEMORY_PEAK_RESERVED}
    # FLOPs need operators recorded with shapes (not a CPU-only run's default), MFU a GPU's peak
    | {m.FLOPS, m.STEP_MFU})

ON_EVENT: frozenset[m.Spec] = frozenset({m.DROPPED})

NOT_SHOWN: dict[m.Spec, str] = {}


def expectation(metrics: set[m.Spec]) -> str:
    """What a CPU-only run gives a query reading ``metrics``: "gpu", "event" or "data"."""
    if metrics & NEEDS_GPU:
        return "gpu"
    if metrics and metrics <= ON_EVENT:
        return "event"
    return "data"
