"""Real torch training on CPU, profiled without code changes, in subprocesses with timeouts.

Covers the three enabling ways (``otel-profiler run``, ``OTEL_PROFILER_ENABLED`` + sitecustomize,
``opentelemetry-instrument``), the smprof shim, torchrun with two gloo ranks, DataLoader workers,
SIGTERM / Ctrl-C mid-run and invalid settings.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuda_tracer.model.events import Kind
from otel_profiler import config
from cuda_tracer.loading import load_profile
from otel_profiler.bootstrap import SITE_DIR

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = [str(REPO / "examples" / "train_mlp.py"), "--epochs", "1", "--samples", "512", "--batch-size", "32"]
EXAMPLE_STEPS = 512 // 32  # optimizer steps, one per iteration: one step each
TIMEOUT = 120


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none",
               OTEL_LOGS_EXPORTER="none", OTEL_PROFILER_SIGNAL="false")
    env.update(extra)
    return env


def run(cmd: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, f"exit {out.returncode}\n{out.stderr[-3000:]}"
    return out


def check_training_profile(folder: Path, cpu_ops: bool) -> dict:
    profile = load_profile([str(folder)])
    assert [r.rank for r in profile.ranks] == [0]
    batch = profile.ranks[0].batch
    steps = batch.of_kind(Kind.STEP)
    assert len(steps) == EXAMPLE_STEPS  # N iterations, N steps, numbered from 0
    assert sorted(steps.extra("step").values()) == list(range(EXAMPLE_STEPS))
    names = set(batch.of_kind(Kind.USER_ANNOTATION).names())
    assert {"forward", "backward"} <= names
    assert (len(batch.of_kind(Kind.CPU_OP)) > 0) == cpu_ops
    assert appears(folder / "summary.json")  # made after the job, by a process of its own
    return profile.ranks[0].meta


def appears(path: Path, deadline_s: float = 120) -> bool:
    """Poll until ``path`` exists (a summary written after the job by its summarizer process)."""
    end = time.monotonic() + deadline_s
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.1)
    return path.exists()


def enable_by_run(tmp: Path):
    cmd = [sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(tmp / "prof"), "--cpu-ops",
           "--", sys.executable, *EXAMPLE]
    return cmd, clean_env()


def enable_by_env(tmp: Path):
    return [sys.executable, *EXAMPLE], clean_env(
        OTEL_PROFILER_ENABLED="true", PYTHONPATH=SITE_DIR,
        OTEL_PROFILER_PROFILE_DIR=str(tmp / "prof"), OTEL_PROFILER_ACTIVITIES="gpu,cpu_op")


def enable_by_opentelemetry_instrument(tmp: Path):
    pytest.importorskip("opentelemetry.instrumentation")
    launcher = [sys.executable, "-c", "import sys; from opentelemetry.instrumentation.auto_instrumentation "
                "import run; sys.argv[0] = 'opentelemetry-instrument'; run()"]  # = opentelemetry-instrument
    return [*launcher, sys.executable, *EXAMPLE], clean_env(OTEL_PROFILER_PROFILE_DIR=str(tmp / "prof"),
                                 OTEL_PROFILER_ACTIVITIES="cpu_op")


@pytest.mark.parametrize("enable", [enable_by_run, enable_by_env, enable_by_opentelemetry_instrument])
def test_zero_code_training_gives_steps_annotations_and_ops(tmp_path, enable):
    cmd, env = enable(tmp_path)
    env.update(OTEL_SERVICE_NAME="mlp-test", OTEL_RESOURCE_ATTRIBUTES="team=ml,run=7")
    out = run(cmd, env, tmp_path)
    folder = tmp_path / "prof"
    meta = check_training_profile(folder, cpu_ops=True)
    assert meta["resource"]["service.name"] == "mlp-test" and meta["resource"]["team"] == "ml"
    assert meta["windows"][0]["reason"] == "range" and meta["windows"][0]["captured"]
    assert "epoch 0: loss" in out.stdout
    if enable is enable_by_run:
        assert "== Steps" in out.stderr  # the summary table printed at exit
        assert (folder.stat().st_mode & 0o777) == 0o700
        again = run([sys.executable, "-m", "otel_profiler", "summary", str(folder), "--format", "json"],
                    clean_env(), tmp_path)
        assert json.loads(again.stdout)["steps"]["count"] == EXAMPLE_STEPS


def test_otel_sdk_disabled_turns_profiling_off(tmp_path):
    _, env = enable_by_env(tmp_path)
    code = "from otel_profiler import annotate\nwith annotate('x'):\n    pass\nprint('ran')"
    assert run([sys.executable, "-c", code], env, tmp_path).stdout.strip() == "ran"
    assert (tmp_path / "prof").is_dir()  # enabled: the annotation is written
    shutil.rmtree(tmp_path / "prof")
    env["OTEL_SDK_DISABLED"] = "true"
    assert run([sys.executable, "-c", code], env, tmp_path).stdout.strip() == "ran"
    assert not (tmp_path / "prof").exists()


SMPROF_SCRIPT = """
import torch
import otel_profiler.compat.smprof as smprof   # was: import smprof

SMProf = smprof.SMProfiler.instance()
config = smprof.Config()
config.profiler = {"EnableCuda": "1"}
SMProf.configure(config)
SMProf.start_profiling()

model = torch.nn.Linear(32, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(5):
    with smprof.annotate("step_" + str(i)):
        with smprof.annotate("Forward"):
            loss = model(torch.randn(16, 32)).pow(2).mean()
        handle = smprof.annotation_begin("Backward")
        loss.backward()
        smprof.annotation_end(handle)
        with smprof.annotate("Optimizer"):
            optimizer.step()
            optimizer.zero_grad()
SMProf.stop_profiling()
print("done")
"""


def test_smprof_script_runs_unchanged_but_for_the_import(tmp_path):
    script = tmp_path / "smprof_train.py"
    script.write_text(SMPROF_SCRIPT)
    run([sys.executable, str(script)], clean_env(OTEL_PROFILER_PROFILE_DIR=str(tmp_path / "prof")), tmp_path)
    batch = load_profile([str(tmp_path / "prof")]).ranks[0].batch
    assert sorted(batch.of_kind(Kind.STEP).extra("step").values()) == [0, 1, 2, 3, 4]
    assert set(batch.of_kind(Kind.USER_ANNOTATION).names()) == {"Forward", "Backward", "Optimizer"}
    assert len(batch.of_kind(Kind.PROFILER)) == 1  # one window from start_profiling to stop_profiling


DDP_SCRIPT = """
import torch, torch.distributed as dist
from otel_profiler import annotate
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(6):
    with annotate("forward"):
        loss = model(torch.randn(8, 16)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()
"""


def test_torchrun_two_ranks_write_one_folder(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    folder = tmp_path / "prof"
    run([sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(folder), "--",
         sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)],
        clean_env(), tmp_path)
    profile = load_profile([str(folder)])
    assert sorted(r.rank for r in profile.ranks) == [0, 1]
    for r in profile.ranks:
        assert (r.meta["world_size"], r.meta["local_rank"]) == (2, r.rank)
        assert r.meta["resource"]["ml.torchrun.run_id"]
        assert len(r.batch.of_kind(Kind.STEP)) == 6
        assert set(r.batch.rank.tolist()) == {r.rank}
    assert len({r.meta["run_id"] for r in profile.ranks}) == 1
    summary = json.loads((folder / "summary.json").read_text())
    assert set(summary["ranks"]) == {"0", "1"}


MP_SPAWN_SCRIPT = """
import socket
import torch, torch.distributed as dist, torch.multiprocessing as mp


def work(rank, port):  # no RANK variable: the rank is known only to torch.distributed
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(5):
        model(torch.randn(8, 16)).pow(2).mean().backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(work, args=(port,), nprocs=2)
"""


def test_multiprocessing_spawn_ranks_take_their_rank_from_torch_distributed(tmp_path):
    script = tmp_path / "spawn_ddp.py"
    script.write_text(MP_SPAWN_SCRIPT)
    folder = tmp_path / "prof"
    run([sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(folder), "--",
         sys.executable, str(script)], clean_env(), tmp_path)
    profile = load_profile([str(folder)])
    assert sorted(r.rank for r in profile.ranks) == [0, 1]
    for r in profile.ranks:
        assert r.meta["world_size"] == 2 and len(r.batch.of_kind(Kind.STEP)) == 5


def test_dataloader_workers_finish_and_write_nothing_twice(tmp_path):
    cmd, env = enable_by_run(tmp_path)
    cmd += ["--workers", "2"]
    run(cmd, env, tmp_path)
    folder = tmp_path / "prof"
    check_training_profile(folder, cpu_ops=True)
    assert sorted(p.name.split(".")[0] for p in folder.glob("*.events")) == ["rank-0"] * len(
        list(folder.glob("*.events")))


LOOP_SCRIPT = """
import torch
from otel_profiler import annotate
model = torch.nn.Linear(32, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
i = 0
while True:
    with annotate("forward"):
        loss = model(torch.randn(16, 32)).pow(2).mean()
    loss.backward()
    optimizer.step()
    i += 1
    if i == 30:
        print("ready", flush=True)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_run_leaves_a_readable_profile(tmp_path, sig):
    script = tmp_path / "loop.py"
    script.write_text(LOOP_SCRIPT)
    cmd, env = [sys.executable, str(script)], clean_env(
        OTEL_PROFILER_ENABLED="true", PYTHONPATH=SITE_DIR,
        OTEL_PROFILER_PROFILE_DIR=str(tmp_path / "prof"))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    assert proc.returncode == -sig, err[-2000:]  # died of the signal, as without the profiler
    batch = load_profile([str(tmp_path / "prof")]).ranks[0].batch
    assert len(batch.of_kind(Kind.STEP)) >= 29
    assert "forward" in batch.of_kind(Kind.USER_ANNOTATION).names()
    assert appears(tmp_path / "prof" / "summary.json")


def test_invalid_settings_warn_once_and_the_job_finishes(tmp_path):
    cmd, env = enable_by_env(tmp_path)
    env.update(OTEL_PROFILER_STEPS="banana", OTEL_PROFILER_FLUSH_EVENTS="many")
    out = run(cmd, env, tmp_path)
    lines = [line for line in out.stderr.splitlines() if "otel-profiler" in line]
    assert len(lines) == 1, out.stderr
    assert "OTEL_PROFILER_STEPS='banana'" in lines[0] and "OTEL_PROFILER_FLUSH_EVENTS='many'" in lines[0]
    assert "epoch 0: loss" in out.stdout
    assert not (tmp_path / "prof").exists()
    # `run` with an invalid value of its own flag: a usage error before the job starts.
    cmd = [sys.executable, "-m", "otel_profiler", "run", "--steps", "5:2", "--output-dir", str(tmp_path / "p2"),
           "--", sys.executable, "-c", "print('ran')"]
    out = subprocess.run(cmd, env=clean_env(), cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 2 and out.stdout == "" and out.stderr.startswith("usage: otel-profiler run")
    assert "--steps: '5:2'" in out.stderr and "OTEL_PROFILER_STEPS" not in out.stderr  # the flag, as typed
    assert not (tmp_path / "p2").exists()


def test_run_flags_set_their_settings_and_bad_ones_are_named_as_typed():
    """Each of run's flags reaches the job as its variable; a bad value is reported with the flag."""
    from otel_profiler.cli import build_parser
    from otel_profiler.commands.run import _as_flag, child_environment

    args = build_parser().parse_args(["run", "--steps", "3:5", "--every", "7", "--duration", "2.5",
                                      "--trigger-port", "9999", "--", "true"])
    env, _ = child_environment(args, {})
    assert (env["OTEL_PROFILER_STEPS"], env["OTEL_PROFILER_EVERY_STEPS"], env["OTEL_PROFILER_DURATION_S"],
            env["OTEL_PROFILER_TRIGGER_PORT"]) == ("3:5", "7", "2.5", "9999")
    problems = config.load({"OTEL_PROFILER_EVERY_STEPS": "x", "OTEL_PROFILER_FLUSH_EVENTS": "x"}).warnings
    worded = [_as_flag(args, p) for p in problems]
    assert any(w.startswith("--every 'x'") for w in worded)
    assert any(w.startswith("OTEL_PROFILER_FLUSH_EVENTS=") for w in worded)  # no flag: the variable
    unset = build_parser().parse_args(["run", "--", "true"])
    assert not {"OTEL_PROFILER_STEPS", "OTEL_PROFILER_EVERY_STEPS"} & set(child_environment(unset, {})[0])
