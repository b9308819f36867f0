"""Shared test fixtures and test groups.

Traces: the real Kineto traces under ``tests/data/traces/`` (see SOURCES.md there), or the folder in
``OTEL_PROFILER_TEST_TRACES``.

Groups: every test of the modules in ``MODULE_MARKERS`` (and every test using a fixture of
``FIXTURE_MARKERS``, every test function in ``FUNCTION_MARKERS``) gets those markers, so the contributors' fast
loop (``pytest -m "not slow_env"``) leaves out what needs a browser, a Prometheus server, TensorFlow,
fault-injected or other training jobs in child processes, a fresh virtual environment, thousands of
generated inputs, a run of Holistic Trace Analysis, the Jaeger and Collector binaries of
``scripts/backends.sh``, or is marked ``slow``. In CI (``CI`` set to a true value) a test of the
``browser``, ``prometheus`` or ``backends`` group that skips fails instead: a missing Chromium,
chromedriver, Prometheus, Jaeger or Collector must not pass unseen. ``busy`` marks the tests that keep every
core busy on purpose (``fault_kit.busy_cores``), ``exclusive`` those that need the machine to themselves
(busy neighbours of their own, or a job held to a time budget): ``scripts/test.sh`` runs the others in
parallel workers (pytest-xdist), then the ``busy`` ones in parallel workers, then the ``exclusive`` ones alone.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
# The test modules live in folders by package (tests/analysis/, tests/live/, ...; docs/testing.md), with
# no __init__.py: pytest puts each module's own folder on sys.path as it imports it, and this file's
# folder (tests/) for the shared helpers. A module that imports another test module by its name
# (``from test_report_browser import browser``) must find it whichever folder it is in, and whichever
# modules pytest collected before it (a single file run alone): every test folder goes on sys.path here.
for _folder in sorted(p for p in TESTS.iterdir() if p.is_dir() and p.name != "gpu" and any(p.glob("test_*.py"))):
    if str(_folder) not in sys.path:
        sys.path.insert(1, str(_folder))

# SIGINT at its default for the jobs the tests start. A runner started in the background by a
# non-interactive shell (`bash scripts/test.sh &`) inherits SIGINT ignored, and every process it starts
# would too: a job sent SIGINT by a test (to check that it dies of it, profiled as unprofiled) would
# then rightly ignore it, and the test would wait for nothing.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Parallel workers (pytest-xdist) share the machine's cores: each worker's torch, and the jobs its tests
# start (they inherit the variable), get the worker's share of intra-op threads rather than one per core
# each. Two workers on two cores would otherwise run four OpenMP threads that spin for each other (the
# parallel phase took 15 % longer). A value set by whoever runs the tests is kept.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # (not on macOS)
CORES_PER_WORKER = max(1, _CORES // _WORKERS)
"""This process's share of the machine's cores: all of them, or a parallel worker's share."""
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(CORES_PER_WORKER))
SHARED_TRACES = Path(os.environ.get("OTEL_PROFILER_TEST_TRACES") or REPO / "tests" / "data" / "traces")
ALL_TRACES = sorted(SHARED_TRACES.rglob("*.json.gz"))

# Test module -> markers. ``slow_env`` marks everything the fast loop leaves out.
MODULE_MARKERS: dict[str, tuple[str, ...]] = {
    "test_report_browser": ("browser",),
    "test_dashboards_queries": ("prometheus",),
    "test_metrics_prometheus": ("prometheus",),
    "test_tensorflow_keras": ("tensorflow",),
    "test_faults_process": ("fault_process",),
    "test_faults_otlp": ("fault_process",),
    "test_faults_run": ("fault_process",),
    "test_exit_path": ("fault_process",),
    "test_install_runtime": ("fresh_venv",),
    "test_live_zero_code": ("jobs",),
    "test_session_metrics": ("jobs",),
    "test_security_outputs": ("jobs",),
    "test_zero_code_steps": ("jobs",),
    "test_insights_host": ("jobs",),
    "test_standard_exporters": ("jobs",),
    "test_fuzz_inputs": ("fuzz",),
    "test_hta_agreement": ("hta",),
    "test_communication_overlap": ("hta",),
    "test_otlp_export": ("jobs",),
    "test_window_stress": ("jobs",),
    "test_first_contact": ("jobs",),
    "test_test_groups": ("slow",),
    "test_gpu_check_script": ("slow",),
    "test_pprof_export": ("slow",),
    "test_real_backends_configs": ("backends",),
    "test_real_backends_e2e": ("backends",),
    "test_real_backends_delivery": ("backends",),
    "test_real_backends_tenants": ("backends",),
    "test_app_api": ("jobs",),
    "test_app_browser": ("browser", "jobs"),
    "test_app_store_hostile": ("jobs",),
    "test_compiled_jobs": ("jobs",),
    "test_multiprocess_trainers": ("jobs",),
    "test_job_own_profiler": ("jobs",),
    "test_torch_releases": ("jobs", "torch_releases"),
}
# Fixture -> markers, for tests elsewhere that use it (e.g. the TensorFlow environment).
FIXTURE_MARKERS: dict[str, tuple[str, ...]] = {"tf_python": ("tensorflow",), "browser": ("browser",),
                                                "busy_cores": ("busy",)}
# Test function -> markers, for single slow tests in otherwise quick modules.
FUNCTION_MARKERS: dict[str, tuple[str, ...]] = {
    "test_cpu_ops_are_the_context_of_kept_launches": ("slow",),
    "test_demangling_agrees_with_llvm_on_real_symbols": ("slow",),
    "test_mangled_kernels_of_the_traces_are_demangled": ("slow",),
    "test_dataloader_rule_finds_loader_calls_whatever_their_kind": ("slow",),
    "test_cpu_samples_off": ("slow",),
    "test_spans_exported_in_pieces_equal_the_whole_batch": ("slow",),
    "test_modules_of_a_model_recorded_here": ("slow",),
    "test_a_profiled_run_keeps_cpu_samples_and_its_compute_resources": ("slow",),
    "test_metrics_exporter_prometheus_serves_the_standard_port_for_a_real_scrape": ("prometheus",),
    # Alone (scripts/test.sh): busy neighbours on purpose; jobs held to the close budget.
    "test_busy_neighbours_give_the_contention_insight_and_the_job_alone_does_not": ("exclusive",),
    "test_a_job_ending_with_os_exit_keeps_what_was_recorded": ("exclusive",),
    "test_a_frozen_exporter_is_not_waited_for_and_what_it_held_can_be_sent": ("exclusive",),
}
SLOW_ENV = {"browser", "prometheus", "tensorflow", "fault_process", "fresh_venv", "jobs", "fuzz", "hta",
            "slow", "backends", "torch_releases"}
MUST_NOT_SKIP_IN_CI = {"browser", "prometheus", "backends"}


def trace(relative: str) -> Path:
    """A test trace by its path under tests/data/traces/, e.g. ``hta/trace_filter/sampled_rank-0.json.gz``."""
    return SHARED_TRACES / relative


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    if not ALL_TRACES:
        pytest.fail(f"the Kineto test traces are missing under {SHARED_TRACES}")
    return SHARED_TRACES


def pytest_configure(config: pytest.Config) -> None:
    for name, text in (("browser", "drives headless Chromium through chromedriver"),
                       ("prometheus", "starts a real Prometheus server"),
                       ("tensorflow", "builds and uses a TensorFlow virtual environment (1.8 GB)"),
                       ("fault_process", "runs training jobs in child processes against faulty endpoints"),
                       ("fresh_venv", "builds a wheel and installs it into a fresh virtual environment"),
                       ("jobs", "runs real training jobs (zero-code, torchrun, live metrics) in child processes"),
                       ("fuzz", "generated inputs by the thousand (hypothesis)"),
                       ("hta", "runs Holistic Trace Analysis on every test trace for comparison"),
                       ("backends", "runs the Jaeger and Collector binaries of scripts/backends.sh with training jobs"),
                       ("torch_releases", "runs jobs on the oldest and newest supported torch (tests/venvs.py)"),
                       ("slow_env", "any of the above: left out of the fast loop"),
                       ("busy", "keeps every core busy on purpose (busy_cores); scripts/test.sh runs these "
                                "after the rest, in parallel workers that share out the busy loops"),
                       ("exclusive", "needs the machine to itself: busy neighbours of its own, or a job held to a "
                                     "time budget; scripts/test.sh runs these alone, last")):
        config.addinivalue_line("markers", f"{name}: {text}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        markers = list(MODULE_MARKERS.get(Path(str(item.fspath)).stem, ()))
        markers.extend(FUNCTION_MARKERS.get(getattr(item, "originalname", item.name), ()))
        for fixture in getattr(item, "fixturenames", ()):
            markers.extend(FIXTURE_MARKERS.get(fixture, ()))
        for name in markers:
            item.add_marker(name)
        if SLOW_ENV & {m.name for m in item.iter_markers()}:
            item.add_marker("slow_env")
    if _WORKERS > 1:
        # Parallel workers take the modules in this order, as each finishes one: the modules with slow
        # tests (jobs, servers, browsers) first and the quick ones last, which then fill the workers'
        # ends evenly, rather than one worker running a long module while the other has finished.
        slow_modules = {item.path for item in items if item.get_closest_marker("slow_env")}
        items.sort(key=lambda item: item.path not in slow_modules)  # stable: each module's order is kept


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _in_ci() and MUST_NOT_SKIP_IN_CI & {m.name for m in item.iter_markers()}:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where it must run: {reason}"
