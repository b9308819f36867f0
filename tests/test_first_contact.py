"""First contact with real training scripts (issue 27): the profiler leaves the job's warnings and
stderr as they were, counts the steps of optimizers that take turns once each, records module
information live, and names what it could not do in one line.

Every job here is a real script in ``tests/scripts`` run under ``otel-profiler run``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_tracer.events import Kind
from cuda_tracer.loading import load_profile

torch = pytest.importorskip("torch")

SCRIPTS = Path(__file__).resolve().parent / "scripts"
TIMEOUT = 240


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", OTEL_PROFILER_SIGNAL="false")
    env.update(extra)
    return env


def profiled(tmp: Path, script: str, *args: str, env: dict[str, str] | None = None,
             options: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(tmp / "prof"), *options, "--",
           sys.executable, str(SCRIPTS / script), *args]
    out = subprocess.run(cmd, env=env or clean_env(), cwd=tmp, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def steps_and_meta(folder: Path) -> tuple[list[int], dict]:
    rank = load_profile([str(folder)]).ranks[0]
    return sorted(rank.batch.of_kind(Kind.STEP).extra("step").values()), rank.meta


# ------------------------------------------------------------------------- 1. warnings shown once
def test_a_warning_the_job_printed_is_not_printed_again(tmp_path):
    """The job warns at one place every iteration; Python shows it once. The profiler's first flush
    (which reads the machine's resources) comes between, and the job goes on warning after it."""
    meta = tmp_path / "prof" / "rank-0.json"
    out = profiled(tmp_path, "warning_loop.py", str(meta), "20",
                   env=clean_env(OTEL_PROFILER_FLUSH_INTERVAL_S="0.2"))
    assert "warning-loop: done" in out.stdout and meta.is_file()
    assert out.stderr.count("UserWarning: the learning rate is only a guess") == 1, out.stderr[-3000:]
    assert json.loads(meta.read_text())["compute"]["os"].startswith(os.uname().sysname)
