"""``torch.compile`` jobs under the zero-code profiler are the same jobs: exit code, stdout, stderr
(apart from the profiler's own lines), Dynamo's counters and compiled graphs, and their steps found.

Each way of compiling in ``tests/scripts/compiled_training.py`` runs twice side by side, unprofiled and
with ``OTEL_PROFILER_ENABLED=true`` (the start-up hook the package installs) and operators recorded, so
that a window is open while Dynamo traces and Inductor compiles.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_tracer.loading import load_profile
from cuda_tracer.model.events import Kind

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compiled_training.py"
ITERATIONS = 12
TIMEOUT = 900  # Inductor's first compile of a mode on a busy 2-core machine took about 2 minutes
GLOG_PREFIX = re.compile(r"^[IWEV]\d{4} [\d:.]+ +\d+ ")  # torch's log lines: time and thread differ
MODES = ["fullgraph", "default", "graph_break", "method", "optimizer", "train_step", "reduce_overhead",
         "max_autotune_no_cudagraphs", "compiled_autograd"]
UNSEEN_FIRST_FORWARD = {"method", "optimizer"}


def env_for(profiled: bool, folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH", "TORCH_LOGS"))}
    if profiled:
        env.update(OTEL_PROFILER_ENABLED="true", OTEL_PROFILER_PROFILE_DIR=str(folder),
                   OTEL_PROFILER_ACTIVITIES="gpu,cpu_op", OTEL_TRACES_EXPORTER="none",
                   OTEL_METRICS_EXPORTER="none", OTEL_PROFILER_SIGNAL="false")
    return env


def job_lines(stderr: str) -> list[str]:
    """The job's own stderr lines, torch's log prefixes (time, thread) taken off."""
    return [GLOG_PREFIX.sub("", line) for line in stderr.splitlines() if not line.startswith("otel-profiler")]


def compared(counters: dict, mode: str) -> dict:
    """The counters that say what Dynamo compiled. With compiled autograd on, Dynamo also evaluates
    frames that vary from one unprofiled run to the next (generators of the autograd engine), so
    ``frames`` and ``unimplemented`` are left out there."""
    skip = {"frames", "unimplemented"} if mode == "compiled_autograd" else set()
    return {k: v for k, v in counters.items() if k not in skip}


@pytest.mark.parametrize("mode", MODES)
def test_a_compiled_job_is_the_same_job_under_the_profiler(tmp_path, mode):
    folder = tmp_path / "profile"
    cmd = [sys.executable, str(SCRIPT), mode, str(ITERATIONS)]
    jobs = {profiled: subprocess.Popen(cmd, cwd=tmp_path, env=env_for(profiled, folder), text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for profiled in (False, True)}
    outs = {profiled: job.communicate(timeout=TIMEOUT) for profiled, job in jobs.items()}
    plain, profiled = outs[False], outs[True]
    assert jobs[False].returncode == 0, plain[1][-3000:]
    assert jobs[True].returncode == jobs[False].returncode, profiled[1][-3000:]
    assert job_lines(profiled[1]) == job_lines(plain[1]), profiled[1][-3000:]
    before, after = (json.loads(out[0].strip().splitlines()[-1]) for out in (plain, profiled))
    assert after["loss"] == before["loss"]
    assert compared(after["counters"], mode) == compared(before["counters"], mode)
    assert before["counters"]["stats"]["unique_graphs"] >= 1  # something was compiled
    assert profiled[0].splitlines()[:-1] == plain[0].splitlines()[:-1]

    rank = load_profile([str(folder)]).ranks[0]
    steps = sorted(rank.batch.of_kind(Kind.STEP).extra("step").values())
    assert rank.meta["step_source"] == "optimizer"
    # Numbered as the loop counts, from 0. Step 0 begins at the compiled module's first call with
    # gradients on (a hook of the OptimizedModule's own) or at the compiled training step's call;
    # where neither is seen (a model compiled in place, an eager model beside a compiled optimizer
    # step) it is counted but not measured.
    first = 1 if mode in UNSEEN_FIRST_FORWARD else 0
    assert steps == list(range(first, ITERATIONS)), steps
    assert len(rank.batch.of_kind(Kind.CPU_OP)) > 0  # a window recorded the compiled steps' operators
