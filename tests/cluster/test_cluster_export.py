"""``otel-profiler export --scheduler``: a generated multi-rank job (plus one unreadable rank file)
exported through a real Dask cluster (``dask scheduler`` and two ``dask worker`` processes on
loopback) to a real OTLP receiver gives exactly the spans, ids and counts of the plain ``export`` of
the same folder; the unreadable rank is one line and the exit code is today's (2)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.scale_ranks import make_job
from dask_cluster import two_workers
from otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.slow  # real Dask processes: out of the fast loop, like test_cluster

REPO = Path(__file__).resolve().parents[2]
RANKS = 8
BAD = "rank-9999.json"
TOTALS = re.compile(r"^exported (\d+) spans of (\d+) rank\(s\) to .*; (\d+) delivered$", re.M)


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("job")
    make_job(folder, RANKS, seed=3)
    (folder / BAD).write_text('{"traceEvents": [')  # cut off: cannot be read
    return folder


cluster = pytest.fixture(scope="module", name="cluster")(two_workers)


def export(folder: Path, spool: Path, *extra: str) -> tuple[subprocess.CompletedProcess, list[tuple]]:
    """``otel-profiler export FOLDER`` to a fresh receiver: the process and the received spans as
    (trace id, span id, parent id, name, start, end)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_PROFILER_SPOOL_DIR"] = str(spool)
    with OtlpReceiver() as receiver:
        proc = subprocess.run([sys.executable, "-m", "otel_profiler", "export", str(folder),
                               "--endpoint", receiver.grpc_endpoint, "--protocol", "grpc", *extra],
                              capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
        spans = sorted((s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name,
                        s.start_time_unix_nano, s.end_time_unix_nano) for _, s in receiver.collected.spans())
    return proc, spans


def test_cluster_export_sends_the_spans_of_the_plain_export(job, cluster, tmp_path):
    plain, plain_spans = export(job, tmp_path / "spool-plain")
    dask, dask_spans = export(job, tmp_path / "spool-dask", "--scheduler", cluster.address)
    for proc in (plain, dask):
        assert proc.returncode == 2, proc.stderr  # one rank left out: today's exit code
        assert "Traceback" not in proc.stderr
        bad_lines = [line for line in proc.stderr.splitlines() if BAD in line]
        assert len(bad_lines) == 1 and "left out" in bad_lines[0], proc.stderr
    assert dask_spans and dask_spans == plain_spans
    assert len({s[1] for s in dask_spans}) == len(dask_spans)  # span ids distinct
    (built, ranks, delivered), = [tuple(map(int, m)) for m in TOTALS.findall(dask.stderr)]
    assert (built, ranks, delivered) == tuple(map(int, TOTALS.findall(plain.stderr)[0]))
    assert ranks == RANKS and built == delivered == len(dask_spans)
    run_id_line = lambda err: next(line for line in err.splitlines() if line.startswith("run id"))  # noqa: E731
    assert run_id_line(dask.stderr) == run_id_line(plain.stderr)


def test_unreachable_scheduler_is_one_line(job, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    with OtlpReceiver() as receiver:
        proc = subprocess.run([sys.executable, "-m", "otel_profiler", "export", str(job), "--endpoint",
                               receiver.grpc_endpoint, "--protocol", "grpc", "--scheduler", "tcp:/nowhere"],
                              capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
        assert not receiver.collected.spans()
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_output_with_a_scheduler_is_one_line(job, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.run([sys.executable, "-m", "otel_profiler", "export", str(job), "-o",
                           str(tmp_path / "spans.jsonl"), "--scheduler", "local"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "--output" in proc.stderr and not (tmp_path / "spans.jsonl").exists()
