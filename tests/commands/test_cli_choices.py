"""The command line's lists of choices are the registries' lists: ``--format`` of ``summary``,
``report`` and ``diff`` the renderers that implement them (``report.renderers.SUMMARY_RENDERERS`` and
``REPORT_RENDERERS``, ``report.diff_renderers.DIFF_RENDERERS``), ``--protocol`` the OTLP protocols the
sinks speak, ``users --role`` the app's roles; every option with choices of those commands is one of
these (a new one needs its registry here); and each format offered renders a real trace."""

from __future__ import annotations

import argparse
import pytest

from otel_profiler.app.auth.roles import ROLES
from otel_profiler.cli import build_parser, main
from otel_profiler.shared.otlp_target import PROTOCOLS
from otel_profiler.report.diff_renderers import DIFF_RENDERERS
from otel_profiler.report.formats import DIFF_FORMATS, FORMATS, REPORT_FORMATS, SUMMARY_FORMATS
from otel_profiler.report.renderers import RENDERERS, REPORT_RENDERERS, SUMMARY_RENDERERS

from conftest import trace

TRACE = trace("hta/trace_filter/sampled_rank-0.json.gz")
OTHER_TRACE = trace("hta/trace_filter/sampled_rank-1.json.gz")

REGISTRIES: dict[tuple[tuple[str, ...], str], tuple] = {
    (("summary",), "--format"): tuple(SUMMARY_RENDERERS),
    (("report",), "--format"): tuple(REPORT_RENDERERS),
    (("diff",), "--format"): tuple(DIFF_RENDERERS),
    (("users", "add"), "--role"): ROLES,
    (("users", "role"), "--role"): ROLES,
}
"""(subcommand path, option) -> the registry's names, for the app's and the readers' commands."""

COMMANDS = ("summary", "report", "diff", "serve", "users", "teams", "upload")
"""The commands whose every option with choices must be in ``REGISTRIES``."""


def _parser(*path: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = build_parser()
    for name in path:
        subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = subs.choices[name]
    return parser


def _choices(*path: str) -> dict[str, tuple]:
    """``{option: choices}`` of the parser reached by the subcommand names ``path``."""
    return {a.option_strings[-1]: tuple(a.choices) for a in _parser(*path)._actions
            if a.choices and a.option_strings}


def _with_choices(path: tuple[str, ...]):
    """((subcommand path, option), choices) of every option with choices under ``path``, its
    subcommands' included."""
    for option, choices in _choices(*path).items():
        yield (path, option), choices
    for action in _parser(*path)._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name in action.choices:
                yield from _with_choices(path + (name,))


def test_the_renderer_names_are_the_renderers():
    assert sorted(FORMATS) == sorted(RENDERERS)
    assert not set(SUMMARY_FORMATS) & set(REPORT_FORMATS)
    assert DIFF_FORMATS == tuple(DIFF_RENDERERS)


@pytest.mark.parametrize("key", sorted(REGISTRIES), ids=lambda key: " ".join(key[0] + (key[1],)))
def test_each_commands_choices_are_its_registry(key):
    path, option = key
    assert _choices(*path)[option] == REGISTRIES[key]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_with_choices_comes_from_a_registry(command):
    assert dict(_with_choices((command,))) == {key: names for key, names in REGISTRIES.items()
                                               if key[0][0] == command}


@pytest.mark.parametrize("command", ["export", "replay"])
def test_protocol_choices_are_the_sinks_protocols(command):
    assert _choices(command)["--protocol"] == PROTOCOLS


def test_the_app_grants_the_roles_the_command_line_offers():
    accounts = pytest.importorskip("otel_profiler.app.auth.accounts")
    assert accounts.ROLES is ROLES


@pytest.mark.parametrize("command, fmt", [("summary", f) for f in SUMMARY_FORMATS] +
                         [("report", f) for f in REPORT_FORMATS])
def test_every_format_offered_renders_a_real_trace(tmp_path, command, fmt):
    out = tmp_path / f"out.{fmt}"
    assert main([command, str(TRACE), "--format", fmt, "-o", str(out), "-j", "1"]) == 0
    assert out.stat().st_size > 100


@pytest.mark.parametrize("fmt", DIFF_FORMATS)
def test_every_diff_format_offered_compares_two_real_traces(tmp_path, fmt):
    out = tmp_path / f"diff.{fmt}"
    assert main(["diff", str(TRACE), str(OTHER_TRACE), "--format", fmt, "-o", str(out), "-j", "1"]) == 0
    assert out.stat().st_size > 100
