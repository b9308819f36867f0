"""The one environment-variable module: documented in docs/configuration.md, validated without raising."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO
from otel_profiler import config


def test_docs_list_every_variable_exactly_as_the_module_defines_it():
    page = (REPO / "docs" / "configuration.md").read_text()
    assert config.markdown_table() in page


def test_a_bad_value_is_one_warning_naming_the_variable_and_the_default_is_kept():
    loaded = config.load({"OTEL_PROFILER_FLUSH_INTERVAL_S": "soon", "OTEL_SDK_DISABLED": "true"})
    assert len(loaded.warnings) == 1 and not loaded.ok
    assert loaded.warnings[0].startswith("OTEL_PROFILER_FLUSH_INTERVAL_S='soon':")
    assert loaded["OTEL_PROFILER_FLUSH_INTERVAL_S"] == config.VARIABLES[
        "OTEL_PROFILER_FLUSH_INTERVAL_S"].default
    assert loaded["OTEL_SDK_DISABLED"] is True


def test_secret_values_are_never_echoed():
    loaded = config.load({"OTEL_EXPORTER_OTLP_HEADERS": "authorization"})  # no '=': malformed
    assert loaded.warnings and all("authorization" not in w for w in loaded.warnings)


# ------------------------------------------------------------------------------------ bounds
def _numeric():
    return [v for v in config.VARIABLES.values() if hasattr(v.parse, "maximum")]


def test_every_numeric_setting_has_an_upper_bound_and_a_huge_value_is_one_warning():
    numeric = _numeric()
    assert len(numeric) >= 15
    for var in numeric:
        assert var.parse.maximum is not None, var.name
        loaded = config.load({var.name: "9" * 30})
        assert len(loaded.warnings) == 1 and "at most" in loaded.warnings[0], var.name
        assert loaded[var.name] == var.default
        assert config.load({var.name: str(var.parse.maximum)}).ok, var.name  # the bound itself is fine


def test_every_float_and_int_setting_is_bounded():
    """No numeric setting escapes the bounds (each one parsed by parse_int or parse_float)."""
    for var in config.VARIABLES.values():
        if isinstance(var.default, (int, float)) and not isinstance(var.default, bool):
            assert hasattr(var.parse, "maximum"), var.name


def test_the_delivery_page_lists_the_bounds_as_the_module_defines_them():
    assert config.bounds_table() in (REPO / "docs" / "delivery.md").read_text()


def test_huge_values_within_bounds_export_without_overflow(tmp_path):
    """The largest accepted queue, budget and timeout build a working exporter (no OverflowError)."""
    from otel_profiler.export.exporter import exporter_from_env

    settings = config.load({"OTEL_PROFILER_EXPORT_QUEUE": "10000", "OTEL_PROFILER_SPAN_BUDGET": "1000000",
                            "OTEL_EXPORTER_OTLP_TIMEOUT": "600000", "OTEL_PROFILER_EXPORT_RETRY_S": "86400",
                            "OTEL_PROFILER_OTLP_FILE": str(tmp_path / "spans.jsonl")})
    assert settings.ok, settings.warnings
    exporter = exporter_from_env(settings, "job")
    try:
        assert exporter.submit({"rank": 0, "run_id": "r"}, _tiny_batch())
    finally:
        counters = exporter.close(60)
    assert counters["spans_built"] > 0 and counters["batches_failed"] == 0


def _tiny_batch():
    from cuda_tracer.events import EventBatch, Kind

    return EventBatch.from_columns(["ProfilerStep#0", "work"], kind=[Kind.STEP, Kind.USER_ANNOTATION],
                                   name=[0, 1], start_ns=[1000, 1100], end_ns=[5000, 4000], rank=[0, 0],
                                   pid=[1, 1], tid=[1, 1])


# ------------------------------------------------------------------------------- endpoints
@pytest.mark.parametrize("bad", ["not a url", "http://", "ftp://collector:4317", "collector", "http://h:99999"])
def test_a_bad_endpoint_is_one_notice_and_turns_off_only_that_export(bad):
    from otel_profiler.export.sinks import resolve_target

    loaded = config.load({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": bad,
                          "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert loaded.ok  # not a reason to stop profiling
    (notice,) = loaded.notices
    assert notice.startswith("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=") and "\n" not in notice
    assert resolve_target(loaded.values) is None  # no traces sent anywhere else by surprise
    assert resolve_target(loaded.values, signal="metrics").endpoint == "http://collector:4318/v1/metrics"


@pytest.mark.parametrize("good", ["http://localhost:4318", "https://otlp.example.com/v1/traces", "collector:4317",
                                  "http://[::1]:4317", "http://user:pw@host:4318"])
def test_good_endpoints_are_accepted(good):
    assert not config.load({"OTEL_EXPORTER_OTLP_ENDPOINT": good}).notices


# ------------------------------------------------------------------------------ unknown names
def test_an_unknown_setting_name_is_one_notice_with_the_closest_name():
    loaded = config.load({"OTEL_PROFILER_STEP": "1:3", "OTEL_PROFILER_SPOOL_MAX_MIB": "5",
                          "OTEL_PROFILER_ZZZZZZZZZZZZ": "x", "OTEL_PROFILER_STEPS": "1:3"})
    assert loaded.ok
    notes = {n.split()[0]: n for n in loaded.notices}
    assert "did you mean OTEL_PROFILER_STEPS?" in notes["OTEL_PROFILER_STEP"]
    assert "did you mean OTEL_PROFILER_SPOOL_MAX_MB?" in notes["OTEL_PROFILER_SPOOL_MAX_MIB"]
    assert "did you mean" not in notes["OTEL_PROFILER_ZZZZZZZZZZZZ"]
    assert len(loaded.notices) == 3


# -------------------------------------------------------------------------- in a real job
JOB = """
from otel_profiler import annotate, step
for i in range(6):
    with annotate("work"):
        sum(range(1000))
    step()
"""


def _zero_code(tmp_path, **env):
    from otel_profiler.bootstrap import SITE_DIR

    (tmp_path / "job.py").write_text(JOB)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    environ.update(OTEL_PROFILER_ENABLED="true", PYTHONPATH=SITE_DIR, OTEL_PROFILER_SIGNAL="false",
                   OTEL_PROFILER_PROFILE_DIR=str(tmp_path / "prof"), OTEL_PROFILER_SUMMARY_AT_EXIT="false",
                   OTEL_METRICS_EXPORTER="none", OTEL_PROFILER_STEPS="off", **env)
    return subprocess.run([sys.executable, str(tmp_path / "job.py")], env=environ, capture_output=True,
                          text=True, timeout=300)


def test_a_job_with_a_bad_endpoint_and_a_typo_runs_profiled_with_one_line_each(tmp_path):
    done = _zero_code(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT="ftp://collector:4317", OTEL_PROFILER_STEP="1:3")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith("otel-profiler: warning: ") for line in lines), lines
    assert any("OTEL_EXPORTER_OTLP_ENDPOINT='ftp://collector:4317'" in line for line in lines)
    assert any("OTEL_PROFILER_STEPS?" in line for line in lines)
    assert list((tmp_path / "prof").glob("rank-0.*.events"))  # profiling ran


def test_every_warning_of_a_job_is_one_line(tmp_path):
    done = _zero_code(tmp_path, OTEL_PROFILER_FLUSH_INTERVAL_S="soon")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("otel-profiler: warning: profiling is off"), lines
    assert "OTEL_PROFILER_FLUSH_INTERVAL_S" in lines[0] and "Warning" not in lines[0]
