"""Conversion tests: cupti-python activity records → EventBatch columns (CPU only, no live capture).

The records are real cupti-python records built with the module's own dtypes
(tests/cupti_records_real.py); whether a live capture fills them so is tested in tests/gpu.
"""

from __future__ import annotations

from types import SimpleNamespace as NS

import numpy as np
import pytest

import cupti_records_real as f
from cuda_tracer.model.correlate import correlate
from cuda_tracer.capture.cupti_records import (OVERHEAD_KIND, SYNC_TYPE, RecordConverter, convert_records,
                                       enum_mismatches, strip_api_version)
from cuda_tracer.model.events import MISSING, EventBatch, Kind, MemcpyKind, SyncKind

T0 = 1_764_000_000_000_000_000  # a CUPTI timestamp in ns
LAUNCH_CBID, MEMCPY_CBID = 211, 51
NAMES = {LAUNCH_CBID: "cudaLaunchKernel_v7000", MEMCPY_CBID: "cudaMemcpyAsync_v3020"}


def namer(kind: int, cbid: int) -> str:
    return strip_api_version(NAMES.get(cbid, f"api_{cbid}"))


def one(batch: EventBatch, kind: Kind) -> int:
    rows = np.flatnonzero(batch.kind == kind)
    assert len(rows) == 1, f"expected one {kind.name}, got {len(rows)}"
    return int(rows[0])


def test_kernel_columns_and_launch_linkage():
    records = [f.api(5, T0, T0 + 4_000, LAUNCH_CBID), f.kernel(5, T0 + 9_000, T0 + 30_000)]
    batch = convert_records(records, clock_offset_ns=100, api_name=namer)
    k, launch = one(batch, Kind.KERNEL), one(batch, Kind.RUNTIME)
    assert batch.names([k]) == ["_Z10vector_addPKfS0_Pfi"]
    assert batch.names([launch]) == ["cudaLaunchKernel"]
    assert (batch.start_ns[k], batch.end_ns[k]) == (T0 + 9_100, T0 + 30_100)
    assert (batch.device[k], batch.stream[k], batch.correlation[k]) == (0, 7, 5)
    assert (batch.grid_x[k], batch.block_x[k], batch.registers[k]) == (8192, 128, 16)
    assert batch.shared_memory[k] == 1024 + 512  # static + dynamic, as Kineto reports it
    assert batch.graph_id[k] == MISSING  # graph_id 0 means "not launched from a graph"
    assert (batch.pid[launch], batch.tid[launch]) == (f.PID, f.TID)
    corr = correlate(batch)
    assert corr.orphan_count == 0
    assert corr.latency_ns.tolist() == [9_000]  # gpu.start - launch.start
    assert corr.delay_ns.tolist() == [5_000]  # gpu.start - launch.end


def test_graph_kernel_keeps_graph_ids():
    batch = convert_records([f.kernel(1, T0, T0 + 10, graph_id=3, graph_node_id=77)])
    assert batch.graph_id.tolist() == [3]
    assert batch.extras_of(0)["graph_node_id"] == 77


@pytest.mark.parametrize("copy_kind,src,dst,direction,name", [
    ("HTOD", "PINNED", "DEVICE", MemcpyKind.HtoD, "Memcpy HtoD (Pinned -> Device)"),
    ("HTOD", "PAGEABLE", "DEVICE", MemcpyKind.HtoD, "Memcpy HtoD (Pageable -> Device)"),
    ("DTOH", "DEVICE", "PINNED", MemcpyKind.DtoH, "Memcpy DtoH (Device -> Pinned)"),
    ("DTOH", "DEVICE", "PAGEABLE", MemcpyKind.DtoH, "Memcpy DtoH (Device -> Pageable)"),
    ("DTOD", "DEVICE", "DEVICE", MemcpyKind.DtoD, "Memcpy DtoD (Device -> Device)"),
    ("ATOH", "ARRAY", "PAGEABLE", MemcpyKind.DtoH, "Memcpy AtoH (Array -> Pageable)"),
])
def test_memcpy_direction_and_memory_kinds(copy_kind, src, dst, direction, name):
    batch = convert_records([f.memcpy(3, T0, T0 + 500, copy_kind, src, dst, nbytes=12345)])
    assert batch.kind.tolist() == [Kind.MEMCPY]
    assert batch.subkind.tolist() == [direction]
    assert batch.names() == [name]
    assert batch.bytes.tolist() == [12345]
    extras = batch.extras_of(0)
    assert (extras["src_memory"], extras["dst_memory"]) == (src.lower(), dst.lower())
    assert extras["async"] is True


def test_sync_memcpy_is_not_async():
    batch = convert_records([f.memcpy(3, T0, T0 + 1, "HTOD", "PAGEABLE", "DEVICE", flags=0)])
    assert batch.extras_of(0)["async"] is False


def test_peer_to_peer_copy():
    batch = convert_records([f.memcpy_p2p(8, T0, T0 + 50, src_device=0, dst_device=1)])
    assert batch.subkind.tolist() == [MemcpyKind.PtoP]
    extras = batch.extras_of(0)
    assert (extras["src_device"], extras["dst_device"]) == (0, 1)


def test_memset():
    batch = convert_records([f.memset(4, T0, T0 + 70, nbytes=4096)])
    assert batch.names() == ["Memset (Device)"]
    assert (batch.kind[0], batch.bytes[0], batch.correlation[0]) == (Kind.MEMSET, 4096, 4)
    assert batch.extras_of(0) == {"memory": "device", "value": 0}


@pytest.mark.parametrize("sync_type,kind,name", [
    ("EVENT_SYNCHRONIZE", SyncKind.EVENT, "Event Sync"),
    ("STREAM_WAIT_EVENT", SyncKind.STREAM_WAIT_EVENT, "Stream Wait Event"),
    ("STREAM_SYNCHRONIZE", SyncKind.STREAM, "Stream Sync"),
    ("CONTEXT_SYNCHRONIZE", SyncKind.CONTEXT, "Context Sync"),
])
def test_sync_kinds_named_like_kineto(sync_type, kind, name):
    records = [f.sync(9, T0 + 100, T0 + 900, SYNC_TYPE[sync_type]), f.kernel(1, T0, T0 + 50)]
    batch = convert_records(records)
    s = one(batch, Kind.SYNC)
    assert batch.subkind[s] == kind and batch.names([s]) == [name]
    assert batch.device[s] == 0  # learnt from the kernel's context, even though it came later


def test_sync_invalid_ids_become_missing_and_event_is_kept():
    batch = convert_records([f.sync(1, T0, T0 + 5, SYNC_TYPE["CONTEXT_SYNCHRONIZE"],
                                    stream=0xFFFFFFFF),
                             f.sync(2, T0, T0 + 5, SYNC_TYPE["EVENT_SYNCHRONIZE"], event=12)])
    assert batch.stream.tolist() == [MISSING, 7]
    assert batch.device.tolist() == [MISSING, MISSING]  # no GPU record told us the context's device
    assert batch.extra("cuda_event_id") == {1: 12}


def test_driver_api_and_failed_call():
    batch = convert_records([f.api(2, T0, T0 + 10, 307, driver=True, return_value=700)],
                            api_name=lambda kind, cbid: f"cuLaunchKernel#{kind}/{cbid}")
    assert batch.kind.tolist() == [Kind.DRIVER]
    assert batch.names() == ["cuLaunchKernel#4/307"]  # DRIVER is activity kind 4
    assert batch.extras_of(0) == {"return_value": 700}


def test_unknown_cbid_without_namer_gets_a_stable_name():
    batch = convert_records([f.api(2, T0, T0 + 10, 999)])
    assert batch.names() == ["cuda_cbid_999"]


def test_nvtx_ranges_pair_across_buffers():
    conv = RecordConverter(clock_offset_ns=-T0)
    first = conv.convert([f.marker(1, T0 + 10, 2, "forward", "train"),
                          f.marker(2, T0 + 20, 2, "inner"), f.marker(2, T0 + 30, 4)])  # end: no name
    assert first.names() == ["inner"] and first.start_ns.tolist() == [20]
    assert conv.open_markers.keys() == {1}
    second = conv.convert([f.marker(1, T0 + 90, 4), f.marker(3, T0 + 95, 1, "checkpoint"),
                           f.marker(4, T0 + 99, 4)])
    assert second.names() == ["forward", "checkpoint"]
    assert second.kind.tolist() == [Kind.USER_ANNOTATION] * 2
    assert (second.start_ns.tolist(), second.end_ns.tolist()) == ([10, 95], [90, 95])
    assert second.extras_of(0) == {"source": "nvtx", "domain": "train"}
    assert (second.pid[0], second.tid[0]) == (f.PID, f.TID)
    assert conv.unmatched_marker_ends == 1 and not conv.open_markers


def test_name_records_name_objects_without_rows():
    conv = RecordConverter()
    batch = conv.convert([f.name_record("THREAD", "dataloader"),
                          f.name_record("STREAM", "copy stream", device_id=0, context_id=1,
                                        stream_id=13)])
    assert len(batch) == 0
    assert conv.object_names == {("thread", f.PID, f.TID): "dataloader",
                                 ("stream", 0, 1, 13): "copy stream"}


def test_overhead_names():
    batch = convert_records([f.overhead(T0, T0 + 7, OVERHEAD_KIND["CUPTI_BUFFER_FLUSH"]),
                             f.overhead(T0, T0 + 7, 12345)])
    assert batch.kind.tolist() == [Kind.OVERHEAD] * 2
    assert batch.names() == ["Buffer Flush", "Overhead 12345"]
    assert batch.extra("overhead_kind") == {0: 1 << 16, 1: 12345}


def test_unknown_kinds_are_counted_not_converted():
    conv = RecordConverter()
    batch = conv.convert([NS(kind=36, context_id=1), NS(kind=36), f.memset(1, T0, T0 + 1)])
    assert len(batch) == 1 and conv.skipped == {36: 2}


def test_name_of_a_stream_reads_the_dcs_view_of_the_union():
    """A THREAD name's ``dcs`` view reads its process id as a device id: only ``pt`` may be read."""
    thread = f.name_record("THREAD", "main", process_id=77, thread_id=88)
    assert (thread.object_id.dcs.device_id, thread.object_id.dcs.context_id) == (77, 88)
    conv = RecordConverter()
    conv.convert([thread, f.name_record("DEVICE", "H200", device_id=3)])
    assert conv.object_names == {("thread", 77, 88): "main", ("device", 3): "H200"}


def test_training_step_shaped_buffer_round_trips_through_save(tmp_path):
    """A step's worth of records: H2D input copy, kernels, D2H loss copy, sync; then save/load."""
    records = [f.api(1, T0, T0 + 3_000, MEMCPY_CBID),
               f.memcpy(1, T0 + 2_000, T0 + 8_000, "HTOD", "PINNED", "DEVICE"),
               *[x for i in range(2, 6) for x in (f.api(i, T0 + i * 10_000, T0 + i * 10_000 + 2_000,
                                                        LAUNCH_CBID),
                                                  f.kernel(i, T0 + i * 10_000 + 5_000,
                                                           T0 + i * 10_000 + 9_000))],
               f.api(6, T0 + 70_000, T0 + 71_000, MEMCPY_CBID),
               f.memcpy(6, T0 + 72_000, T0 + 72_500, "DTOH", "DEVICE", "PAGEABLE", flags=0),
               f.sync(7, T0 + 71_000, T0 + 73_000, SYNC_TYPE["STREAM_SYNCHRONIZE"])]
    batch = convert_records(records, api_name=namer)
    assert batch.counts_by_kind() == {"kernel": 4, "memcpy": 2, "sync": 1, "runtime": 6}
    assert correlate(batch).orphan_count == 0
    path = tmp_path / "step.npz"
    batch.save(path)
    again = EventBatch.load(path)
    for col in batch.columns:
        assert np.array_equal(again.columns[col], batch.columns[col]), col
    assert again.extra("src_memory") == batch.extra("src_memory")


def test_enum_mismatches_reports_differences():
    assert enum_mismatches(NS()) != []  # a module without the enums matches nothing
    fake = NS(ActivityKind=NS(MEMCPY=1, MEMSET=2, KERNEL=3, DRIVER=4, RUNTIME=5,
                              CONCURRENT_KERNEL=10, NAME=11, MARKER=12, OVERHEAD=17, MEMCPY2=22,
                              SYNCHRONIZATION=99))
    problems = [p for p in enum_mismatches(fake) if p.startswith("ActivityKind.")]
    assert problems == ["ActivityKind.SYNCHRONIZATION: expected 38, module has 99"]
