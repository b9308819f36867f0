"""CUDA memory of a live run on a real GPU (skipped without one): torch.cuda peaks per step in the
rank's metadata (each at least the tensor the step holds), the allocator's [memory] events of the
window (peak = the largest Total Allocated), the memory snapshot written at exit and readable by
``summary``, and an out-of-memory crash that leaves a snapshot behind with the job's exit code
unchanged."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from gpu_env import cuda_available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU here")]

REPO = Path(__file__).resolve().parents[2]
HELD = 64 << 20  # bytes each step holds at its peak

JOB = textwrap.dedent(f"""
    import sys, torch
    from otel_profiler import api
    with api.Profiler(profile_dir=sys.argv[1], activities="gpu,cpu_op,memory", steps="1:3",
                      summary_at_exit=False, auto_steps=False, signal=False):
        for i in range(5):
            held = torch.empty({HELD} // 4, device="cuda")
            (held.fill_(1.0) * 2).sum().item()
            del held
            api.step()
""")

OOM_JOB = textwrap.dedent("""
    import sys, torch
    from otel_profiler import api
    profiler = api.Profiler(profile_dir=sys.argv[1], summary_at_exit=False, auto_steps=False, signal=False)
    if sys.argv[2] == "on":
        profiler.__enter__()
    kept = torch.ones(1 << 20, device="cuda")  # live at the failure: its segment is in the snapshot
    kept.sum().item()
    api.step()
    free, total = torch.cuda.mem_get_info()
    torch.empty(2 * total, dtype=torch.uint8, device="cuda")  # more than the device has
""")


def _run(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    # The checkout first, then whatever the check put on the path (carried wheels, say).
    path = os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))
    environ.update(env, PYTHONPATH=path)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120, env=environ)


def test_cuda_memory_per_step_events_and_snapshot(tmp_path):
    from cuda_tracer.model.events import Kind
    from cuda_tracer.loading import load_profile
    from otel_profiler.analysis.summary import summarize

    out = _run(JOB, str(tmp_path), OTEL_PROFILER_MEMORY_SNAPSHOT="10000")
    assert out.returncode == 0, out.stderr
    profile = load_profile([str(tmp_path)])
    steps = profile.ranks[0].meta["cuda_memory"]["steps"]
    assert [s["step"] for s in steps] == [0, 1, 2, 3, 4]
    assert all(s["peak_allocated_bytes"] >= HELD and s["peak_reserved_bytes"] >= s["peak_allocated_bytes"]
               for s in steps)
    summary = summarize(profile)
    (device, d), = summary["memory"]["devices"].items()
    batch = profile.batch()
    rows = np.flatnonzero(batch.kind == Kind.MEMORY)
    totals = [batch.extras_of(int(r)).get("total_allocated") for r in rows.tolist()
              if batch.extras_of(int(r)).get("device_type") != 0]
    assert d["peak"]["allocated_bytes"] == max(totals) >= HELD
    (snap,) = summary["memory"]["snapshots"]
    assert snap["reason"] == "exit" and "error" not in snap and snap["segments"] > 0
    assert snap["history_events"] > 0


def test_out_of_memory_leaves_a_snapshot_and_the_exit_code(tmp_path):
    plain = _run(OOM_JOB, str(tmp_path / "off"), "off")
    profiled = _run(OOM_JOB, str(tmp_path / "on"), "on")
    assert plain.returncode == profiled.returncode == 1
    assert "OutOfMemoryError" in profiled.stderr
    from otel_profiler.analysis.memory.snapshots import snapshots_in

    (snap,) = snapshots_in([str(tmp_path / "on")])
    assert snap["reason"] == "oom" and "error" not in snap and snap["segments"] >= 1
    assert snap["allocated_bytes"] >= 4 << 20  # the tensor the job held
