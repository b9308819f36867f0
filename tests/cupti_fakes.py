"""Stand-ins for cupti-python's activity records, for CPU conversion tests (no GPU, no cupti-python).

Each factory builds a ``SimpleNamespace`` with exactly the attributes of the real record class, as
listed in ``cupti/cupti.pyi`` of cupti-python 13.4.0 (and 13.0.1, which has the same fields for these
classes), with plausible values from a real capture's shape. Padding fields (``pad``, ``pad2``) and
``ptr`` are left out: the conversion must not read them. Enum values are CUPTI's C ABI
(``cupti_activity.h``), which cupti-python's IntEnums mirror.

These fakes exercise the conversion code only. That real records carry these attributes with these
meanings is checked by tests/gpu on a GPU machine, not here.
"""

from __future__ import annotations

import os
from types import SimpleNamespace as NS

import pytest

from cuda_tracer import subscriber
from cuda_tracer.cupti_records import ACTIVITY_KIND, MEMCPY_KIND, MEMORY_KIND, OBJECT_KIND

CONTEXT = 1
PID, TID = 4242, 140001


def kernel(corr: int, start: int, end: int, name: str = "_Z10vector_addPKfS0_Pfi", *,
           device: int = 0, stream: int = 7, graph_id: int = 0, graph_node_id: int = 0,
           kind: str = "CONCURRENT_KERNEL") -> NS:
    """ActivityKernel9..13 (CONCURRENT_KERNEL): the fields of ActivityKernel9, the oldest of them."""
    return NS(kind=ACTIVITY_KIND[kind], name=name, start=start, end=end, queued=0, submitted=0,
              completed=end, device_id=device, context_id=CONTEXT, stream_id=stream,
              correlation_id=corr, grid_id=corr * 10, grid_x=8192, grid_y=1, grid_z=1, block_x=128,
              block_y=1, block_z=1, cluster_x=0, cluster_y=0, cluster_z=0,
              cluster_scheduling_policy=0, registers_per_thread=16, static_shared_memory=1024,
              dynamic_shared_memory=512, shared_memory_executed=32768, shared_memory_config=0,
              shared_memory_carveout_requested=0, is_shared_memory_carveout_requested=0,
              shmem_limit_config=0, local_memory_per_thread=0, local_memory_total=0,
              local_memory_total_v2=0, launch_type=0, graph_id=graph_id,
              graph_node_id=graph_node_id, channel_id=1, channel_type=1,
              partitioned_global_cache_requested=0, partitioned_global_cache_executed=0,
              max_active_clusters=0, max_potential_cluster_size=0, p_access_policy_window=0,
              cache_config=NS(config=NS(requested=0, executed=0)))


def memcpy(corr: int, start: int, end: int, copy_kind: str, src: str, dst: str, *,
           nbytes: int = 4 << 20, stream: int = 7, flags: int = 1) -> NS:
    """ActivityMemcpy6 (MEMCPY)."""
    return NS(kind=ACTIVITY_KIND["MEMCPY"], copy_kind=MEMCPY_KIND[copy_kind],
              src_kind=MEMORY_KIND[src], dst_kind=MEMORY_KIND[dst], flags_=flags, bytes=nbytes,
              start=start, end=end, device_id=0, context_id=CONTEXT, stream_id=stream,
              correlation_id=corr, runtime_correlation_id=corr, graph_node_id=0, graph_id=0,
              channel_id=2, channel_type=2, copy_count=1, is_device_launched=0)


def memcpy_p2p(corr: int, start: int, end: int, *, src_device: int = 0, dst_device: int = 1) -> NS:
    """ActivityMemcpyPtoP4 (MEMCPY2)."""
    return NS(kind=ACTIVITY_KIND["MEMCPY2"], copy_kind=MEMCPY_KIND["PTOP"],
              src_kind=MEMORY_KIND["DEVICE"], dst_kind=MEMORY_KIND["DEVICE"], flags_=1,
              bytes=1 << 20, start=start, end=end, device_id=src_device, context_id=CONTEXT,
              stream_id=9, src_device_id=src_device, dst_device_id=dst_device, src_context_id=1,
              dst_context_id=2, correlation_id=corr, graph_node_id=0, graph_id=0, channel_id=3,
              channel_type=2)


def memset(corr: int, start: int, end: int, *, nbytes: int = 1 << 20) -> NS:
    """ActivityMemset4 (MEMSET)."""
    return NS(kind=ACTIVITY_KIND["MEMSET"], value=0, bytes=nbytes, start=start, end=end,
              device_id=0, context_id=CONTEXT, stream_id=7, correlation_id=corr, flags_=1,
              memory_kind=MEMORY_KIND["DEVICE"], graph_node_id=0, graph_id=0, channel_id=2,
              channel_type=2, is_device_launched=0)


def api(corr: int, start: int, end: int, cbid: int, *, driver: bool = False,
        return_value: int = 0) -> NS:
    """ActivityAPI (RUNTIME and DRIVER)."""
    return NS(kind=ACTIVITY_KIND["DRIVER" if driver else "RUNTIME"], cbid=cbid, start=start,
              end=end, process_id=PID, thread_id=TID, correlation_id=corr,
              return_value=return_value)


def sync(corr: int, start: int, end: int, sync_type: int, *, stream: int = 7,
         event: int = 0xFFFFFFFF) -> NS:
    """ActivitySynchronization2 (SYNCHRONIZATION); 0xFFFFFFFF is CUPTI's "invalid" for ids."""
    return NS(kind=ACTIVITY_KIND["SYNCHRONIZATION"], type=sync_type, start=start, end=end,
              correlation_id=corr, context_id=CONTEXT, stream_id=stream, cuda_event_id=event,
              cuda_event_sync_id=0, return_value=0)


def _thread_object() -> NS:
    """ActivityObjectKindId: a union of ``pt`` (process/thread) and ``dcs`` (device/context/stream)."""
    return NS(pt=NS(process_id=PID, thread_id=TID), dcs=NS(device_id=0, context_id=0, stream_id=0))


def marker(marker_id: int, timestamp: int, flags: int, name: str = "", domain: str = "") -> NS:
    """ActivityMarker2 (MARKER): flags 1 = instantaneous, 2 = range start, 4 = range end."""
    return NS(kind=ACTIVITY_KIND["MARKER"], flags_=flags, timestamp=timestamp, id=marker_id,
              object_kind=OBJECT_KIND["THREAD"], object_id=_thread_object(), name=name,
              domain=domain)


def name_record(object_kind: str, name: str, **ids: int) -> NS:
    """ActivityName (NAME)."""
    oid = NS(pt=NS(process_id=ids.get("process_id", PID), thread_id=ids.get("thread_id", TID)),
             dcs=NS(device_id=ids.get("device_id", 0), context_id=ids.get("context_id", 0),
                    stream_id=ids.get("stream_id", 0)))
    return NS(kind=ACTIVITY_KIND["NAME"], object_kind=OBJECT_KIND[object_kind], object_id=oid,
              name=name)


def overhead(start: int, end: int, overhead_kind: int) -> NS:
    """ActivityOverhead3 (OVERHEAD)."""
    return NS(kind=ACTIVITY_KIND["OVERHEAD"], overhead_kind=overhead_kind,
              object_kind=OBJECT_KIND["THREAD"], object_id=_thread_object(), start=start,
              end=end, correlation_id=0, overhead_data=0)


@pytest.fixture(autouse=True)
def isolated_from_other_profilers(monkeypatch):
    """No Nsight variables and no earlier back-off warning leak into a test (autouse where imported)."""
    for var in [k for k in os.environ if k.startswith("NSYS_")]:
        monkeypatch.delenv(var)
    monkeypatch.delenv("CUDA_INJECTION64_PATH", raising=False)
    subscriber._reset_warnings_for_tests()
