"""What the command line imports before it does its work: ``otel-profiler --help`` loads no subcommand,
and ``otel-profiler run`` starts the job before numpy, the analysis, the report or the exporter is
loaded (they are what makes a short job slower; the summary's modules load while the job runs, and
``--no-summary`` never loads them).

Each case runs the real ``main`` in a fresh interpreter with an audit hook that records
``sys.modules`` when the job's process is started (``subprocess.Popen``), or when ``--help`` exits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ALL_TRACES

PROBE = '''
import json, sys
record_file, marker = sys.argv[1], sys.argv[2]
seen = {}

def at_job_start(event, args):
    if event == "subprocess.Popen" and "modules" not in seen and marker in map(str, args[1] or ()):
        seen["modules"] = sorted(sys.modules)

sys.addaudithook(at_job_start)
from otel_profiler.cli import main
try:
    seen["code"] = main(sys.argv[3:])
except SystemExit as exc:
    seen["code"] = exc.code
seen.setdefault("modules", sorted(sys.modules))
seen["at_exit"] = sorted(sys.modules)
import os
seen["threads"] = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None
seen["blas"] = os.environ.get("OPENBLAS_NUM_THREADS")
with open(record_file, "w") as f:
    json.dump(seen, f)
'''

HEAVY = ("numpy", "torch", "otel_profiler.analysis", "otel_profiler.report", "otel_profiler.export",
         "otel_profiler.spans.builder", "otel_profiler.live.session", "otel_profiler.live.output",
         "cuda_tracer.model.events", "cuda_tracer.loading")
"""Modules (and their submodules) that must not be loaded before the job starts."""

ALLOWED: tuple[str, ...] = ()
"""Heavy modules allowed anyway (none: the settings check reads the OTLP target rules from
``otel_profiler.shared``, not from ``export``)."""


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", OTEL_PROFILER_SIGNAL="false")
    return env


def probe(tmp: Path, marker: str, *argv: str, env: dict[str, str] | None = None) -> dict:
    """What the probe recorded of ``otel-profiler ARGV``: ``code``, ``modules`` (loaded when the job
    started, else when main ended), ``at_exit`` (loaded when main ended), ``threads`` (the
    process's threads then) and ``blas`` (its ``OPENBLAS_NUM_THREADS`` then)."""
    record = tmp / "modules.json"
    subprocess.run([sys.executable, "-c", PROBE, str(record), marker, *argv], env=env or clean_env(),
                   cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=240)
    return json.loads(record.read_text())


def modules_of(tmp: Path, marker: str, *argv: str) -> tuple[object, list[str], list[str]]:
    """(exit code, modules loaded when the job started (else when main ended), modules loaded when
    main ended) of ``otel-profiler ARGV``."""
    seen = probe(tmp, marker, *argv)
    return seen["code"], seen["modules"], seen["at_exit"]


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m not in ALLOWED and any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_help_loads_no_subcommand_and_nothing_heavy(tmp_path):
    code, modules, _ = modules_of(tmp_path, "-", "--help")
    assert code == 0
    assert [m for m in modules if m.startswith("otel_profiler.commands.")] == []
    assert heavy(modules) == []


@pytest.mark.parametrize("options", [(), ("--no-summary",)], ids=["summary", "no-summary"])
def test_run_starts_the_job_before_loading_anything_heavy(tmp_path, options):
    job = tmp_path / "job.py"
    job.write_text("open('ran', 'w').write('yes')\n")
    code, modules, at_exit = modules_of(tmp_path, str(job), "run", "--output-dir", str(tmp_path / "prof"),
                                        *options, "--", sys.executable, str(job))
    assert code == 0 and (tmp_path / "ran").read_text() == "yes"
    assert "otel_profiler.commands.run" in modules  # recorded at the job's start, not after
    assert heavy(modules) == []
    if options:  # no summary: nothing heavy after the job either
        assert heavy(at_exit) == []
    else:
        assert "otel_profiler.report.console" in at_exit  # the check sees what the summary loads


def test_summary_of_a_trace_loads_no_cluster_reading(tmp_path):
    """Without a scheduler the summary reads the ranks here: the cluster's reading, Dask and
    fsspec stay unloaded."""
    trace = next(p for p in ALL_TRACES if "df_index_resolver" in p.name)
    code, _, at_exit = modules_of(tmp_path, "-", "summary", str(trace))
    assert code == 0
    cluster = ("otel_profiler.cluster.analyse", "otel_profiler.cluster.merge", "dask", "distributed", "fsspec")
    assert [m for m in at_exit if m.split(".")[0] in ("dask", "distributed", "fsspec") or m in cluster] == []
    assert "otel_profiler.analysis.summary" in at_exit  # the check sees what the summary loads


def test_run_finds_its_installation_without_loading_package_metadata(tmp_path):
    code, modules, _ = modules_of(tmp_path, sys.executable, "run", "--output-dir", str(tmp_path / "prof"),
                                  "--no-summary", "--", sys.executable, "-c", "pass")
    assert code == 0 and "otel_profiler.commands.run" in modules
    assert "importlib.metadata" not in modules


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_an_analysis_starts_no_blas_thread_pool_and_leaves_the_setting_as_it_was(tmp_path):
    """numpy's BLAS pool would start a spinning thread per core; the analyses do no linear algebra."""
    trace = next(p for p in ALL_TRACES if "df_index_resolver" in p.name)
    seen = probe(tmp_path, "-", "summary", str(trace))
    assert seen["code"] == 0 and "numpy" in seen["at_exit"]
    assert seen["threads"] == 1  # the pool would be one thread per core beside this one
    assert seen["blas"] is None  # put back: nothing the command starts inherits it


@pytest.mark.parametrize("users_value", [None, "3"])
def test_a_job_started_by_run_inherits_the_users_blas_setting(tmp_path, users_value):
    job = tmp_path / "job.py"
    job.write_text("import os\nopen('blas', 'w').write(repr(os.environ.get('OPENBLAS_NUM_THREADS')))\n")
    env = clean_env()
    env.pop("OPENBLAS_NUM_THREADS", None)
    if users_value:
        env["OPENBLAS_NUM_THREADS"] = users_value
    seen = probe(tmp_path, str(job), "run", "--output-dir", str(tmp_path / "prof"), "--no-summary", "--",
                 sys.executable, str(job), env=env)
    assert seen["code"] == 0
    assert (tmp_path / "blas").read_text() == repr(users_value)


def test_export_loads_neither_the_summary_command_nor_the_straggler_rules(tmp_path):
    """``export`` shares only the ``--scheduler`` option with the analyses (a tenth of its start-up
    was the summary command's imports)."""
    trace = next(p for p in ALL_TRACES if "df_index_resolver" in p.name)
    code, _, at_exit = modules_of(tmp_path, "-", "export", str(trace), "--output", str(tmp_path / "spans.pb"))
    assert code == 0 and (tmp_path / "spans.pb").stat().st_size > 0
    assert [m for m in at_exit if m in ("otel_profiler.commands.summary", "otel_profiler.cluster.stragglers",
                                        "otel_profiler.analysis.insights")] == []
    assert "otel_profiler.commands.export" in at_exit  # the check sees what the command loads
