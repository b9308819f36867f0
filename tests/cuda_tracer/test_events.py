"""EventBatch: concatenation, slicing by time and kind, and a lossless disk round trip on real traces."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from conftest import trace
from cuda_tracer.model.events import COLUMNS, BatchBuilder, EventBatch, Kind
from cuda_tracer.loading import load_profile

NCCL = "hta/nccl_parser_config/nccl_data.json.gz"
SYNC = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


def batch_of(relative: str) -> EventBatch:
    return load_profile([str(trace(relative))]).ranks[0].batch


def same(a: EventBatch, b: EventBatch) -> bool:
    return (all(np.array_equal(a.columns[c], b.columns[c]) for c in COLUMNS if c != "name")
            and a.names() == b.names()
            and [a.extras_of(r) for r in range(len(a))] == [b.extras_of(r) for r in range(len(b))])


def test_save_and_load_round_trip_is_lossless():
    batch = batch_of(SYNC)
    buf = io.BytesIO()
    batch.save(buf)
    buf.seek(0)
    loaded = EventBatch.load(buf)
    assert same(batch, loaded)
    assert loaded.extra("wait_on_stream") == batch.extra("wait_on_stream")


def test_a_batch_written_under_a_former_column_name_still_loads():
    """Profile folders written before ``shared_mem`` became ``shared_memory`` (the trace field's one
    name from reader to span) read as before: the column is found under its former file name."""
    batch = batch_of(SYNC)
    assert (batch.shared_memory > 0).any()
    buf = io.BytesIO()
    batch.save(buf)
    old = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as new_zip, zipfile.ZipFile(old, "w") as old_zip:
        for item in new_zip.namelist():
            old_zip.writestr(item.replace("shared_memory.npy", "shared_mem.npy"), new_zip.read(item))
    assert "shared_mem.npy" in zipfile.ZipFile(old).namelist()
    old.seek(0)
    assert same(batch, EventBatch.load(old))


def test_concat_merges_string_tables_and_keeps_extras():
    a, b = batch_of(SYNC), batch_of(NCCL)
    both = EventBatch.concat([a, b])
    assert len(both) == len(a) + len(b)
    assert both.names() == a.names() + b.names()
    assert same(both.take(np.arange(len(a))), a)
    assert same(both.take(np.arange(len(a), len(both))), b)
    assert len(both.strings) < len(a.strings) + len(b.strings)  # shared names stored once


def test_between_keeps_exactly_the_events_overlapping_the_window():
    batch = batch_of(NCCL)
    lo = int(np.median(batch.start_ns))
    hi = lo + 50_000_000
    part = batch.between(lo, hi)
    start, end = batch.start_ns, batch.end_ns
    expected = ((start < hi) & (end > lo)) | ((start == end) & (start >= lo) & (start < hi))
    assert len(part) == int(expected.sum()) > 0
    assert ((part.start_ns < hi) & ((part.end_ns > lo) | (part.start_ns >= lo))).all()


def test_of_kind_selects_only_those_kinds():
    batch = batch_of(NCCL)
    gpu = batch.of_kind(Kind.KERNEL, Kind.MEMCPY)
    assert set(gpu.kind.tolist()) == {Kind.KERNEL, Kind.MEMCPY}
    assert len(gpu) == int(np.isin(batch.kind, [Kind.KERNEL, Kind.MEMCPY]).sum())


def test_builder_and_from_columns_agree():
    b = BatchBuilder()
    b.add(Kind.KERNEL, "k", 10, 20, device=0, stream=7, correlation=5)
    row = b.add(Kind.STEP, "step", 0, 100, pid=1, tid=1)
    b.add_extra(row, "step", 3)
    built = b.build()
    direct = EventBatch.from_columns(["k", "step"], kind=[Kind.KERNEL, Kind.STEP], name=[0, 1],
                                     start_ns=[10, 0], end_ns=[20, 100], device=[0, -1],
                                     stream=[7, -1], correlation=[5, -1], pid=[-1, 1], tid=[-1, 1])
    assert all(np.array_equal(built.columns[c], direct.columns[c]) for c in COLUMNS)
    assert built.extra("step") == {1: 3}


def test_loading_something_else_is_a_clear_error(tmp_path):
    path = tmp_path / "x.events"
    path.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable event batch"):
        EventBatch.load(str(path))


@pytest.mark.parametrize("rows", [0, 1, 7, 5000])
def test_kinds_in_is_isin_for_every_size_of_code_set(rows):
    """Both ways of ``kinds_in`` (codes compared one by one, or a table) against ``np.isin``."""
    from cuda_tracer.model.events import COMPARED_CODES, kinds_in

    rng = np.random.default_rng(rows)
    codes = rng.integers(0, 256, rows).astype(np.uint8)
    for size in [0, 1, 2, COMPARED_CODES, COMPARED_CODES + 1, 40]:
        wanted = tuple(int(c) for c in rng.choice(256, size, replace=False))
        found = kinds_in(codes, wanted)
        assert found.dtype == bool
        np.testing.assert_array_equal(found, np.isin(codes, np.asarray(wanted, np.int64)))
    np.testing.assert_array_equal(kinds_in(codes.astype(np.int64), (1, 2)), np.isin(codes, [1, 2]))


def test_durations_are_made_once_per_columns_and_left_out_of_a_pickle() -> None:
    import pickle

    batch = EventBatch.from_columns(["a"], kind=[1, 1], name=[0, 0], start_ns=[10, 20], end_ns=[15, 40])
    first = batch.duration_ns
    assert first.tolist() == [5, 20] and batch.duration_ns is first and not first.flags.writeable
    batch.columns["end_ns"] = np.array([11, 21], np.int64)  # new columns: new durations
    assert batch.duration_ns.tolist() == [1, 1]
    copy = pickle.loads(pickle.dumps(batch))
    assert "_duration" not in copy.__dict__ and copy.duration_ns.tolist() == [1, 1]
