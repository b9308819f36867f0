"""Memory recording of a live run on the CPU: OTEL_PROFILER_ACTIVITIES=memory turns on the allocator's
[memory] events in Kineto windows (the window's summary has the host memory section, its peak equal
to a recount of the events' totals), the setting is validated, and the torch.cuda statistics and
snapshot paths are harmless without CUDA: on this torch the real snapshot API is absent and the
feature turns off with one warning, writing nothing. The snapshot reader refuses any pickle that is
not plain values. (The CUDA paths themselves run in tests/gpu/test_gpu_memory.py.)"""

from __future__ import annotations

import os
import pickle
import warnings

import numpy as np
import pytest

from cuda_tracer.model.events import Kind
from cuda_tracer.loading import load_profile
from otel_profiler import api, config
from otel_profiler.analysis.memory.snapshots import read_snapshot, snapshots_in, summarize_snapshot
from otel_profiler.analysis.summary import summarize
from otel_profiler.live.samples.cuda_memory import CudaMemory
from otel_profiler.report.console import render_table

QUIET = dict(summary_at_exit=False, auto_steps=False, signal=False)


def _train(folder, activities: str, steps: int = 6) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(128, 64), torch.randint(0, 10, (128,))
    with api.Profiler(profile_dir=str(folder), activities=activities, steps="1:4", **QUIET):
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            api.step()


def test_memory_activity_records_the_allocator_in_live_windows(tmp_path):
    _train(tmp_path, "cpu_op,memory")
    profile = load_profile([str(tmp_path)])
    batch = profile.batch()
    rows = np.flatnonzero(batch.kind == Kind.MEMORY)
    assert len(rows) > 0
    totals = [batch.extras_of(int(r)).get("total_allocated") for r in rows.tolist()]
    summary = summarize(profile)
    host = summary["memory"]["host"]["cpu"]
    assert host["peak"]["allocated_bytes"] == max(t for t in totals if t is not None) > 0
    assert host["events"] == len(rows) and host["allocations"] > 0
    assert host["peak"]["operator"] is not None and host["peak"]["operator"].startswith("aten::")
    assert [s["step"] for s in host["steps"] if s["peak_allocated_bytes"] is not None] == [1, 2, 3]
    assert summary["memory"]["devices"] == {}  # no GPU here
    assert "Host memory (MiB" in render_table(summary)
    assert "cuda_memory" not in profile.ranks[0].meta  # no CUDA: no torch.cuda statistics
    assert not [f for f in os.listdir(tmp_path) if f.startswith("memory-snapshot")]


def test_memory_without_cpu_ops_keeps_only_memory_events(tmp_path):
    _train(tmp_path, "memory")
    batch = load_profile([str(tmp_path)]).batch()
    assert (batch.kind == Kind.MEMORY).sum() > 0
    assert (batch.kind == Kind.CPU_OP).sum() == 0


def test_default_activities_record_no_memory(tmp_path):
    _train(tmp_path, "cpu_op")
    summary = summarize(load_profile([str(tmp_path)]))
    assert "host" not in summary["memory"] and summary["memory"]["events"] == 0


def test_activities_and_snapshot_settings_are_validated():
    assert "memory" in config.parse_activities("gpu,memory")
    with pytest.raises(config.ConfigError, match="unknown activity 'memroy'"):
        config.parse_activities("memroy")
    settings = config.load({"OTEL_PROFILER_MEMORY_SNAPSHOT": "5000"})
    assert settings.memory_snapshot == 5000
    bad = config.load({"OTEL_PROFILER_MEMORY_SNAPSHOT": "-1"})  # out of range: one notice, the default
    assert bad.memory_snapshot == 0 and bad.ok
    assert len(bad.notices) == 1 and bad.notices[0].startswith("OTEL_PROFILER_MEMORY_SNAPSHOT='-1'")


def test_cuda_memory_is_harmless_without_cuda(tmp_path):
    torch = pytest.importorskip("torch")
    assert not torch.cuda.is_initialized()
    cm = CudaMemory(lambda reason: str(tmp_path / f"snapshot.{reason}.pickle"), per_step=True,
                    history_entries=100)
    cm.step_end(1)
    cm.close()
    assert cm.meta() == {} and os.listdir(tmp_path) == []
    # The real snapshot API of a torch without CUDA: absent; one warning, nothing written, no raise.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cm.write_snapshot("oom") is None
        cm._on_oom(0, 1 << 30, 0, 0)  # the out-of-memory observer: no second try, no raise
        assert cm.write_snapshot("exit") is None
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and "snapshot is off" in said[0]
    assert os.listdir(tmp_path) == []


def _snapshot() -> dict:
    """A snapshot in the shape torch.cuda.memory._snapshot() returns (two segments, history)."""
    frame = {"filename": "train.py", "line": 12, "name": "forward"}
    return {"segments": [
        {"device": 0, "address": 1 << 20, "total_size": 20 << 20, "allocated_size": 12 << 20,
         "active_size": 12 << 20, "stream": 0, "segment_type": "large",
         "blocks": [{"size": 8 << 20, "requested_size": 8 << 20, "state": "active_allocated", "frames": [frame]},
                    {"size": 4 << 20, "requested_size": 4 << 20, "state": "active_allocated", "frames": []},
                    {"size": 8 << 20, "state": "inactive"}]},
        {"device": 0, "address": 1 << 30, "total_size": 2 << 20, "allocated_size": 0, "active_size": 0,
         "stream": 0, "segment_type": "small", "blocks": [{"size": 2 << 20, "state": "inactive"}]}],
        "device_traces": [[{"action": "alloc", "addr": 1, "size": 8 << 20, "frames": [frame]}] * 3]}


class _StandInCuda:
    """What ``CudaMemory.step_end`` asks of ``torch.cuda``, counted (no GPU here)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.stats = {"allocated_bytes.all.peak": 7 << 20, "reserved_bytes.all.peak": 9 << 20,
                      "allocated_bytes.all.current": 3 << 20}

    def current_device(self) -> int:
        return 1

    def memory_stats(self, device: int) -> dict:
        self.calls.append(f"memory_stats({device})")
        return dict(self.stats)

    def reset_peak_memory_stats(self, device: int) -> None:
        self.calls.append(f"reset({device})")


def test_cuda_memory_reads_each_step_with_one_stats_call(tmp_path, monkeypatch):
    """Per step: one allocator-statistics read (the keys torch's max_memory_* functions return) and
    one peak reset, in that order; the reading lands in the rank's steps."""
    memory = CudaMemory(lambda reason: str(tmp_path / f"snapshot.{reason}.pickle"), per_step=True,
                        history_entries=0)
    cuda = _StandInCuda()
    monkeypatch.setattr(CudaMemory, "_cuda", staticmethod(lambda: cuda))
    memory._armed = True  # no observer or history to attach to a stand-in
    memory.step_end(4)
    assert cuda.calls == ["memory_stats(1)", "reset(1)"]
    assert list(memory.steps) == [{"step": 4, "device": 1, "peak_allocated_bytes": 7 << 20,
                                   "peak_reserved_bytes": 9 << 20, "allocated_bytes": 3 << 20}]


def test_snapshot_files_of_a_profile_folder_are_summarized(tmp_path):
    with open(tmp_path / "memory-snapshot.rank-0.oom.pickle", "wb") as f:
        pickle.dump(_snapshot(), f)
    (entry,) = snapshots_in([str(tmp_path)])
    assert (entry["rank"], entry["reason"], entry["segments"]) == (0, "oom", 2)
    assert (entry["reserved_bytes"], entry["allocated_bytes"]) == (22 << 20, 12 << 20)
    assert entry["history_events"] == 3
    assert entry["largest_blocks"][0] == {"bytes": 8 << 20, "device": 0, "frame": "train.py:12 forward"}
    assert summarize_snapshot(read_snapshot(str(tmp_path / entry["file"]))) == \
        {k: v for k, v in entry.items() if k not in ("file", "bytes", "rank", "reason")}


class _Boom:
    def __reduce__(self):
        return (os.mkdir, (self.target,))


def test_a_snapshot_that_is_not_plain_values_is_refused_not_run(tmp_path):
    boom = _Boom()
    boom.target = str(tmp_path / "ran")
    with open(tmp_path / "memory-snapshot.rank-1.exit.pickle", "wb") as f:
        pickle.dump({"segments": [boom]}, f)
    (entry,) = snapshots_in([str(tmp_path)])
    assert "refused to load posix.mkdir" in entry["error"] or "refused to load os.mkdir" in entry["error"]
    assert not os.path.exists(boom.target)
