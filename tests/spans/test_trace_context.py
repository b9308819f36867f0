"""Joined traces (docs/trace-context.md): TRACEPARENT/TRACESTATE parsing, the run span and the links of
the encoded spans (protobuf and JSON), the link to the job's own span with a real SDK TracerProvider and
its in-memory exporter, and real zero-code jobs: a malformed TRACEPARENT costs one warning line, and a
job that never imported OpenTelemetry still has not at its end."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from conftest import trace
from cuda_tracer.model.events import EventBatch
from cuda_tracer.loading import load_profile
from otel_profiler.export.otlp import encode_request, json_spans
from otel_profiler.live.trace_context import UserSpans, run_event
from otel_profiler.spans.build import build_spans
from otel_profiler.spans.context import RUN_SPAN, TraceParent, parse_traceparent, run_span_id
from otel_profiler.shared.ids import batch_steps, trace_id
from otel_profiler.spans.options import SpanOptions

TRACE_WITH_STEPS = "hta/negative_queue_length_values_check/rank0.json.gz"
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
REPO = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=None)
def rank_of(path: str):
    return load_profile([str(trace(path))]).ranks[0]


# ------------------------------------------------------------------------------------------- parsing
def test_a_valid_traceparent_and_tracestate_parse():
    parent, problems = parse_traceparent(PARENT, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
    assert problems == []
    assert parent == TraceParent("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", 1,
                                 "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
    assert parse_traceparent("", "congo=1") == (None, [])


@pytest.mark.parametrize("value, why", [
    ("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "version"),
    ("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "version"),
    ("00-00000000000000000000000000000000-b7ad6b7169203331-01", "trace id is all zeros"),
    ("00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", "span id is all zeros"),
    ("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", "not a W3C traceparent"),
    ("00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01", "not a W3C traceparent"),
    ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1", "not a W3C traceparent"),
    ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra", "not a W3C traceparent"),
    ("hello\x1b[31m", "not a W3C traceparent"),
])
def test_a_malformed_traceparent_is_one_problem_naming_the_variable(value, why):
    parent, problems = parse_traceparent(value)
    assert parent is None and len(problems) == 1
    assert problems[0].startswith("TRACEPARENT ") and why in problems[0]
    assert "\x1b" not in problems[0]


def test_a_malformed_tracestate_is_dropped_and_the_context_kept():
    parent, problems = parse_traceparent(PARENT, "no equals sign here")
    assert parent is not None and parent.state == ""
    assert len(problems) == 1 and problems[0].startswith("TRACESTATE ")
    assert parse_traceparent(PARENT, "a=" + "x" * 600)[1][0].startswith("TRACESTATE ")


# ------------------------------------------------------------------------------------ encoded spans
def _with_context(meta: dict, batch: EventBatch, state: str = "congo=t61rcWkgMzE", run: bool = True):
    parent, _ = parse_traceparent(PARENT, state)
    meta = dict(meta, trace_parent={**parent.as_meta(), "since_ns": 7})
    if run:
        batch = EventBatch.concat([batch, run_event(int(batch.start_ns.min()) - 1000, int(batch.end_ns.max()) + 1000,
                                                    0)])
    return parent, meta, batch


def _decoded(table) -> list:
    request = ExportTraceServiceRequest.FromString(encode_request(table))
    return [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]


def test_the_run_span_is_a_child_of_the_parent_and_every_root_links_to_it():
    r = rank_of(TRACE_WITH_STEPS)
    parent, meta, batch = _with_context(r.meta, r.batch)
    opt = SpanOptions(budget=300, run_id="run-ctx")
    table = build_spans(meta, batch, opt)
    spans = _decoded(table)
    run = [s for s in spans if s.name == RUN_SPAN]
    assert len(run) == 1
    run = run[0]
    assert run.trace_id.hex() == parent.trace_id and run.parent_span_id.hex() == parent.span_id
    assert run.trace_state == "congo=t61rcWkgMzE"
    assert int.from_bytes(run.span_id, "big") == run_span_id("run-ctx", 0, parent, 7)
    assert (run.start_time_unix_nano, run.end_time_unix_nano) == (int(batch.start_ns.min()), int(batch.end_ns.max()))
    attrs = {a.key: a.value for a in run.attributes}
    assert attrs["otel_profiler.run.id"].string_value == "run-ctx" and attrs["otel_profiler.rank"].int_value == 0
    roots = [s for s in spans if not s.parent_span_id]
    steps = [s for s in roots if s.name == "train.step"]
    assert len(steps) == len(batch_steps(r.batch)) > 0
    for root in roots:
        assert [(link.trace_id.hex(), link.span_id) for link in root.links] == [(parent.trace_id, run.span_id)]
    # Nothing else changed: every other span is the one built without a context.
    plain = {s.span_id: s for s in _decoded(build_spans(r.meta, r.batch, opt))}
    others = [s for s in spans if s.parent_span_id and s.name != RUN_SPAN]
    assert len(others) == len(plain) - len(roots)
    for s in others:
        assert s == plain[s.span_id]


def test_the_json_lines_carry_the_same_links_and_trace_state():
    r = rank_of(TRACE_WITH_STEPS)
    parent, meta, batch = _with_context(r.meta, r.batch)
    table = build_spans(meta, batch, SpanOptions(budget=300, run_id="run-ctx"))
    by_json = {s["spanId"]: s for s in json_spans(table)}
    for s in _decoded(table):
        j = by_json[s.span_id.hex()]
        assert [(link["traceId"], link["spanId"]) for link in j.get("links", [])] == \
            [(link.trace_id.hex(), link.span_id.hex()) for link in s.links]
        assert j.get("traceState", "") == s.trace_state


def test_without_the_run_event_roots_link_but_no_run_span_is_made():
    """Every part before the last: roots link to the run span that the last part brings."""
    r = rank_of(TRACE_WITH_STEPS)
    parent, meta, batch = _with_context(r.meta, r.batch, run=False)
    spans = _decoded(build_spans(meta, batch, SpanOptions(budget=300, run_id="run-ctx")))
    assert not [s for s in spans if s.name == RUN_SPAN]
    roots = [s for s in spans if not s.parent_span_id]
    assert roots and all(len(s.links) == 1 and s.links[0].trace_id.hex() == parent.trace_id for s in roots)


def test_a_part_with_only_the_run_event_makes_only_the_run_span():
    parent, _ = parse_traceparent(PARENT)
    ids = set()
    for since in (1, 2):  # two sessions of one process: two run spans
        meta = {"run_id": "run-ctx", "rank": 3, "trace_parent": {**parent.as_meta(), "since_ns": since}}
        spans = _decoded(build_spans(meta, run_event(1_000, 9_000, 3), SpanOptions()))
        assert [(s.name, s.parent_span_id.hex(), s.trace_state) for s in spans] == [(RUN_SPAN, parent.span_id, "")]
        assert int.from_bytes(spans[0].span_id, "big") == run_span_id("run-ctx", 3, parent, since)
        ids.add(spans[0].span_id)
    assert len(ids) == 2


# ---------------------------------------------------------------------------------- the user's spans
@pytest.fixture
def sdk_tracer():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("job"), exporter
    provider.shutdown()


@pytest.mark.parametrize("mark", [True, False])
def test_step_roots_link_to_the_users_span_and_the_span_is_marked_when_asked(sdk_tracer, mark):
    tracer, exporter = sdk_tracer
    r = rank_of(TRACE_WITH_STEPS)
    numbers = [n for n, _, _ in batch_steps(r.batch)]
    user = UserSpans(mark=mark, run_id="run-user")
    ids = {}
    for n in numbers:
        with tracer.start_as_current_span(f"user step {n}") as span:
            user.step_began(n, rank=0)
            context = span.get_span_context()
            ids[n] = (f"{context.trace_id:032x}", f"{context.span_id:016x}")
    user.step_began(10_000, rank=0)  # no span current: nothing remembered
    links = user.take(r.batch)
    assert links == {n: list(v) for n, v in ids.items()} and user.links == {}
    table = build_spans(dict(r.meta, user_spans=links), r.batch, SpanOptions(run_id="run-user"))
    for s in _decoded(table):
        if s.name == "train.step":
            step = next(a.value.int_value for a in s.attributes if a.key == "otel_profiler.step")
            assert [(link.trace_id.hex(), link.span_id.hex()) for link in s.links] == [ids[step]]
            hi, lo = trace_id("run-user", 0, "step", step)
            assert s.trace_id.hex() == f"{hi:016x}{lo:016x}"
    finished = {s.name: s for s in exporter.get_finished_spans()}
    for n in numbers:
        events = [(e.name, dict(e.attributes)) for e in finished[f"user step {n}"].events]
        hi, lo = trace_id("run-user", 0, "step", n)
        expected = [("otel_profiler.step", {"otel_profiler.step": n, "otel_profiler.trace_id": f"{hi:016x}{lo:016x}"})]
        assert events == (expected if mark else [])


def test_a_failing_opentelemetry_api_never_raises_and_warns_once(monkeypatch, recwarn):
    class Broken:
        def get_current_span(self):
            raise RuntimeError("no context here")

    monkeypatch.setitem(sys.modules, "opentelemetry.trace", Broken())
    user = UserSpans(mark=True, run_id="r")
    for n in range(3):
        user.step_began(n, 0)
    said = [str(w.message) for w in recwarn if "OpenTelemetry spans are not linked" in str(w.message)]
    assert len(said) == 1 and user.off and user.links == {}


# ------------------------------------------------------------------------------------- real jobs
JOB = """
import sys, torch
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(5):
    model(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad()
print("opentelemetry imported:", any(m.startswith("opentelemetry") for m in sys.modules))
"""


def _zero_code_job(tmp_path: Path, **extra: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    from fault_kit import job_env

    script = tmp_path / "job.py"
    script.write_text(JOB)
    spans_file = tmp_path / "spans.jsonl"
    env = job_env(tmp_path / "prof", OTEL_PROFILER_OTLP_FILE=str(spans_file), **extra)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    spans = [s for line in spans_file.read_text().splitlines() if line
             for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    return done, spans


@pytest.mark.jobs
def test_a_malformed_traceparent_costs_one_warning_and_changes_nothing_else(tmp_path):
    done, spans = _zero_code_job(tmp_path, TRACEPARENT="00-not-a-context-01")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "opentelemetry imported: False" in done.stdout
    lines = [line for line in done.stderr.splitlines() if "TRACEPARENT" in line]
    assert len(lines) == 1 and "'00-not-a-context-01'" in lines[0], done.stderr
    assert spans and not [s for s in spans if s["name"] == RUN_SPAN or s.get("links", []) and
                          s["links"][0]["traceId"] != s["traceId"]]


@pytest.mark.jobs
def test_a_valid_traceparent_gives_the_job_its_run_span(tmp_path):
    done, spans = _zero_code_job(tmp_path, TRACEPARENT=PARENT)
    assert done.returncode == 0 and "TRACEPARENT" not in done.stderr, done.stderr[-3000:]
    assert "opentelemetry imported: False" in done.stdout  # the API is never imported for the job
    run = [s for s in spans if s["name"] == RUN_SPAN]
    assert len(run) == 1 and run[0]["parentSpanId"] == PARENT.split("-")[2]
    steps = [s for s in spans if s["name"] == "train.step"]
    assert steps and all({"traceId": PARENT.split("-")[1], "spanId": run[0]["spanId"]} in s["links"] for s in steps)
    assert int(run[0]["startTimeUnixNano"]) <= min(int(s["startTimeUnixNano"]) for s in steps)
    assert int(run[0]["endTimeUnixNano"]) >= max(int(s["endTimeUnixNano"]) for s in steps)


def test_otel_profiler_run_hands_the_context_to_every_rank():
    """``run`` builds the ranks' environment from its own: the context is in it, unchanged."""
    from otel_profiler.commands.run import child_environment

    args = argparse.Namespace(output_dir="", steps=None, every=None, duration=None, cpu_ops=False,
                              trigger_port=None)
    base = {**os.environ, "TRACEPARENT": PARENT, "TRACESTATE": "congo=t61rcWkgMzE"}
    env, _ = child_environment(args, base)
    assert (env["TRACEPARENT"], env["TRACESTATE"]) == (PARENT, "congo=t61rcWkgMzE")
