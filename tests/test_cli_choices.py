"""The command line's lists of choices are the registries' lists: ``--format`` of ``summary`` and
``report`` the renderers (``report.formats``, the keys of ``report.renderers.RENDERERS``), ``--protocol``
the OTLP protocols the sinks speak, ``users --role`` the app's roles; and each format offered renders
a real trace."""

from __future__ import annotations

import argparse
import pytest

from otel_profiler.cli import build_parser, main
from otel_profiler.export.sinks import PROTOCOLS
from otel_profiler.report.formats import FORMATS, REPORT_FORMATS, SUMMARY_FORMATS
from otel_profiler.report.renderers import RENDERERS

from conftest import trace

TRACE = trace("hta/trace_filter/sampled_rank-0.json.gz")


def _choices(*path: str) -> dict[str, tuple]:
    """``{option: choices}`` of the parser reached by the subcommand names ``path``."""
    parser: argparse.ArgumentParser = build_parser()
    for name in path:
        subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = subs.choices[name]
    return {a.option_strings[-1]: tuple(a.choices) for a in parser._actions if a.choices and a.option_strings}


def test_the_renderer_names_are_the_renderers():
    assert sorted(FORMATS) == sorted(RENDERERS)
    assert not set(SUMMARY_FORMATS) & set(REPORT_FORMATS)


@pytest.mark.parametrize("command, formats", [("summary", SUMMARY_FORMATS), ("report", REPORT_FORMATS)])
def test_format_choices_are_the_renderers(command, formats):
    assert _choices(command)["--format"] == formats


@pytest.mark.parametrize("command", ["export", "replay"])
def test_protocol_choices_are_the_sinks_protocols(command):
    assert _choices(command)["--protocol"] == PROTOCOLS


@pytest.mark.parametrize("action", ["add", "role"])
def test_role_choices_are_the_apps_roles(action):
    models = pytest.importorskip("otel_profiler.app.models")
    assert _choices("users", action)["--role"] == models.ROLES


@pytest.mark.parametrize("command, fmt", [("summary", f) for f in SUMMARY_FORMATS] +
                         [("report", f) for f in REPORT_FORMATS])
def test_every_format_offered_renders_a_real_trace(tmp_path, command, fmt):
    out = tmp_path / f"out.{fmt}"
    assert main([command, str(TRACE), "--format", fmt, "-o", str(out), "-j", "1"]) == 0
    assert out.stat().st_size > 100
