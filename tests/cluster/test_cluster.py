"""Multi-rank analysis through a real Dask cluster (``dask scheduler`` and ``dask worker`` processes on
loopback) and through local processes: the same summary document; the merge gives today's summary
figures (sketch-backed quantiles within ``sketch.RELATIVE_ACCURACY``); an injected straggler is ranked
first and injected clock offsets are recovered within 20 µs; a worker killed mid-run changes nothing;
ranks read from S3 (moto's server) as from a folder; an unreadable rank is one line; without a
scheduler nothing of Dask is imported."""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from benchmarks.scale_ranks import make_job
from dask_cluster import DEADLINE_S, two_workers
from otel_profiler.cluster.align import clock_offsets
from otel_profiler.cluster.partial import read_partials
from otel_profiler.cluster.sketch import RELATIVE_ACCURACY
from ports import free_port

pytestmark = pytest.mark.slow  # real Dask processes and hundreds of rank reads: out of the fast loop

REPO = Path(__file__).resolve().parents[2]
PAIR = REPO / "tests/data/traces/hta/trace_filter"
RANKS = 64
SKETCHED = {"med_us", "p50", "p90", "p99"}
CLUSTER_ONLY = ("clock_alignment", "stragglers", "insights")


def summary_cli(*args: str, env: dict | None = None) -> tuple[int, dict | None, str]:
    """``otel-profiler summary ... --format json`` in a subprocess: exit code, document, stderr."""
    proc = subprocess.run([sys.executable, "-m", "otel_profiler", "summary", *args, "--format", "json"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None, proc.stderr


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("job")
    truth = make_job(folder, RANKS, seed=7)
    return folder, truth


@pytest.fixture(scope="module")
def local_doc(job) -> dict:
    code, doc, err = summary_cli(str(job[0]), "--scheduler", "local", "-j", "2")
    assert code == 0, err
    return doc


cluster = pytest.fixture(scope="module", name="cluster")(two_workers)


def test_cluster_gives_the_local_document(job, local_doc, cluster):
    code, doc, err = summary_cli(str(job[0]), "--scheduler", cluster.address)
    assert code == 0, err
    assert doc == local_doc
    assert len(doc["ranks"]) == RANKS and doc["steps"]["count"] == 2 * RANKS


def test_the_scheduler_imports_none_of_the_reader(job, cluster):
    """Tasks reach the scheduler as pickled calls: running them makes it import no reader or
    analysis module (it unpickles every task; naming ``read_run`` would import them all)."""
    from distributed import Client

    def _analysis_modules() -> list[str]:  # local: pickled by value for the cluster's processes
        import sys

        return sorted(m for m in sys.modules if m.startswith(
            ("cuda_tracer", "otel_profiler.analysis", "otel_profiler.cluster.analyse")))

    code, _, err = summary_cli(str(job[0]), "--scheduler", cluster.address)
    assert code == 0, err
    with Client(cluster.address, timeout=DEADLINE_S) as client:
        assert client.run_on_scheduler(_analysis_modules) == []
        assert all(mods for mods in client.run(_analysis_modules).values())  # the workers read


def test_straggler_ranked_first_and_offsets_recovered(job, local_doc):
    truth = job[1]
    found = local_doc["stragglers"]
    assert found["ranking"][0]["rank"] == truth["straggler"]
    assert all(s["slowest"][0]["rank"] == truth["straggler"] and s["slowest"][0]["cause"] == "compute"
               for s in found["steps"])
    assert [i["scope"] for i in local_doc["insights"] if i["rule"] == "cluster_straggler"] == \
        [f"rank {truth['straggler']}"]
    assert max(r["arrived_last"] for r in found["collective_wait"]) == \
        next(r["arrived_last"] for r in found["collective_wait"] if r["rank"] == truth["straggler"])
    align = local_doc["clock_alignment"]
    assert align["aligned"] and align["reference_rank"] == 0
    errors = [abs(align["ranks"][str(r)]["offset_us"] - off) for r, off in truth["offsets_us"].items()]
    assert max(errors) <= 20.0, max(errors)
    assert all(v["uncertainty_us"] is not None for v in align["ranks"].values())


def test_worker_killed_mid_run_changes_nothing(job, local_doc, cluster):
    cluster.start_worker("victim")
    cluster.wait_for_workers(3)
    victim = cluster.workers()["victim"]
    from distributed import Client

    out: dict = {}
    run = threading.Thread(target=lambda: out.update(result=summary_cli(str(job[0]), "--scheduler",
                                                                        cluster.address)))
    run.start()
    with Client(cluster.address, timeout=DEADLINE_S) as client:
        deadline = time.monotonic() + DEADLINE_S
        while not client.processing().get(victim) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.processing().get(victim), "the victim worker never got a task"
    cluster.kill("victim")
    run.join(timeout=600)
    code, doc, err = out["result"]
    assert code == 0, err
    assert doc == local_doc


def _same(a, b, where="") -> list[str]:
    """Where two summary documents differ: exact, except sketch-backed quantiles (relative accuracy)
    and standard deviations (float rounding); rows of tables compared by name."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{where}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in _same(a[k], b[k], f"{where}/{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} vs {len(b)} rows"]
        key = next((k for k in ("raw_name", "path", "type", "name") if a and isinstance(a[0], dict) and k in a[0]), None)
        if key:
            ka = {(r[key], r.get("kind")): r for r in a}
            kb = {(r[key], r.get("kind")): r for r in b}
            return _same(ka, kb, where) if set(ka) == set(kb) else [f"{where}: rows differ"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _same(x, y, f"{where}[{i}]")]
    if isinstance(a, float) or isinstance(b, float):
        leaf = where.rsplit("/", 1)[-1]
        tol = RELATIVE_ACCURACY if leaf in SKETCHED else 1e-6
        return [] if math.isclose(a, b, rel_tol=tol, abs_tol=1e-6) else [f"{where}: {a} vs {b}"]
    return [] if a == b else [f"{where}: {a!r} vs {b!r}"]


def test_merge_gives_todays_summary_of_real_ranks():
    """The two real ranks of HTA's 128-rank NCCL job: today's summary and the merged one agree."""
    from cuda_tracer.loading import load_profile
    from otel_profiler.analysis.summary import summarize
    from otel_profiler.cluster.analyse import analyse

    today = json.loads(json.dumps(summarize(load_profile([str(PAIR)], one_job=True))))
    merged = json.loads(json.dumps(analyse([str(PAIR)], "local", workers=1).summary))
    for key in CLUSTER_ONLY:
        merged.pop(key)
    assert _same(merged, today) == []


def test_client_keeps_rank_sections_on_disk_not_in_memory(job, tmp_path, monkeypatch):
    """With ``spill`` (the client's way) no partial keeps its section in memory, the temporary file
    has no name in the temporary folder, and the document's ranks read back as without spilling."""
    import tempfile

    from otel_profiler.cluster.merge import Reduction

    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the file would show if it had a name
    monkeypatch.setattr(tempfile, "tempdir", None)
    files = sorted(job[0].iterdir())[:4]
    kept, spilled = Reduction(), Reduction(spill=True)
    for f in files:
        kept.add(read_partials(str(f))[0])
        one = Reduction()
        one.add(read_partials(str(f))[0])
        spilled.absorb(one)
    assert all(p.section_json == b"" for p in spilled.partials)
    assert all(len(p.section_json) > 1000 for p in kept.partials)
    assert list(tmp_path.iterdir()) == []
    sources = [str(f) for f in files]
    a, b = kept.document(sources), spilled.document(sources)
    assert list(b["ranks"]) == list(a["ranks"]) and len(a["ranks"]) == 4
    assert json.loads(json.dumps(b)) == json.loads(json.dumps(a))


def test_sections_stay_in_memory_when_the_disk_is_full(monkeypatch, caplog):
    """A temporary file that can no longer be written: one warning, and no section is lost."""
    import errno
    import os

    from otel_profiler.cluster.sections import SectionFile

    store = SectionFile()
    store.put("0", b"first")

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    store.put("1", b"second")
    store.put("2", b"third")
    assert dict(store) == {"0": b"first", "1": b"second", "2": b"third"}
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "kept in memory" in warnings[0].getMessage()


def test_traces_without_collectives_keep_their_clocks():
    trace = REPO / "tests/data/traces/hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
    partial = read_partials(str(trace))[0]
    found = clock_offsets({0: partial.collectives, 1: partial.collectives | {"end_ns": partial.collectives["end_ns"][:0]}})
    assert not found["aligned"] and "keeps its own clock" in found["note"]
    assert found["ranks"]["1"]["offset_us"] == 0.0


def test_unreadable_rank_is_one_line_and_others_are_used(tmp_path):
    make_job(tmp_path, 3, seed=3)
    (tmp_path / "rank-0009.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [')[:-4])
    code, doc, err = summary_cli(str(tmp_path), "--scheduler", "local")
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "rank-0009.json.gz" in lines[0] and "left out" in lines[0]
    assert sorted(doc["ranks"]) == ["0", "1", "2"]


def test_nothing_of_dask_imported_without_a_scheduler(job, tmp_path):
    probe = ("import sys; from otel_profiler.cli import main; "
             f"main(['summary', {str(job[0])!r}, '-o', {str(tmp_path / 'a.txt')!r}]); "
             f"main(['summary', {str(job[0])!r}, '--scheduler', 'local', '-o', {str(tmp_path / 'b.txt')!r}]); "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'dask', 'distributed', 'fsspec', 's3fs'}))")
    env = {k: v for k, v in os.environ.items() if k != "OTEL_PROFILER_SCHEDULER"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600,
                         cwd=REPO, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.fixture
def s3_server(tmp_path):
    port = free_port()
    log = open(tmp_path / "moto.log", "wb")
    proc = subprocess.Popen(["moto_server", "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            urllib.request.urlopen(url, timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("moto_server did not start")
            time.sleep(0.2)
    env = dict(os.environ, FSSPEC_S3_ENDPOINT_URL=url, AWS_ACCESS_KEY_ID="test",
               AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1")
    env.pop("OTEL_PROFILER_SCHEDULER", None)
    yield url, env
    proc.terminate()
    proc.wait(timeout=DEADLINE_S)


def test_ranks_read_from_s3_as_from_a_folder(tmp_path, s3_server):
    import s3fs

    url, env = s3_server
    folder = tmp_path / "job"
    make_job(folder, 4, seed=5)
    fs = s3fs.S3FileSystem(key="test", secret="test", endpoint_url=url)
    fs.mkdir("runs")
    for f in sorted(folder.iterdir()):
        fs.put(str(f), f"runs/job/{f.name}")
    fs.pipe("runs/job/rank-0007.json.gz", b"not gzip, not json")
    code, remote, err = summary_cli("s3://runs/job/", env=env)
    assert code == 2 and err.count("\n") == 1 and "s3://runs/job/rank-0007.json.gz" in err
    local_code, local, _ = summary_cli(str(folder), "--scheduler", "local", env=env)
    assert local_code == 0
    for doc in (remote, local):
        doc.pop("sources")
        for meta in doc["ranks_meta"]:
            meta.pop("file")
    assert remote == local


def test_report_and_diff_through_the_cluster_way(tmp_path):
    """``report`` writes the multi-rank page (offsets, the straggler, heatmap, timeline); ``diff``
    compares two jobs read the cluster's way; ``--format perfetto`` is refused in one line."""
    truth = make_job(tmp_path / "a", 4, seed=9)
    make_job(tmp_path / "b", 4, seed=10, straggler=truth["straggler"])
    page = tmp_path / "r.html"
    proc = subprocess.run([sys.executable, "-m", "otel_profiler", "report", str(tmp_path / "a"), "--scheduler",
                           "local", "-o", str(page)], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    html = page.read_text()
    assert f"Straggler rank {truth['straggler']}: compute" in html
    assert html.count("<svg") == 2 and "Clock alignment" in html and "Collective wait per rank" in html
    proc = subprocess.run([sys.executable, "-m", "otel_profiler", "report", str(tmp_path / "a"), "--scheduler",
                           "local", "--format", "perfetto", "-o", str(tmp_path / "t.json")],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "perfetto" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "otel_profiler", "diff", str(tmp_path / "a"), str(tmp_path / "b"),
                           "--scheduler", "local", "--format", "json"],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert len(d["base"]["sources"]) == 4 and len(d["new"]["sources"]) == 4


def test_straggler_threshold_from_the_command_line(tmp_path):
    truth = make_job(tmp_path, 3, seed=4)
    code, doc, err = summary_cli(str(tmp_path), "--scheduler", "local", "--threshold", "excess_pct=50")
    assert code == 0, err
    assert doc["stragglers"]["thresholds"]["excess_pct"] == 50
    assert doc["stragglers"]["steps"][0]["slowest"][0]["rank"] == truth["straggler"]
    assert not any(i["rule"] == "cluster_straggler" for i in doc["insights"])  # +24 % is under 50 %
    code, _, err = summary_cli(str(tmp_path), "--threshold", "excess_pct=50")
    assert code == 2 and "unknown threshold" in err


def test_bad_scheduler_address_is_one_line(tmp_path):
    make_job(tmp_path, 2, seed=2)
    code, doc, err = summary_cli(str(tmp_path), "--scheduler", "no-port-here")
    assert code == 2 and doc is None
    assert err.strip().count("\n") == 0 and "--scheduler no-port-here" in err and "tcp://HOST:PORT" in err


def test_traces_without_a_rank_are_numbered_as_the_local_reading_does(tmp_path):
    """Trace files that name no rank get distinct ranks, the same as without a scheduler."""
    for i in range(2):
        doc = json.loads(gzip.decompress((PAIR / f"sampled_rank-{i}.json.gz").read_bytes()))
        doc.pop("distributedInfo")
        (tmp_path / f"trace_{'ab'[i]}.json").write_text(json.dumps(doc))
    code, cluster_doc, err = summary_cli(str(tmp_path), "--scheduler", "local")
    assert code == 0, err
    code, plain_doc, err = summary_cli(str(tmp_path))
    assert code == 0, err
    assert [m["rank"] for m in cluster_doc["ranks_meta"]] == [m["rank"] for m in plain_doc["ranks_meta"]] == [0, 1]
    assert cluster_doc["ranks"] == plain_doc["ranks"]


@pytest.mark.parametrize("count", [0, 1, 3, 4, 17, 64, 256, 1024, 1025])
def test_tasks_shrink_toward_the_end_and_cover_every_input_once(count):
    from otel_profiler.cluster.analyse import MAX_TASK_INPUTS, task_runs

    runs = task_runs(count)
    assert sum(runs) == count and all(1 <= r <= MAX_TASK_INPUTS for r in runs)
    assert runs == sorted(runs, reverse=True)  # large tasks first, small ones last
    assert not runs or runs[-1] <= max(1, count // 64)  # no worker left waiting on a large last task
    if count == 64:
        assert runs[0] == MAX_TASK_INPUTS and runs[-4:] == [1] * 4 and len(runs) < 16
    if count >= 1024:
        assert len(runs) == -(-count // MAX_TASK_INPUTS)  # as few tasks as the largest allow
