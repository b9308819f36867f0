"""``spans.attributes.ATTRIBUTES`` is the real list of span attributes.

Every repository trace is exported as a user does (``otel-profiler export -o spans.jsonl``) and the
OTLP JSON lines are read as plain JSON: every attribute key on every span must be an entry of the
list, carried by that kind of span, with the entry's type. The other way round, each entry is seen
on each kind of span that carries it, where the trace has what it comes from (an EventBatch column
with values on that kind of event; for a derived entry with a condition, in at least one trace).
The docs table is the list's own output, and one new entry with a column is all a new attribute takes.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from conftest import ALL_TRACES, REPO
from cuda_tracer.loading import load_profile
from cuda_tracer.model.events import MISSING, Kind
from otel_profiler.spans import attributes
from otel_profiler.spans.attributes import AGGREGATE, ATTRIBUTES, SpanAttribute
from otel_profiler.spans.build import build_spans
from otel_profiler.spans.columns import KIND_NAMES

OTLP_VALUE = {"int": "intValue", "double": "doubleValue", "bool": "boolValue", "string": "stringValue",
              "string[]": "arrayValue"}
Seen = frozenset[tuple[str, str]]  # (attribute name, span kind: otel_profiler.kind or "aggregate")


def _spans(jsonl: Path) -> Iterator[dict[str, dict[str, object]]]:
    """The attributes of each span of an OTLP JSON-lines file, as ``{key: {"intValue": ...}}``."""
    for line in jsonl.read_text().splitlines():
        for resource_spans in json.loads(line)["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    yield {a["key"]: a["value"] for a in span.get("attributes", [])}


def _span_kind(span_attributes: dict[str, dict[str, object]]) -> str:
    if span_attributes.get("otel_profiler.aggregated", {}).get("boolValue"):
        return AGGREGATE
    return str(span_attributes["otel_profiler.kind"]["stringValue"])


@lru_cache(maxsize=None)
def exported(trace: Path, work: Path) -> tuple[Seen, frozenset[str], list[str]]:
    """``(attributes seen, span kinds present, problems)`` of one trace's exported spans."""
    from otel_profiler.cli import main

    out = work / f"{trace.name}.jsonl"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["export", "-o", str(out), str(trace)]) == 0, trace
    entries: dict[str, list[SpanAttribute]] = {}
    for entry in ATTRIBUTES:
        entries.setdefault(entry.name, []).append(entry)
    seen: set[tuple[str, str]] = set()
    kinds: set[str] = set()
    problems: list[str] = []
    for span_attributes in _spans(out):
        kind = _span_kind(span_attributes)
        kinds.add(kind)
        for key, value in span_attributes.items():
            seen.add((key, kind))
            carrying = [e for e in entries.get(key, []) if kind in e.carriers]
            if not carrying:
                problems.append(f"{key} on a {kind} span: " + ("not carried by that kind" if key in entries
                                                                else "not in ATTRIBUTES"))
            elif OTLP_VALUE[carrying[0].type] not in value:
                problems.append(f"{key} on a {kind} span is {sorted(value)}, ATTRIBUTES says {carrying[0].type}")
    out.unlink()
    return frozenset(seen), frozenset(kinds), sorted(set(problems))


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spans")


def _columns_with_values(trace: Path) -> set[tuple[str, str]]:
    """``(column, event kind name)`` where the trace's events have a value in that column."""
    found = set()
    columns = {entry.column for entry in ATTRIBUTES if entry.column}
    for rank in load_profile([str(trace)]).ranks:
        batch = rank.batch
        for column in columns:
            has = batch.columns[column] != MISSING
            found |= {(column, KIND_NAMES[k]) for k in KIND_NAMES if (has & (batch.kind == k)).any()}
    return found


@pytest.mark.parametrize("trace", ALL_TRACES, ids=lambda p: p.relative_to(REPO / "tests" / "data").as_posix())
def test_every_emitted_attribute_is_listed_and_every_listed_one_emitted(trace: Path, work: Path) -> None:
    seen, kinds, problems = exported(trace, work)
    assert not problems, f"{trace.name}: " + "; ".join(problems[:10])
    with_values = _columns_with_values(trace)
    missing = [f"{entry.name} on {kind}" for entry in ATTRIBUTES for kind in entry.carriers
               if kind in kinds and (entry.name, kind) not in seen
               and ((entry.column and (entry.column, kind) in with_values)
                    or (not entry.column and not entry.when))]
    assert not missing, f"{trace.name}: listed but never emitted: {missing}"


def test_every_conditional_attribute_is_seen_in_some_trace(work: Path) -> None:
    """A derived attribute that needs something (memory events, mangled names, a blocking call...) is
    seen on at least one repository trace."""
    names = {name for trace in ALL_TRACES for name, _ in exported(trace, work)[0]}
    conditional = {e.name for e in ATTRIBUTES if e.derive is not None and e.when}
    assert conditional and not conditional - names, sorted(conditional - names)


def test_the_docs_table_is_the_lists_own_output() -> None:
    table = subprocess.run([sys.executable, "-m", "otel_profiler.spans.attributes"], cwd=REPO, check=True,
                           capture_output=True, text=True, timeout=120).stdout
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) == len({entry.name for entry in ATTRIBUTES})
    page = (REPO / "docs" / "spans.md").read_text()
    start = page.index("<!-- generated by `python -m otel_profiler.spans.attributes`")
    generated = page[page.index("\n", start) + 1:page.index("<!-- end of generated table -->", start)]
    assert generated == table, "docs/spans.md is out of date: python scripts/gen_docs.py"


def test_a_new_kernel_attribute_from_a_column_is_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry naming a column (here ``external_id``, which no attribute uses) puts it on kernel spans."""
    trace = next(p for p in ALL_TRACES if "negative_queue_length" in str(p))
    batch = load_profile([str(trace)]).ranks[0].batch
    entry = SpanAttribute("gpu.kernel.external_id", "int", ("kernel",), "Kineto's external id", column="external_id")
    assert all(e.column != "external_id" for e in ATTRIBUTES)
    monkeypatch.setattr(attributes, "ATTRIBUTES", ATTRIBUTES + (entry,))
    table = build_spans({"run_id": "r", "rank": 0}, batch)
    column = table.attr("gpu.kernel.external_id")
    events = table.source_row >= 0
    kernel = np.zeros(len(table), bool)
    kernel[events] = batch.kind[table.source_row[events]] == Kind.KERNEL
    present = np.ones(len(table), bool) if column.present is None else column.present
    assert present.any() and not (present & ~kernel).any()
    rows = table.source_row[present]
    assert (column.values[present] == batch.external_id[rows]).all()
