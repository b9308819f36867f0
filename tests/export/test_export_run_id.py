"""``otel-profiler export FOLDER`` gives a run's spans the ids its live export sent: two real training
jobs (no ``OTEL_PROFILER_RUN_ID``: each session makes its own run id) export live to a real OTLP
receiver; ``export`` of each job's profile folder makes exactly the trace and span ids that receiver
got, says which run id it used, and the two runs share no trace id."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fault_kit import job_env, otlp_env, pb_requests, run_job, span_ids
from otlp_receiver import OtlpReceiver

pytest.importorskip("torch")
pytestmark = pytest.mark.jobs


def _live_run(tmp_path, name: str) -> tuple[str, list]:
    """One job exporting live; its profile folder and the span ids the receiver got."""
    folder = tmp_path / name
    with OtlpReceiver() as receiver:
        env = job_env(folder, **otlp_env(receiver.http_endpoint, "http/protobuf", tmp_path / f"{name}-spool"))
        del env["OTEL_PROFILER_RUN_ID"]
        out = run_job(["--steps", "30", "--step-sleep", "0.02"], env)
        received = list(receiver.collected.requests)
    assert out.returncode == 0 and "warning" not in out.stderr, out.stderr[-3000:]
    return str(folder), span_ids(received)


def _export(folder: str, out) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run([sys.executable, "-m", "otel_profiler", "export", folder, "--output", str(out)],
                          capture_output=True, text=True, timeout=300, env=env)


def test_export_of_a_folder_gives_the_ids_of_its_live_run_and_runs_stay_apart(tmp_path):
    runs = [_live_run(tmp_path, name) for name in ("first", "second")]
    traces = []
    for i, (folder, live) in enumerate(runs):
        recorded = json.loads((tmp_path / folder / "rank-0.json").read_text())["run_id"]
        done = _export(folder, tmp_path / f"export-{i}.pb")
        assert done.returncode == 0, done.stderr
        said = [line for line in done.stderr.splitlines() if line.startswith("run id")]
        assert said == [f"run id {recorded}, as recorded in the profile: the trace and span ids of the live run"]
        exported = span_ids(pb_requests(tmp_path / f"export-{i}.pb"))
        assert live and sorted(exported) == sorted(live)  # the same spans under the same ids
        traces.append({t for t, _ in exported})
    assert runs[0][0] != runs[1][0] and not traces[0] & traces[1]  # two runs never merge
