"""Capture windows never harm the job: back-to-back and split windows, and a flood of capture
requests, on real training jobs with default settings otherwise.

- No torch ``record_function`` scope opened under one window ends under the next
  (``tests/scripts/window_scopes.py`` counts them): torch would write the scope's end into the
  stopped profiler's freed events. Plain steps, an LBFGS closure (forward and backward inside
  ``Optimizer.step``'s scope), one-step window parts, windows every other step, and the
  time-fallback window giving way to the step window.
- ``examples/train_mlp.py`` with a window part handed over at every step, under CPython's debug
  allocator and glibc's heap checks (``PYTHONMALLOC=debug``, ``MALLOC_CHECK_=3``): exit 0, its own
  output unchanged, and every optimizer step captured (the hand-over waits for the next module
  call, so parts leave no gap). The same job under a flood of ``SIGUSR2`` capture requests.

``benchmarks/window_stress.py`` runs the long version (thousands of windows, many runs).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fault_kit import job_env

REPO = Path(__file__).resolve().parents[2]
SCOPES_JOB = str(REPO / "tests" / "scripts" / "window_scopes.py")
MLP_JOB = str(REPO / "examples" / "train_mlp.py")
CPU_OPS = {"OTEL_PROFILER_ACTIVITIES": "gpu,cpu_op"}  # no GPU here: operators make the windows
SPLIT_EVERY_STEP = {**CPU_OPS, "OTEL_PROFILER_WINDOW_PART_STEPS": "1", "OTEL_PROFILER_DURATION_S": "1e9"}
HEAP_CHECKS = {"PYTHONMALLOC": "debug", "MALLOC_CHECK_": "3", "PYTHONFAULTHANDLER": "1"}
STEPS_PER_EPOCH = 16  # train_mlp.py: 2048 samples in batches of 128


def _run(args: list[str], env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("closure", [False, True], ids=["steps", "lbfgs-closure"])
@pytest.mark.parametrize("settings", [
    pytest.param(SPLIT_EVERY_STEP, id="part-every-step"),
    pytest.param({**CPU_OPS, "OTEL_PROFILER_EVERY_STEPS": "2", "OTEL_PROFILER_WINDOW_STEPS": "1"},
                 id="window-every-other-step"),
    pytest.param(CPU_OPS, id="time-window-then-step-window"),
])
def test_no_torch_scope_ends_under_another_window(tmp_path, settings, closure):
    env = job_env(tmp_path / "profile", **settings)
    out = _run([SCOPES_JOB, "--epochs", "3"] + (["--closure"] if closure else []), env)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [row for row in out.stdout.splitlines() if row.startswith("crossings ")][-1]
    words = line.split()
    crossings, windows, steps = int(words[1]), int(words[3]), int(words[5])
    assert steps == 24
    assert windows >= 2, line  # the profiler did start and stop windows
    if settings is SPLIT_EVERY_STEP:
        assert windows >= (8 if closure else 20), line
    assert crossings == 0, line


def _captured_optimizer_steps(folder: Path) -> int:
    out = _run(["-m", "otel_profiler", "summary", "--format", "json", str(folder)],
               {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")})
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout)["operators"]["by_name"]  # torch's own range, not an annotation
    return sum(row["calls"] for row in rows if row["name"].startswith("Optimizer.step#") and row["range"] == "optimizer")


@functools.cache  # the job's output depends on its epochs alone (seeded): one plain run per length
def _unprofiled_output(epochs: int) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_SDK_DISABLED"] = "true"
    plain = _run([MLP_JOB, "--epochs", str(epochs)], env)
    assert plain.returncode == 0
    return plain.stdout


@pytest.mark.parametrize("run", range(2))
def test_a_window_part_at_every_step_under_heap_checks(tmp_path, run):
    epochs = 8
    env = job_env(tmp_path / "profile", **SPLIT_EVERY_STEP, **HEAP_CHECKS)
    out = _run([MLP_JOB, "--epochs", str(epochs)], env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Fatal Python error" not in out.stderr and "free()" not in out.stderr
    assert out.stdout == _unprofiled_output(epochs)
    steps = epochs * STEPS_PER_EPOCH
    assert _captured_optimizer_steps(tmp_path / "profile") >= steps - 1  # the last may end at exit


def _handles(pid: int, sig: int) -> bool:
    """Has process ``pid`` a handler of its own for ``sig`` (its ``SigCgt`` mask)?"""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(caught >> (sig - 1) & 1)


def test_a_flood_of_capture_requests(tmp_path):
    epochs = 8  # as the heap checks': their plain run's output is reused
    env = job_env(tmp_path / "profile", **CPU_OPS, **HEAP_CHECKS, OTEL_PROFILER_SIGNAL="true",
                  OTEL_PROFILER_WINDOW_STEPS="1")
    proc = subprocess.Popen([sys.executable, MLP_JOB, "--epochs", str(epochs)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sent = 0
    try:
        deadline = time.monotonic() + 120
        while not _handles(proc.pid, signal.SIGUSR2) and proc.poll() is None:  # before: it would kill
            assert time.monotonic() < deadline, "the session never installed its SIGUSR2 handler"
            time.sleep(0.05)
        while proc.poll() is None and sent < 2000:
            try:
                os.kill(proc.pid, signal.SIGUSR2)
            except ProcessLookupError:
                break
            sent += 1
            time.sleep(0.01)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    assert sent > 10
    assert out == _unprofiled_output(epochs)
    assert _captured_optimizer_steps(tmp_path / "profile") > 0
