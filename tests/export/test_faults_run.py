"""``otel-profiler run`` puts the job first: an unusable ``--output-dir`` (under a file, a read-only
mount) or a full disk never stops the job or changes its exit code, OTLP export to a healthy
receiver goes on when the disk is full, and no temporary file is left behind. The spool of a
``run --output-dir D`` lies under ``D``. Both cores are kept busy by other processes.

Full disk: a 64 KiB tmpfs mounted for the test (as root); where mounting is not allowed, the same
case runs under a file-size limit (RLIMIT_FSIZE) instead, which fails writes the same way (EFBIG
instead of ENOSPC).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fault_kit import (GONE_DEADLINE_S, JOB, FaultyReceiver, busy_cores, otlp_env, pb_requests,  # noqa: F401
                       step_span_ids)
from otlp_receiver import free_port

pytest.importorskip("torch")

JOB_EXIT = 3  # the job's own exit status, which `run` must return whatever happens to the profiler


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(OTEL_PROFILER_SIGNAL="false", OTEL_METRICS_EXPORTER="none", **extra)
    return env


def profiler_run(output_dir: Path, env: dict[str, str], steps: int = 40, preexec=None,
                 cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(output_dir), "--",
                           sys.executable, JOB, "--steps", str(steps), "--step-sleep", "0.02",
                           "--exit-code", str(JOB_EXIT)],
                          env=env, capture_output=True, text=True, timeout=600, preexec_fn=preexec, cwd=cwd)


def mount_tmpfs(path: Path, options: str) -> bool:
    path.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def unmount(path: Path) -> None:
    subprocess.run(["umount", str(path)], capture_output=True)


def profiler_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("otel-profiler")]


@pytest.mark.parametrize("where", ["under-a-file", "read-only-mount"])
def test_an_unusable_output_dir_still_runs_the_job(tmp_path, busy_cores, where):
    if where == "under-a-file":
        (tmp_path / "a-file").write_text("not a folder")
        output_dir = tmp_path / "a-file" / "prof"
    else:
        if not mount_tmpfs(tmp_path / "ro", "ro,size=64k"):
            pytest.skip("mounting a read-only tmpfs needs root")
        output_dir = tmp_path / "ro" / "prof"
    try:
        done = profiler_run(output_dir, base_env(), steps=20)
    finally:
        if where == "read-only-mount":
            unmount(tmp_path / "ro")
    assert done.returncode == JOB_EXIT, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = profiler_lines(done.stderr)  # one clear line says what was turned off
    assert "profiling is off" in line and str(output_dir) in line, line


def test_a_full_disk_keeps_the_exit_code_and_the_export(tmp_path, busy_cores):
    """The job runs until the test has seen steps exported after the disk filled up."""
    disk, stop, stats = tmp_path / "disk", tmp_path / "stop", tmp_path / "stats.json"
    mounted = mount_tmpfs(disk, "size=64k,mode=0700")
    limit = None
    if not mounted:
        import resource

        def limit():  # runs in the child before exec
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))
    lines: list[str] = []
    try:
        with FaultyReceiver("ok") as receiver:
            env = base_env(OTEL_PROFILER_FLUSH_INTERVAL_S="0.2",
                           **otlp_env(receiver.endpoint("grpc"), "grpc", tmp_path / "spool"))
            proc = subprocess.Popen(
                [sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(disk / "prof"), "--",
                 sys.executable, JOB, "--steps", "0", "--until", str(stop), "--step-sleep", "0.02",
                 "--stats", str(stats), "--exit-code", str(JOB_EXIT)],
                env=env, stderr=subprocess.PIPE, text=True, preexec_fn=limit)
            reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
            reader.start()
            try:
                full_at = poll(lambda: any("cannot write the profile folder" in x for x in lines) and
                               len(step_span_ids(receiver.requests)))
                poll(lambda: len(step_span_ids(receiver.requests)) > full_at + 20)  # export goes on
                stop.touch()
                code = proc.wait(timeout=GONE_DEADLINE_S)
            finally:
                proc.kill()
            reader.join(60)
            delivered = receiver.requests
        left = sorted(str(p.relative_to(disk)) for p in disk.rglob("*.tmp"))
    finally:
        if mounted:
            unmount(disk)
    stderr = "".join(lines)
    assert code == JOB_EXIT, stderr[-3000:]
    assert "Traceback" not in stderr, stderr
    assert not left, left  # no half-written temporary file
    warnings = [x for x in lines if x.startswith("otel-profiler: warning")]
    assert "cannot write the profile folder" in warnings[0], stderr  # said once, in the job
    assert len(warnings) <= 3, "".join(warnings)  # + summary.json not written and the last line, by `run`
    assert not any("profile written to" in x for x in lines), stderr  # never said as if complete
    if mounted:  # (under a file-size limit instead, the disk itself is not full)
        assert "is incomplete (its disk is full" in lines[-1], stderr
    # Every step went out over OTLP though the disk was full (what the receiver had not taken
    # when the job ended is in the spool, on another disk).
    steps = step_span_ids(delivered) | step_span_ids(pb_requests(tmp_path / "spool"))
    assert len(steps) == json.loads(stats.read_text())["steps"]  # one per iteration


def poll(condition, deadline_s: float = GONE_DEADLINE_S):
    """Wait for ``condition()`` to be truthy (checked every 0.2 s); returns its value."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"condition not met within {deadline_s} s")


def test_the_spool_of_run_goes_under_its_output_dir(tmp_path, busy_cores):
    env = base_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{free_port()}",
                   OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
    done = profiler_run(tmp_path / "prof", env, steps=20, cwd=tmp_path)
    assert done.returncode == JOB_EXIT, done.stderr[-3000:]
    assert list((tmp_path / "prof" / "otlp-spool").glob("*.pb")), done.stderr
    assert not (tmp_path / "otel-profile").exists()
