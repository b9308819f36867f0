"""The one environment-variable module: documented in docs/configuration.md, validated without raising."""

from __future__ import annotations

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
