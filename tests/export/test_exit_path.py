"""The job's exit is never held up by the profiler: real zero-code training jobs in subprocesses.

- a frozen (SIGSTOPped) exporter: the job ends without waiting for it (it is found frozen and
  killed, not waited out), one line names the ``export`` command, and that command as printed
  delivers every span the receiver had not confirmed;
- the summary at exit is made by a detached process of its own, not by the job: it waits while a
  rank of the folder is alive and writes ``summary.json`` once they are all gone;
- ``otel-profiler run``: a SIGINT sent with ``kill`` reaches the job (its exit status says so); a
  SIGKILLed ``run`` leaves no process behind; a bad value of its own flag is a usage error before
  the job starts; when spans were spooled its last line is the ``replay`` command.

No wall-clock budget is asserted: waits poll a condition with a generous deadline.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from fault_kit import (GONE_DEADLINE_S, JOB, RUN_ID, FaultyReceiver, descendants, expected_span_ids, job_env,
                       otlp_env, pb_requests, span_ids, wait_gone)
from otlp_receiver import free_port

TIMEOUT = 600


def _poll(condition, deadline_s: float = GONE_DEADLINE_S) -> bool:
    end = time.monotonic() + deadline_s
    while not condition() and time.monotonic() < end:
        time.sleep(0.1)
    return bool(condition())


def _exporters(pid: int) -> list[psutil.Process]:
    """The span exporter processes under ``pid`` (multiprocessing's spawned workers, not its
    resource tracker)."""
    found = []
    for p in descendants(pid):
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "spawn_main" in cmd and "resource_tracker" not in cmd:
            found.append(p)
    return found


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(OTEL_PROFILER_SIGNAL="false", OTEL_METRICS_EXPORTER="none", OTEL_TRACES_EXPORTER="none",
               OTEL_PROFILER_FLUSH_INTERVAL_S="0.5", OTEL_PROFILER_RUN_ID=RUN_ID)
    env.update(extra)
    return env


def _kill_all(procs: list) -> None:
    for p in procs:
        try:
            p.kill()
        except (psutil.Error, OSError):
            pass


def test_a_frozen_exporter_is_not_waited_for_and_what_it_held_can_be_sent(tmp_path):
    folder, until = tmp_path / "prof", tmp_path / "until"
    with FaultyReceiver("ok") as receiver:
        env = job_env(folder, **otlp_env(receiver.endpoint("http/protobuf"), "http/protobuf", tmp_path / "spool"))
        job = subprocess.Popen([sys.executable, JOB, "--steps", "0", "--ready", "20", "--step-sleep", "0.01",
                                "--until", str(until)], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert job.stdout.readline().strip() == "ready"
            assert _poll(lambda: len(_exporters(job.pid)) == 1)
            (exporter,) = _exporters(job.pid)
            exporter.suspend()  # SIGSTOP: frozen, never resumed by the test
            assert _poll(lambda: exporter.status() == psutil.STATUS_STOPPED)
            until.touch()
            _, err = job.communicate(timeout=TIMEOUT)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.communicate()
        during_run = span_ids(receiver.requests)
        assert job.returncode == 0, err[-3000:]
        # the job did not wait the exporter out (that ends in "did not finish spooling"): it found
        # it frozen and killed it; the exporter was never resumed
        assert "did not finish spooling" not in err
        assert wait_gone([exporter]) == []
        (line,) = [line for line in err.splitlines() if "frozen" in line]
        assert line.startswith("otel-profiler: warning: span exporter process was frozen")
        command = shlex.split(line.split("send them with: ", 1)[1])
        assert command[:3] == ["otel-profiler", "export", str(folder)]
    with FaultyReceiver("ok") as later:  # the command as printed, to a receiver that is up
        command[command.index("--endpoint") + 1] = later.endpoint("http/protobuf")
        out = subprocess.run([sys.executable, "-m", "otel_profiler", *command[1:]], env=_clean_env(),
                             capture_output=True, text=True, timeout=TIMEOUT)
        assert out.returncode == 0, out.stderr[-3000:]
        resent = span_ids(later.requests)
    expected = set(expected_span_ids(folder, tmp_path / "expected.pb"))
    assert expected and set(resent) == expected  # the folder's own ids: the live run's
    assert set(during_run) <= expected
    assert set(span_ids(pb_requests(tmp_path / "spool"))) <= expected


def test_the_summary_is_written_after_the_job_by_a_process_of_its_own(tmp_path):
    folder = tmp_path / "prof"
    folder.mkdir(mode=0o700)
    other_rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    try:
        (folder / "rank-9.lock").write_text(str(other_rank.pid))  # a rank of the job still running
        env = job_env(folder, OTEL_PROFILER_SUMMARY_AT_EXIT="true")
        job = subprocess.Popen([sys.executable, JOB, "--steps", "20"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        _, err = job.communicate(timeout=TIMEOUT)
        assert job.returncode == 0, err[-3000:]
        lines = [line for line in err.splitlines() if line.startswith("otel-profiler")]
        assert lines == [f"otel-profiler: profile of rank 0 written to {folder} "
                         f"(`otel-profiler summary {folder}`)"]
        assert _poll(lambda: (folder / "summary.lock").exists() and (folder / "summary.lock").read_text().isdigit())
        summarizer = psutil.Process(int((folder / "summary.lock").read_text()))
        # the job has ended; its summary is made by another process, detached and low-priority,
        # which waits for the folder's last rank
        assert summarizer.pid != job.pid and summarizer.is_running()
        assert "otel_profiler.live.summary_later" in " ".join(summarizer.cmdline())
        assert os.getsid(summarizer.pid) == summarizer.pid and summarizer.nice() == 19
        assert not (folder / "summary.json").exists()
        other_rank.kill()
        other_rank.wait()
        assert _poll(lambda: (folder / "summary.json").exists())
        assert wait_gone([summarizer]) == [] and not (folder / "summary.lock").exists()
    finally:
        other_rank.kill()
        other_rank.wait()


def _run_cli(args: list[str], env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "otel_profiler", "run", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_run_passes_a_sigint_sent_with_kill_to_the_job(tmp_path):
    until = tmp_path / "until"
    run = _run_cli(["--output-dir", str(tmp_path / "prof"), "--no-summary", "--", sys.executable, JOB,
                    "--steps", "0", "--ready", "5", "--until", str(until)], _clean_env())
    try:
        assert run.stdout.readline().strip() == "ready"
        os.kill(run.pid, signal.SIGINT)  # as `kill -INT`: not from a terminal
        ended = _poll(lambda: run.poll() is not None)
        until.touch()  # should the signal not have reached the job, it ends of itself (exit 0)
        _, err = run.communicate(timeout=TIMEOUT)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert ended and run.returncode == -signal.SIGINT, err[-3000:]  # the job died of SIGINT, and so did run


def test_a_sigkilled_run_leaves_no_process_behind(tmp_path):
    with FaultyReceiver("ok") as receiver:
        env = _clean_env(**otlp_env(receiver.endpoint("grpc"), "grpc", tmp_path / "spool"))
        run = _run_cli(["--output-dir", str(tmp_path / "prof"), "--", sys.executable, JOB, "--steps", "0",
                        "--ready", "5"], env)
        left: list = []
        try:
            assert run.stdout.readline().strip() == "ready"
            assert _poll(lambda: len(descendants(run.pid)) >= 3)  # the job, its exporter, a resource tracker
            procs = descendants(run.pid)
            run.kill()
            run.communicate(timeout=TIMEOUT)
            left = wait_gone(procs)
            assert left == [], [p.cmdline() for p in left]
        finally:
            _kill_all(left + descendants(run.pid))
            if run.poll() is None:
                run.kill()
                run.communicate()


def test_a_bad_value_of_a_run_flag_is_a_usage_error_before_the_job(tmp_path):
    marker = tmp_path / "ran"
    for flag, value in (("--steps", "5"), ("--every", "-1"), ("--duration", "soon"), ("--trigger-port", "70000")):
        out = subprocess.run([sys.executable, "-m", "otel_profiler", "run", flag, value, "--", sys.executable,
                              "-c", f"open({str(marker)!r}, 'w')"], env=_clean_env(), capture_output=True,
                             text=True, timeout=TIMEOUT, cwd=tmp_path)
        assert out.returncode == 2 and out.stderr.startswith("usage: otel-profiler run"), out.stderr
        assert f"argument {flag}: {value!r}" in out.stderr.splitlines()[-1]
        assert not marker.exists() and "Traceback" not in out.stderr


def test_run_ends_with_the_replay_command_when_spans_were_spooled(tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens: every span is spooled
    env = _clean_env(**otlp_env(endpoint, "http/protobuf", tmp_path / "spool"))
    run = _run_cli(["--output-dir", str(tmp_path / "prof"), "--", sys.executable, JOB, "--steps", "20"], env)
    _, err = run.communicate(timeout=TIMEOUT)
    assert run.returncode == 0, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert "were not delivered and wait in the spool" in last
    assert last.endswith(f"send them with: otel-profiler replay {tmp_path / 'spool'} --endpoint {endpoint}/v1/traces")
    assert "== Steps" in err  # the summary came before it
    assert list(pb_requests(tmp_path / "spool"))


HARD_EXIT_JOB = """
import os, torch
model = torch.nn.Linear(16, 1); opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(40):
    opt.zero_grad(); model(torch.randn(8, 16)).pow(2).mean().backward(); opt.step()
print("trained", flush=True)
os._exit(3)
"""


def test_a_job_ending_with_os_exit_keeps_what_was_recorded(tmp_path):
    """A zero-code job that ends with ``os._exit(3)`` after 40 steps (atexit never runs), with the
    default flush interval (longer than the job): its steps are written to the profile folder and
    its spans reach the receiver; the exit status and the output are the job's."""
    folder = tmp_path / "prof"
    with FaultyReceiver("ok") as receiver:
        env = job_env(folder, **otlp_env(receiver.endpoint("http/protobuf"), "http/protobuf", tmp_path / "spool"))
        del env["OTEL_PROFILER_FLUSH_INTERVAL_S"]  # the default
        out = subprocess.run([sys.executable, "-c", HARD_EXIT_JOB], env=env, capture_output=True, text=True,
                             timeout=TIMEOUT)
        sent = span_ids(receiver.requests)
    assert out.returncode == 3 and out.stdout == "trained\n", out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr
    assert "leaked semaphore" not in out.stderr, out.stderr  # the exporter's queue is released at close
    from cuda_tracer.loading import load_profile
    from cuda_tracer.model.events import Kind

    rank = load_profile([str(folder)]).ranks[0]
    assert len(rank.batch.of_kind(Kind.STEP)) >= 39
    expected = set(expected_span_ids(folder, tmp_path / "expected.pb"))
    assert expected and set(sent) == expected
