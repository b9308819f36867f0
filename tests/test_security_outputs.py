"""Security of a live job's outputs: listening sockets on 127.0.0.1 only, the OTLP header secret in
no output (stderr, stdout, profile folder, spool), user-only profile folders.

Referenced, not repeated: TLS and basic auth of /metrics (``test_metrics_endpoint.py``), hostile
names staying text in the HTML report (``test_report_browser.py::test_hostile_names_stay_text``).
"""

from __future__ import annotations

import stat
import subprocess
import sys
import time

import pytest

from fault_kit import JOB, FaultyReceiver, job_env, otlp_env
from otlp_receiver import free_port

psutil = pytest.importorskip("psutil")
pytest.importorskip("torch")

SECRET = "Bearer-s3cr3t-4f9a"


def listening(pid: int) -> list[str]:
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    pids = {p.pid for p in procs}
    return [c.laddr.ip for c in psutil.net_connections("inet")
            if c.pid in pids and c.status in (psutil.CONN_LISTEN, psutil.CONN_NONE) and c.laddr]


def test_sockets_secret_and_permissions_of_a_live_job(tmp_path):
    with FaultyReceiver("errors") as receiver:  # refused: the secret travels in retries and the spool
        env = job_env(tmp_path / "prof", **otlp_env(receiver.endpoint("http/protobuf"), "http/protobuf",
                                                    tmp_path / "spool"),
                      OTEL_EXPORTER_OTLP_HEADERS=f"authorization={SECRET}",
                      OTEL_PROFILER_PROMETHEUS_PORT=str(free_port()),
                      OTEL_PROFILER_TRIGGER_PORT=str(free_port()))  # UDP
        proc = subprocess.Popen([sys.executable, JOB, "--steps", "60", "--ready", "30", "--step-sleep", "0.03"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "ready"
            time.sleep(0.5)
            addresses = listening(proc.pid)
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert len(addresses) >= 2 and set(addresses) == {"127.0.0.1"}, addresses  # /metrics + trigger
    assert SECRET not in out + err
    for path in [*(tmp_path / "prof").rglob("*"), *(tmp_path / "spool").rglob("*")]:
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    for folder in (tmp_path / "prof", tmp_path / "spool"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
        assert list(folder.iterdir())
        for path in folder.iterdir():
            assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path  # no group/other access
    # nor in what the tools make of the folder: summary, HTML report, OTLP JSON export
    from otel_profiler.cli import main

    for args in (["summary", str(tmp_path / "prof"), "--format", "json", "-o", str(tmp_path / "s.json")],
                 ["report", str(tmp_path / "prof"), "-o", str(tmp_path / "r.html")],
                 ["export", str(tmp_path / "prof"), "--output", str(tmp_path / "e.jsonl")]):
        assert main(args) == 0
    for name in ("s.json", "r.html", "e.jsonl"):
        assert SECRET not in (tmp_path / name).read_text()


SCRIPTS = ["</script><script>window.pwned=1</script>", "<SCRIPT src=//x></SCRIPT>", "<script\tdefer>"]


def _trace(names: list[str]) -> dict:
    """Kernels, their launches, an annotation and a thread name, all carrying ``names``."""
    events = [{"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": 100 + 10 * i, "dur": 5,
               "args": {"device": 0, "stream": 7, "correlation": i + 1}} for i, n in enumerate(names)]
    events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                "ts": 95 + 10 * i, "dur": 2, "args": {"correlation": i + 1}} for i in range(len(names))]
    events += [{"ph": "X", "cat": "user_annotation", "name": names[0], "pid": 1, "tid": 1, "ts": 90, "dur": 60},
               {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": names[1]}}]
    return {"traceEvents": events}


def test_report_html_has_no_script_tag_from_trace_names(tmp_path):
    """Static check (the browser check is ``test_report_browser.py::test_hostile_names_stay_text``):
    a report of hostile names has exactly as many ``<script`` as one of harmless names."""
    import gzip
    import json

    from cuda_tracer.loading import load_profile
    from otel_profiler.report.html import write_report

    pages = []
    for tag, names in (("hostile", SCRIPTS), ("plain", ["k1", "k2", "k3"])):
        path = tmp_path / f"{tag}.json.gz"
        path.write_bytes(gzip.compress(json.dumps(_trace(names)).encode()))
        write_report(load_profile([str(path)]), str(tmp_path / f"{tag}.html"))
        pages.append((tmp_path / f"{tag}.html").read_text())
    hostile, plain = pages
    assert hostile.lower().count("<script") == plain.lower().count("<script") > 0
    for name in SCRIPTS:
        assert name not in hostile
