"""No session starts in the processes our span exporter spawns (its worker, multiprocessing's resource
tracker), though they inherit ``OTEL_PROFILER_ENABLED`` and the bootstrap's ``PYTHONPATH``.

A probe ``sitecustomize`` after ours on ``PYTHONPATH`` (the bootstrap chains to it) records, in every
Python process of the job, its command line and whether a profiling session ran there (sessions start
when a process imports torch or this package's API, so it is recorded again at exit).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from otel_profiler.live import session

PROBE = """
import atexit, json, os, sys
import otel_profiler.live.session as live_session

started = []
original = live_session.start_session


def start_session(*args, **kwargs):  # the session starts when the process imports torch or our API
    result = original(*args, **kwargs)
    started.append(result is not None)
    return result


def report():
    with open(os.path.join(os.environ["PROBE_DIR"], f"{os.getpid()}.json"), "w") as out:
        json.dump({"argv": sys.argv, "session": any(started)}, out)


live_session.start_session = start_session
report()  # at start-up (a process that ends in os._exit keeps this one)
atexit.register(report)  # and at exit, with whether a session ever ran
"""

JOB = """
from otel_profiler import annotate, step
for i in range(4):
    with annotate("work"):
        sum(range(10000))
    step()
"""


def test_the_exporter_process_runs_no_session(tmp_path):
    probe_site, probes = tmp_path / "probe-site", tmp_path / "probes"
    probe_site.mkdir()
    probes.mkdir()
    (probe_site / "sitecustomize.py").write_text(PROBE)
    (tmp_path / "job.py").write_text(JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(PYTHONPATH=str(probe_site), PROBE_DIR=str(probes), OTEL_PROFILER_SIGNAL="false",
               OTEL_PROFILER_OTLP_FILE=str(tmp_path / "spans.jsonl"), OTEL_TRACES_EXPORTER="none",
               OTEL_METRICS_EXPORTER="none", OTEL_PROFILER_ACTIVITIES="cpu_op")
    out = subprocess.run([sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(tmp_path / "prof"),
                          "--", sys.executable, str(tmp_path / "job.py")], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = [json.loads(p.read_text()) for p in probes.iterdir()]
    job = [p for p in seen if p["argv"][0].endswith("job.py")]
    spawned = [p for p in seen if p["argv"][:1] == ["-c"]]  # the exporter worker and the resource tracker
    assert len(job) == 1 and job[0]["session"], seen
    assert any("--multiprocessing-fork" in p["argv"] for p in spawned), seen  # the exporter did start
    assert not any(p["session"] for p in spawned), seen
    assert (tmp_path / "spans.jsonl").stat().st_size > 0  # and still exported
    assert session.EXPORTER_CHILD_ENV not in os.environ


def test_start_session_refuses_inside_the_exporter_process(monkeypatch, tmp_path):
    monkeypatch.setenv(session.EXPORTER_CHILD_ENV, "1")
    assert session.start_session("env", {"profile_dir": str(tmp_path)}) is None
    assert session.current() is None
