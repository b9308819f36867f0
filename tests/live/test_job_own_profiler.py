"""A job that profiles itself with torch.profiler runs as it would without us: the profiler yields
(its window ends where the job's profiler starts, detailed capture backs off for the run with one
warning) and never starts, stops or disturbs the job's profiler, in any form: a schedule driven by
``start()``/``step()`` (which crashed with "Profiler is already enabled on this thread") and the
context manager in the middle of training."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_tracer.loading import load_profile
from cuda_tracer.model.events import Kind

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "scripts" / "own_profiler.py"
KINETO_LINE = re.compile(r"^(USDT|INFO|WARNING|ERROR|VERBOSE):\d{4}-")
TIMEOUT = 300


def job_lines(stderr: str) -> list[str]:
    """The job's stderr but the profiler's lines and Kineto's log lines: Kineto probes the devices
    once per process, so under the profiler its line came (and was held back) at our first window,
    not at the job's own profiler."""
    return [line for line in stderr.splitlines() if not line.startswith("otel-profiler")
            and not KINETO_LINE.match(line)]


@pytest.mark.parametrize("form", ["schedule", "context"])
def test_a_job_that_profiles_itself_is_left_alone(tmp_path, form):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "_OTEL_", "PYTHONPATH"))}
    plain = subprocess.run([sys.executable, str(SCRIPT), form], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=TIMEOUT)
    env.update(OTEL_PROFILER_ENABLED="true", OTEL_PROFILER_ACTIVITIES="gpu,cpu_op", OTEL_TRACES_EXPORTER="none",
               OTEL_METRICS_EXPORTER="none", OTEL_PROFILER_PROFILE_DIR=str(tmp_path / "profile"),
               OTEL_PROFILER_SIGNAL="false",
               PYTHONPATH=os.pathsep.join([str(REPO / "otel_profiler" / "bootstrap" / "site"), str(REPO)]))
    profiled = subprocess.run([sys.executable, str(SCRIPT), form], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=TIMEOUT)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert profiled.returncode == 0, profiled.stderr[-3000:]
    assert profiled.stdout == plain.stdout
    assert "own traces: " in plain.stdout and "with events: True" in plain.stdout
    assert job_lines(profiled.stderr) == job_lines(plain.stderr), profiled.stderr[-3000:]
    ours = [line for line in profiled.stderr.splitlines() if line.startswith("otel-profiler: warning")]
    assert ours == ["otel-profiler: warning: detailed GPU/op capture is off for this run: the job started a "
                    "torch.profiler session of its own; annotations and steps are still recorded"]
    rank = load_profile([str(tmp_path / "profile")]).ranks[0]
    assert len(rank.batch.of_kind(Kind.STEP)) >= 25  # steps go on being recorded
