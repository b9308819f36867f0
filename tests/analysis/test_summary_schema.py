"""The summary documents the code builds have the shape ``analysis.summary_schema`` declares: every
key of each ``TypedDict`` that must be there is, no other key is, and each value has its declared
type, down to the rows; for every repository trace, for a two-rank folder merged by the cluster's
reduce step, and with a live run's metadata. The type checker reads the declarations; this reads the
dicts, built key by key where it cannot see them."""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

import pytest

from conftest import ALL_TRACES, SHARED_TRACES, trace
from cuda_tracer.loading import load_profile
from otel_profiler.analysis.document import SummaryDocument
from otel_profiler.analysis.summary_schema import Summary
from otel_profiler.cluster.merge import merge
from otel_profiler.cluster.partial import read_partials

TWO_RANKS = "hta/trace_filter"


def mismatches(value: Any, tp: Any, path: str = "summary") -> list[str]:
    """Where ``value`` departs from the type ``tp`` (empty: it has that shape)."""
    if tp is Any:
        return []
    if is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__}, not an object"]
        hints = get_type_hints(tp)
        out = [f"{path}.{k}: missing" for k in sorted(tp.__required_keys__ - set(value))]
        out += [f"{path}.{k}: not in {tp.__name__}" for k in value if k not in hints]
        for k, v in value.items():
            if k in hints:
                out += mismatches(v, hints[k], f"{path}.{k}")
        return out
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        found = [mismatches(value, arg, path) for arg in args]
        return [] if any(not f for f in found) else min(found, key=len)
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: {type(value).__name__}, not a list"]
        return [m for i, v in enumerate(value) for m in mismatches(v, args[0], f"{path}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__}, not an object"]
        return [m for k, v in value.items()
                for m in ([] if isinstance(k, str) else [f"{path}: key {k!r}"]) + mismatches(v, args[1], f"{path}[{k}]")]
    allowed = {float: (int, float), int: (int,), str: (str,), bool: (bool,), type(None): (type(None),)}[tp]
    if not isinstance(value, allowed) or (tp in (int, float) and isinstance(value, bool)):
        return [f"{path}: {value!r} is no {tp.__name__}"]
    return []


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.relative_to(SHARED_TRACES).as_posix())
def test_the_summary_of_each_trace_has_the_declared_shape(path):
    summary = SummaryDocument(load_profile([str(path)])).summary
    assert mismatches(summary, Summary) == []


def test_a_merged_two_rank_summary_has_the_declared_shape():
    files = sorted(trace(TWO_RANKS).glob("*.json.gz"))
    summary = merge([p for f in files for p in read_partials(str(f))], [str(f) for f in files])
    assert "ranks" in summary
    assert mismatches({**summary, "ranks": dict(summary["ranks"].items())}, Summary) == []


def test_a_live_runs_metadata_keeps_the_declared_shape():
    profile = load_profile([str(trace(TWO_RANKS))])
    for r in profile.ranks:
        r.meta.update(step_source="step()", windows=[{"first_step": 1, "last_step": 2, "reason": "range",
                                                      "captured": True}],
                      compute={"host": "h", "os": "Linux", "cpu_model": None, "cpu_cores": {"logical": 8, "physical": 4},
                               "memory_bytes": 1 << 34, "gpus": [], "driver": None, "versions": {"python": "3.11.7"},
                               "instance_type": None},
                      cpu_samples={"t": [1.0, 2.0, 3.0], "system_pct": [50.0, 60.0, 70.0],
                                   "process_pct": [10.0, 20.0, 30.0], "job_cores": [0.5, 0.5, 0.5], "cores": 4,
                                   "interval_s": 1.0})
    summary = SummaryDocument(profile).summary
    assert summary["cpu"] and summary["steps"]["windows"] and summary["compute"][0]["source"] == "live"
    assert mismatches(summary, Summary) == []


def test_the_check_finds_a_missing_key_an_unknown_one_and_a_wrong_type():
    summary = SummaryDocument(load_profile([str(ALL_TRACES[0])])).summary
    broken = {**summary, "extra": 1, "kernels": {**summary["kernels"], "count": "many"}}
    del broken["notes"]
    assert sorted(mismatches(broken, Summary)) == ["summary.extra: not in Summary",
                                                   "summary.kernels.count: 'many' is no int",
                                                   "summary.notes: missing"]
