"""Trainers a job starts itself are processes of the run; helpers are not, and nothing light pays.

- Hogwild (pytorch/examples' mnist_hogwild style), with the fork and the spawn start method: each
  trainer process is a rank of the run (the next free rank from 1), its steps counted, while their
  DataLoader workers stay silent; the parent's stderr does not claim that no step was seen.
- ``torch.multiprocessing.spawn`` without a process group: the same.
- CPU contention that knows the job: the CPU of the job's own processes is sampled apart from the
  machine's (``job_cores``) and never counted as other processes'.
- A Python process that never imports torch pays a few milliseconds for the start-up hook: no
  numpy, no session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_tracer.loading import load_profile
from cuda_tracer.model.events import Kind

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "tests" / "scripts"
TIMEOUT = 600
STEPS = 40


def zero_code_env(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "_OTEL_", "PYTHONPATH"))}
    env.update(OTEL_PROFILER_ENABLED="true", OTEL_PROFILER_PROFILE_DIR=str(folder), OTEL_TRACES_EXPORTER="none",
               OTEL_METRICS_EXPORTER="none", OTEL_PROFILER_SIGNAL="false",
               PYTHONPATH=os.pathsep.join([str(REPO / "otel_profiler" / "bootstrap" / "site"), str(REPO)]))
    return env


def run_job(args: list[str], folder: Path, cwd: Path) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, *args], env=zero_code_env(folder), cwd=cwd, capture_output=True,
                         text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def steps_by_rank(folder: Path) -> dict[int, tuple[int, dict]]:
    profile = load_profile([str(folder)])
    return {r.rank: (len(r.batch.of_kind(Kind.STEP)), r.meta) for r in profile.ranks}


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_hogwild_trainers_are_ranks_of_the_run(tmp_path, start_method):
    folder = tmp_path / "profile"
    out = run_job([str(SCRIPTS / "hogwild.py"), start_method, "2", str(STEPS)], folder, tmp_path)
    assert "exit codes [0, 0]" in out.stdout
    assert "no training step seen" not in out.stderr, out.stderr[-2000:]
    ranks = steps_by_rank(folder)
    trainers = {rank: meta for rank, (steps, meta) in ranks.items() if steps}
    assert sorted(trainers) == [1, 2], {r: s for r, (s, _) in ranks.items()}
    parents = {meta["parent_pid"] for meta in trainers.values()}
    assert len(parents) == 1 and all(meta["pid"] not in parents for meta in trainers.values())
    for rank in trainers:
        assert ranks[rank][0] >= STEPS - 1 and ranks[rank][1]["step_source"] == "optimizer"
    assert len(ranks) <= 3  # the parent at most besides: no DataLoader worker wrote a rank
    summary = subprocess.run([sys.executable, "-m", "otel_profiler", "summary", str(folder), "--format", "json"],
                             capture_output=True, text=True, timeout=TIMEOUT)
    assert summary.returncode == 0, summary.stderr[-2000:]
    document = json.loads(summary.stdout)
    assert document["steps"]["count"] >= 2 * (STEPS - 1)
    for rank in ("1", "2"):
        cpu = document["cpu"].get(rank)
        if cpu is not None:  # a short trainer may have fewer than two CPU samples
            assert "job_cores" in cpu


def test_spawned_trainers_without_a_process_group_are_ranks_of_the_run(tmp_path):
    folder = tmp_path / "profile"
    out = run_job([str(SCRIPTS / "spawn_trainers.py"), "2", "30"], folder, tmp_path)
    assert out.stdout.count("done") == 2
    ranks = steps_by_rank(folder)
    assert sorted(r for r, (steps, _) in ranks.items() if steps >= 29) == [1, 2], ranks.keys()


def test_the_cpu_of_the_jobs_own_processes_is_not_the_others(tmp_path):
    """A job whose child process burns a core: that core is the job's (``job_cores``), not others'."""
    code = ("import subprocess, sys, time, torch\n"
            "burner = subprocess.Popen([sys.executable, '-c', 'import time\\nend = time.time() + 30\\n"
            "while time.time() < end: pass'])\n"
            "model = torch.nn.Linear(8, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "end = time.time() + 5\n"
            "while time.time() < end:\n"
            "    opt.zero_grad(); model(torch.randn(4, 8)).sum().backward(); opt.step(); time.sleep(0.02)\n"
            "burner.kill(); burner.wait()\n")
    folder = tmp_path / "profile"
    env = zero_code_env(folder)
    env["OTEL_PROFILER_CPU_SAMPLE_S"] = "0.5"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-2000:]
    from otel_profiler.analysis.host.cpu import cpu_usage

    usage = cpu_usage(load_profile([str(folder)]))["0"]
    # the burner kept a core busy throughout, less what the machine's load takes from it
    assert usage["job_cores"] >= 0.2, usage
    samples = load_profile([str(folder)]).ranks[0].meta["cpu_samples"]
    assert len(samples["job_cores"]) == len(samples["t"])


def test_a_process_that_never_imports_torch_starts_no_session(tmp_path):
    code = "import sys; print(sorted(m for m in ('numpy', 'otel_profiler.live.session', 'logging') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], env=zero_code_env(tmp_path / "p"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert json.loads(out.stdout.replace("'", '"')) == []
    assert not (tmp_path / "p").exists()


PARENT_PROGRAM = """
import os, subprocess, sys, torch
scripts, spawned, plain = sys.argv[1:4]
model = torch.nn.Linear(8, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad(); model(torch.randn(4, 8)).sum().backward(); opt.step()
def job(folder, *args):
    env = dict(os.environ, OTEL_PROFILER_PROFILE_DIR=folder, OTEL_PROFILER_CPU_SAMPLE_S="0.5")
    subprocess.run([sys.executable, *args], env=env, check=True)
job(spawned, os.path.join(scripts, "spawn_trainers.py"), "2", "20")
burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
job(plain, "-c", TRAIN)
burner.kill(); burner.wait()
"""
PLAIN_TRAINING = ("import time, torch\n"
                  "model = torch.nn.Linear(8, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                  "end = time.time() + 5\n"
                  "while time.time() < end:\n"
                  "    opt.zero_grad(); model(torch.randn(4, 8)).sum().backward(); opt.step(); time.sleep(0.02)\n")


def test_a_program_a_profiled_program_starts_is_a_job_of_its_own(tmp_path):
    """A profiled program (a driver, a notebook, a test runner) starts two profiled programs: one that
    spawns trainers, one that trains beside a busy process of the driver's. Each is its own job: the
    trainers are ranks of their program's run, not the driver's, and the driver's busy process is
    not counted as the second program's own CPU (``job_cores``)."""
    driver, spawned, plain = tmp_path / "driver", tmp_path / "spawned", tmp_path / "plain"
    code = PARENT_PROGRAM.replace("TRAIN", repr(PLAIN_TRAINING))
    out = subprocess.run([sys.executable, "-c", code, str(SCRIPTS), str(spawned), str(plain)],
                         env=zero_code_env(driver), cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]
    trainers = steps_by_rank(spawned)
    assert sorted(r for r, (steps, _) in trainers.items() if steps >= 19) == [1, 2], trainers.keys()
    assert {r for r, (steps, _) in steps_by_rank(driver).items()} == {0}  # the driver's own rank only
    from otel_profiler.analysis.host.cpu import cpu_usage

    usage = cpu_usage(load_profile([str(plain)]))["0"]
    assert usage["job_cores"] < 0.1, usage  # the burner took about a core meanwhile: not the job's
