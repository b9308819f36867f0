"""Operator input shapes read from traces recorded with ``record_shapes``: the reader keeps the args of
the costed operators (``cuda_tracer.model.costed_operators``) and nothing else, the same with the
native scanner and the Python path, and exactly what the raw JSON holds (a plain recount)."""

from __future__ import annotations

import gzip
import json

import pytest

from conftest import trace
from cuda_tracer.loading import load_profile
from cuda_tracer.model.costed_operators import COSTED_OPERATORS
from cuda_tracer.model.events import Kind
from cuda_tracer.trace_json.schema import operator_inputs

SHAPED = ["tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
          "hta/trace_diff/control/control.json.gz",
          "kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"]


def _raw_shapes(path: str) -> list[tuple[str, int, list, list]]:
    """(name, start in µs as written, Input Dims, Input type) of every costed operator, from the JSON."""
    with gzip.open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    out = []
    for e in events:
        args = e.get("args") or {}
        dims = args.get("Input Dims", args.get("Input dims"))
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "Operator") and e.get("name") in COSTED_OPERATORS \
                and dims is not None:
            out.append((e["name"], e["ts"], dims, args.get("Input type")))
    return out


def _read_shapes(path: str) -> list[tuple[str, list, list]]:
    batch = load_profile([path]).batch()
    texts = batch.extra("shape_args")
    out = []
    for row, text in texts.items():
        assert batch.kind[row] == Kind.CPU_OP
        args = operator_inputs(text)
        assert args is not None
        out.append((batch.strings[batch.name[row]], args.dims, args.types))
    return out


@pytest.mark.parametrize("relative", SHAPED)
def test_costed_operators_keep_their_recorded_shapes(relative):
    path = str(trace(relative))
    raw = _raw_shapes(path)
    read = _read_shapes(path)
    assert raw, "the trace has shaped operators to read"
    key = lambda r: json.dumps(r, sort_keys=True)  # noqa: E731
    assert sorted(map(key, read)) == sorted(map(key, [(n, d, t) for n, _, d, t in raw]))


@pytest.mark.parametrize("relative", SHAPED[:2])
def test_the_scanner_and_the_python_path_keep_the_same_shapes(relative, monkeypatch):
    path = str(trace(relative))
    found = {}
    for pure in ("0", "1"):
        monkeypatch.setenv("OTEL_PROFILER_PURE_PYTHON", pure)
        found[pure] = sorted(map(json.dumps, _read_shapes(path)))
    assert found["0"] == found["1"] and found["0"]


def test_a_trace_without_shapes_keeps_none():
    batch = load_profile([str(trace("hta/df_index_resolver/df_index_resolver.json.gz"))]).batch()
    assert batch.extra("shape_args") == {}


def test_args_that_are_not_an_object_read_as_none():
    assert operator_inputs("[1, 2]") is None
    assert operator_inputs("{not json") is None
    legacy = operator_inputs('{"Input dims": [[2, 3]], "Input type": ["float"]}')
    assert legacy is not None and legacy.dims == [[2, 3]] and legacy.types == ["float"]


def test_the_reader_keeps_the_shapes_of_exactly_the_operators_with_a_formula():
    from otel_profiler.analysis.flops.formulas import COUNTED

    assert COSTED_OPERATORS == COUNTED
