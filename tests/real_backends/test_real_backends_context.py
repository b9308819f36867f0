"""Joined traces through the real Collector chain into a real Jaeger (docs/trace-context.md), with the
chain of ``test_real_backends_e2e`` (node agent -> gateway -> Jaeger v2):

- a pipeline script makes its own span with the OpenTelemetry SDK (exported to the Collector) and starts
  a two-rank zero-code job with ``otel-profiler run -- torchrun`` and the span's ``TRACEPARENT``: in
  Jaeger the pipeline's trace holds one run span per rank, children of the pipeline span, and every
  step trace links to the run span of its rank;
- a zero-code job whose own SDK span is current as each step begins: each step root links to that
  span, and with ``OTEL_PROFILER_MARK_USER_SPANS`` the span has the event ``otel_profiler.step``
  naming the step's trace.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from real_backends import job_environment, poll, replay_spool
from test_real_backends_e2e import Chain, chain  # noqa: F401  (the module's chain fixture)

pytest.importorskip("torch")
pytestmark = pytest.mark.backends  # the group of the other real-backend modules (left out of the fast loop)
STEPS = 5
PIPELINE = """
import os, subprocess, sys
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

provider = TracerProvider(resource=Resource({"service.name": "pipeline"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[1] + "/v1/traces")))
with provider.get_tracer("pipeline").start_as_current_span("pipeline.train") as span:
    carrier = {}
    TraceContextTextMapPropagator().inject(carrier)
    env = dict(os.environ, TRACEPARENT=carrier["traceparent"])
    code = subprocess.call([sys.executable, "-m", "otel_profiler", "run", "--no-summary", "--output-dir", sys.argv[3], "--",
                            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                            sys.argv[2]], env=env)
    context = span.get_span_context()
    print(f"{context.trace_id:032x} {context.span_id:016x}")
provider.shutdown()
sys.exit(code)
"""
RANK_JOB = f"""
import torch
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range({STEPS + 1}):
    model(torch.randn(8, 16)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
"""
USER_JOB = f"""
import sys, torch
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
import otel_profiler

provider = TracerProvider(resource=Resource({{"service.name": "user-job"}}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[1] + "/v1/traces")))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("user-job")
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range({STEPS}):
    with tracer.start_as_current_span("user.step"), otel_profiler.step_context(i):
        model(torch.randn(8, 16)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
provider.shutdown()
"""


def _run(script: Path, args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True,
                          timeout=600, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _steps_recorded(folder: Path) -> dict[int, int]:
    return {json.loads(p.read_text())["rank"]: json.loads(p.read_text())["steps"] for p in folder.glob("rank-*.json")}


def _links(span: dict) -> set[tuple[str, str]]:
    return {(r["traceID"], r["spanID"]) for r in span["references"] if r["refType"] == "FOLLOWS_FROM"}


def test_the_pipelines_trace_holds_every_ranks_run_span_and_steps_link_to_it(chain, tmp_path):  # noqa: F811
    service, run_id = "context-ranks", "context-run"
    (tmp_path / "rank_job.py").write_text(RANK_JOB)
    (tmp_path / "pipeline.py").write_text(PIPELINE)
    env = job_environment(tmp_path, chain.agent.endpoint(), run_id, service=service)
    env.pop("OTEL_PROFILER_ENABLED")  # the pipeline is not profiled; `otel-profiler run` turns the job on
    done = _run(tmp_path / "pipeline.py", [chain.agent.endpoint(), str(tmp_path / "rank_job.py"),
                                                    str(tmp_path / "prof")], env, tmp_path)
    pipeline_trace, pipeline_span = done.stdout.split()[-2:]
    replay_spool(tmp_path, env)
    recorded = _steps_recorded(tmp_path / "prof")
    assert set(recorded) == {0, 1} and all(recorded.values()), recorded

    def joined():
        found = chain.jaeger.trace(pipeline_trace)
        runs = [s for s in (found or {}).get("spans", []) if s["operationName"] == "otel_profiler.run"]
        return found if len(runs) == 2 else None

    found = poll(joined, "the pipeline's trace with two run spans", log=chain.jaeger.log)
    names = {s["spanID"]: s["operationName"] for s in found["spans"]}
    assert names[pipeline_span] == "pipeline.train"
    run_of_rank = {}
    for span in found["spans"]:
        if span["operationName"] == "otel_profiler.run":
            assert {(r["refType"], r["spanID"]) for r in span["references"]} == {("CHILD_OF", pipeline_span)}
            tags = {t["key"]: t["value"] for t in span["tags"]}
            assert tags["otel_profiler.run.id"] == run_id
            run_of_rank[int(tags["otel_profiler.rank"])] = span["spanID"]
    assert set(run_of_rank) == {0, 1}

    def all_steps():
        steps = chain.jaeger.traces(service, operation="train.step")
        return steps if len(steps) == sum(recorded.values()) else None

    steps = poll(all_steps, "every step trace of both ranks", log=chain.jaeger.log)
    for step in steps:
        root = next(s for s in step["spans"] if s["operationName"] == "train.step")
        rank = int(step["traceID"][24:], 16)
        assert _links(root) == {(pipeline_trace, run_of_rank[rank])}, step["traceID"]


def test_the_jobs_own_span_and_its_step_find_each_other(chain, tmp_path):  # noqa: F811
    service, run_id = "context-user", "context-user-run"
    (tmp_path / "user_job.py").write_text(USER_JOB)
    env = job_environment(tmp_path, chain.agent.endpoint(), run_id, service=service,
                          OTEL_PROFILER_MARK_USER_SPANS="true")
    _run(tmp_path / "user_job.py", [chain.agent.endpoint()], env, tmp_path)
    replay_spool(tmp_path, env)

    def everything():
        users = chain.jaeger.traces("user-job", operation="user.step")
        steps = chain.jaeger.traces(service, operation="train.step")
        return (users, steps) if len(users) == STEPS and len(steps) == STEPS else None

    users, steps = poll(everything, f"{STEPS} user spans and {STEPS} step traces", log=chain.jaeger.log)
    marked = {}
    for t in users:
        span = t["spans"][0]
        fields = [{f["key"]: f["value"] for f in log["fields"]} for log in span["logs"]]
        events = [f for f in fields if f.get("event") == "otel_profiler.step"]
        assert len(events) == 1, fields
        marked[events[0]["otel_profiler.trace_id"]] = (t["traceID"], span["spanID"], events[0]["otel_profiler.step"])
    by_step = {}
    for t in steps:
        root = next(s for s in t["spans"] if s["operationName"] == "train.step")
        number = next(tag["value"] for tag in root["tags"] if tag["key"] == "otel_profiler.step")
        by_step[t["traceID"]] = (_links(root), number)
    assert set(marked) == set(by_step)  # the user span names its step's trace ...
    for trace_id, (user_trace, user_span, number) in marked.items():
        links, step_number = by_step[trace_id]
        assert links == {(user_trace, user_span)} and step_number == number  # ... and the step links back
