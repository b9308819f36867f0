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
    assert loaded.flush_interval_s == config.VARIABLES[
        "OTEL_PROFILER_FLUSH_INTERVAL_S"].default
    assert loaded.otel_sdk_disabled is True


def test_secret_values_are_never_echoed():
    loaded = config.load({"OTEL_EXPORTER_OTLP_HEADERS": "authorization"})  # no '=': malformed
    assert loaded.warnings and all("authorization" not in w for w in loaded.warnings)


# ------------------------------------------------------------------------------------ bounds
def _numeric():
    return [v for v in config.VARIABLES.values() if hasattr(v.parse, "maximum")]


def test_every_numeric_setting_has_an_upper_bound_and_a_huge_value_keeps_the_default():
    numeric = _numeric()
    assert len(numeric) >= 15
    for var in numeric:
        assert var.parse.maximum is not None, var.name
        loaded = config.load({var.name: "9" * 30})
        assert loaded.ok and not loaded.warnings, var.name  # profiling goes on
        (notice,) = loaded.notices
        assert "at most" in notice and notice.endswith("is kept"), (var.name, notice)
        assert loaded.values[var.name] == var.default
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
    from otel_profiler.export.exporter import exporter_from_settings

    settings = config.load({"OTEL_PROFILER_EXPORT_QUEUE": "10000", "OTEL_PROFILER_SPAN_BUDGET": "1000000",
                            "OTEL_EXPORTER_OTLP_TIMEOUT": "600000", "OTEL_PROFILER_EXPORT_RETRY_S": "86400",
                            "OTEL_PROFILER_OTLP_FILE": str(tmp_path / "spans.jsonl")})
    assert settings.ok, settings.warnings
    exporter = exporter_from_settings(settings, "job")
    try:
        assert exporter.submit({"rank": 0, "run_id": "r"}, _tiny_batch())
    finally:
        counters = exporter.close(60)
    assert counters["spans_built"] > 0 and counters["batches_failed"] == 0


def _tiny_batch():
    from cuda_tracer.model.events import EventBatch, Kind

    return EventBatch.from_columns(["ProfilerStep#0", "work"], kind=[Kind.STEP, Kind.USER_ANNOTATION],
                                   name=[0, 1], start_ns=[1000, 1100], end_ns=[5000, 4000], rank=[0, 0],
                                   pid=[1, 1], tid=[1, 1])


# ------------------------------------------------------------------------------- endpoints
@pytest.mark.parametrize("bad", ["not a url", "http://", "ftp://collector:4317", "collector", "http://h:99999"])
def test_a_bad_endpoint_is_one_notice_and_turns_off_only_that_export(bad):
    from otel_profiler.shared.otlp_target import resolve_target

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


def _zero_code(tmp_path, job: str = JOB, **env):
    """Run ``job`` profiled zero-code (no capture window unless ``env`` sets OTEL_PROFILER_STEPS)."""
    from otel_profiler.bootstrap import SITE_DIR

    (tmp_path / "job.py").write_text(job)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    environ.update(OTEL_PROFILER_ENABLED="true", PYTHONPATH=SITE_DIR, OTEL_PROFILER_SIGNAL="false",
                   OTEL_PROFILER_PROFILE_DIR=str(tmp_path / "prof"), OTEL_PROFILER_SUMMARY_AT_EXIT="false",
                   OTEL_METRICS_EXPORTER="none", OTEL_PROFILER_STEPS="off")
    environ.update(env)
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


# ------------------------------------------------------------------ out of range: the default kept
@pytest.mark.parametrize("name, value, expected", [
    ("OTEL_PROFILER_WINDOW_STEPS", "0", "must be at least 1; the default 5 is kept"),
    ("OTEL_PROFILER_SLOW_STEP_FACTOR", "0.0001", "must be 0 (off) or more than 1; the default 3 is kept"),
    ("OTEL_PROFILER_SLOW_STEP_FACTOR", "1", "must be 0 (off) or more than 1; the default 3 is kept"),
    ("OTEL_PROFILER_SPOOL_MAX_MB", "-5", "must be at least 0; the default 1024 is kept"),
])
def test_a_value_out_of_range_keeps_the_default_with_one_notice(name, value, expected):
    loaded = config.load({name: value})
    assert loaded.ok and not loaded.warnings  # profiling goes on
    assert loaded.notices == (f"{name}={value!r}: {expected}",)
    assert loaded.values[name] == config.VARIABLES[name].default


def test_the_slow_step_factor_is_off_or_more_than_1():
    assert config.load({"OTEL_PROFILER_SLOW_STEP_FACTOR": "0"}).slow_step_factor == 0
    assert config.load({"OTEL_PROFILER_SLOW_STEP_FACTOR": "1.5"}).slow_step_factor == 1.5
    assert not config.load({"OTEL_PROFILER_SLOW_STEP_FACTOR": "fast"}).ok  # unreadable: still off


@pytest.mark.parametrize("env, name, off, line", [
    ({"OTEL_PROFILER_TRIGGER_PORT": "65535", "LOCAL_RANK": "3"}, "OTEL_PROFILER_TRIGGER_PORT", 0,
     "OTEL_PROFILER_TRIGGER_PORT=65535 plus local rank 3 is 65538, not a port (1-65535); the trigger port is off"),
    ({"OTEL_PROFILER_PROMETHEUS_PORT": "65000", "SLURM_LOCALID": "600"}, "OTEL_PROFILER_PROMETHEUS_PORT", 0,
     "OTEL_PROFILER_PROMETHEUS_PORT=65000 plus local rank 600 is 65600, not a port (1-65535); "
     "the /metrics endpoint is off"),
    ({"OTEL_METRICS_EXPORTER": "prometheus,console", "LOCAL_RANK": "60000"}, "OTEL_METRICS_EXPORTER",
     ("console",), "OTEL_EXPORTER_PROMETHEUS_PORT=9464 plus local rank 60000 is 69464, not a port (1-65535); "
     "the prometheus metrics exporter is off"),
])
def test_a_port_past_65535_with_the_local_rank_turns_that_feature_off(env, name, off, line):
    loaded = config.load(env)
    assert loaded.ok and loaded.notices == (line,)
    assert loaded.values[name] == off
    assert not config.load({**env, "LOCAL_RANK": "0", "SLURM_LOCALID": "0"}).notices  # rank 0: in range


def test_a_job_with_out_of_range_settings_and_ports_runs_profiled_with_one_line_each(tmp_path):
    """Out-of-range values and ports past 65535 with the local rank: the job runs profiled (the
    defaults kept, those features off), one line for each, no OverflowError."""
    done = _zero_code(tmp_path, LOCAL_RANK="3", OTEL_PROFILER_TRIGGER_PORT="65535",
                      OTEL_PROFILER_PROMETHEUS_PORT="65534", OTEL_PROFILER_SLOW_STEP_FACTOR="0.0001",
                      OTEL_PROFILER_WINDOW_STEPS="0")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 4 and all(line.startswith("otel-profiler: warning: ") for line in lines), lines
    for said in ("OTEL_PROFILER_TRIGGER_PORT=65535 plus local rank 3", "OTEL_PROFILER_PROMETHEUS_PORT=65534 plus",
                 "OTEL_PROFILER_SLOW_STEP_FACTOR='0.0001'", "OTEL_PROFILER_WINDOW_STEPS='0'"):
        assert any(said in line for line in lines), (said, lines)
    assert list((tmp_path / "prof").glob("rank-*.events"))  # profiling ran


# ------------------------------------------------------------------- the typed settings object
def test_every_variable_is_one_typed_field_named_by_the_rule():
    """One field per variable, named as ``attribute_name`` says, read by attribute or (older
    callers) by the variable's name, with the same value."""
    from dataclasses import fields

    named = [f.name for f in fields(config.Settings) if "variable" in f.metadata]
    assert len(named) == len(set(named)) == len(config.VARIABLES)
    assert [config.attribute_name(name) for name in config.VARIABLES] == named
    loaded = config.load({"OTEL_PROFILER_SPAN_BUDGET": "300", "OTEL_SERVICE_NAME": "trainer",
                          "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces",
                          "OTEL_PROFILER_STEPS": "off"})
    assert (loaded.span_budget, loaded.otel_service_name, loaded.steps) == (300, "trainer", None)
    assert loaded.otel_exporter_otlp_traces_endpoint == "http://collector:4318/v1/traces"
    for name in config.VARIABLES:
        assert getattr(loaded, config.attribute_name(name)) is loaded.values[name]


def _conforms(value, hint) -> bool:
    import types
    import typing
    from collections.abc import Mapping

    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is tuple:
        return isinstance(value, tuple) and all(isinstance(x, str) for x in value)
    if origin is Mapping or hint is Mapping:
        return isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in value.items())
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


@pytest.mark.parametrize("env", [
    {},
    {"OTEL_PROFILER_STEPS": "off", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
     "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "5", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "a=b",
     "OTEL_PROFILER_ACTIVITIES": "cpu_op", "OTEL_TRACES_EXPORTER": "console,zipkin",
     "OTEL_EXPORTER_OTLP_TRACES_INSECURE": "true", "OTEL_PROFILER_SLOW_STEP_FACTOR": "0"},
    {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://x", "OTEL_PROFILER_WINDOW_STEPS": "0",
     "OTEL_PROFILER_SPAN_WINDOW_S": "2", "OTEL_RESOURCE_ATTRIBUTES": "service.name=job,team=ml"},
], ids=["defaults", "set", "out-of-range"])
def test_each_field_holds_a_value_of_its_declared_type(env):
    """What ``load`` puts in each field (parsed, default, or the value that turns a feature off)
    is of the type the field declares, so the type checker's view of the settings holds."""
    import typing

    loaded = config.load(env)
    hints = typing.get_type_hints(config.Settings)
    for name in config.VARIABLES:
        attribute = config.attribute_name(name)
        assert _conforms(getattr(loaded, attribute), hints[attribute]), (name, getattr(loaded, attribute))
    assert _conforms(loaded.traces_target, hints["traces_target"])


def test_settings_cannot_be_changed():
    import dataclasses

    loaded = config.load({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.span_budget = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        loaded.values["OTEL_PROFILER_SPAN_BUDGET"] = 5  # type: ignore[index]


@pytest.mark.parametrize("env, expected", [
    ({"OTEL_SERVICE_NAME": "trainer", "OTEL_RESOURCE_ATTRIBUTES": "service.name=other"}, "trainer"),
    ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attributes,team=ml"}, "from-attributes"),
    ({}, "train"),
])
def test_the_settings_the_live_resource_and_the_spans_name_the_service_alike(env, expected, monkeypatch):
    """One rule (``shared.service_name``): OTEL_SERVICE_NAME, then service.name in
    OTEL_RESOURCE_ATTRIBUTES, then the script's name."""
    from otel_profiler.live.resource import attributes
    from otel_profiler.spans.attributes import resource_attributes
    from otel_profiler.spans.options import options_from_settings

    monkeypatch.setattr(sys, "argv", ["/jobs/train.py"])
    settings = config.load(env)
    live = attributes(settings, env={})
    spans = resource_attributes({}, options_from_settings(settings, settings.service_name), "run", 0)
    assert settings.service_name == live["service.name"] == spans["service.name"] == expected
