"""Training jobs through the shipped Collector configs into a real Jaeger, read back through Jaeger's
query API: job --OTLP--> node agent (``otel-collector-node.yaml``) --> gateway (``otel-collector.yaml``)
--> Jaeger v2, all real processes on 127.0.0.1 with default settings.

One chain serves the module. Two zero-code jobs of one service (two run ids, two users) run once; the
tests check that the service is listed, that there is one trace per profiled step, that every trace has
exactly the spans that ``otel-profiler export`` makes of the profile folder (after the span budget),
that parents and span links resolve inside the trace, that searches by tag find exactly the right
traces, and that the step-time histogram's exemplar (scraped from the gateway by a real Prometheus)
names a trace Jaeger returns. A real GPU trace sent with ``otel-profiler export`` gives span links and
``otel_profiler.top_operator``; a two-rank ``torchrun`` job (gloo) gives the cross-rank trace ids of
docs/spans.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import trace
from fault_kit import run_job
from real_backends import (Gateway, Jaeger, NodeAgent, exported, job_environment, poll, replay_spool, roots, spans_by_trace,
                           step_traces, wait_for_traces, write_stack)

pytest.importorskip("torch")
SERVICE = "e2e-trainer"
GPU_TRACE = "hta/trace_filter/sampled_rank-0.json.gz"
DDP_SCRIPT = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(6):
    model(torch.randn(8, 16)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()
"""


class Chain:
    def __init__(self, folder: Path) -> None:
        stack = write_stack(folder / "stack")
        self.jaeger = Jaeger(folder / "jaeger").start()
        self.gateway = Gateway(folder, stack, jaeger=self.jaeger.otlp_grpc)
        self.agent = NodeAgent(folder, stack, gateway=self.gateway.otlp_grpc)

    def stop(self) -> None:
        for service in (self.agent, self.gateway, self.jaeger):
            service.stop()


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    chain = Chain(tmp_path_factory.mktemp("chain"))
    try:
        chain.gateway.start()
        chain.agent.start()
        yield chain
    finally:
        chain.stop()


@pytest.fixture(scope="module")
def two_jobs(chain, tmp_path_factory):
    """Two zero-code jobs of one service, run ids ``run-a``/``run-b``, users ``user-a``/``user-b``,
    through the node agent; metrics go the same way (OTLP, every 0.5 s)."""
    folder = tmp_path_factory.mktemp("jobs")
    jobs = {}
    for name, steps in (("a", 12), ("b", 8)):
        env = job_environment(folder / name, chain.agent.endpoint(), f"run-{name}", SERVICE,
                              OTEL_RESOURCE_ATTRIBUTES=f"enduser.id=user-{name}",
                              OTEL_METRICS_EXPORTER="otlp", OTEL_METRIC_EXPORT_INTERVAL="500")
        jobs[name] = (steps, env)
    results = {name: run_job(["--steps", str(steps)], env, timeout=600) for name, (steps, env) in jobs.items()}
    expected = {}
    for name, out in results.items():
        assert out.returncode == 0, out.stderr[-3000:]
        assert "dropped" not in out.stderr, out.stderr
        spooled = replay_spool(folder / name, jobs[name][1])
        requests = exported([folder / name / "prof"], folder / name / "expected.pb", f"run-{name}")
        steps = json.loads((folder / name / "prof" / "rank-0.json").read_text())["steps"]
        expected[name] = {"spans": spans_by_trace(requests), "steps": step_traces(requests), "profiled": steps,
                          "spooled": spooled}
    everything = {t: s for e in expected.values() for t, s in e["spans"].items()}
    got = wait_for_traces(chain.jaeger, SERVICE, everything)
    return {"expected": expected, "got": got}


def test_the_service_is_listed_and_each_step_is_one_trace(chain, two_jobs):
    assert SERVICE in chain.jaeger.services()
    for name, job in two_jobs["expected"].items():
        found = chain.jaeger.traces(SERVICE, operation="train.step", tags={"otel_profiler.run.id": f"run-{name}"})
        assert len(found) == job["profiled"] > 0, name  # the steps the profile folder recorded
        assert {t["traceID"] for t in found} == job["steps"], name


def test_every_trace_has_exactly_the_spans_the_profile_sent(two_jobs, record_property):
    expected = {t: s for e in two_jobs["expected"].values() for t, s in e["spans"].items()}
    record_property("spans_expected", sum(map(len, expected.values())))
    record_property("spans_in_jaeger", sum(map(len, two_jobs["got"].values())))
    record_property("spans_spooled", sum(e["spooled"] for e in two_jobs["expected"].values()))
    assert two_jobs["got"] == expected
    for trace_id, spans in expected.items():
        assert len(spans) == len(two_jobs["got"][trace_id])


def test_parents_and_links_resolve_inside_the_trace(chain, two_jobs):
    for t in chain.jaeger.traces(SERVICE):
        _check_references(t)


def _check_references(t: dict) -> int:
    """Every reference (parent, link) of every span of a Jaeger trace names a span of that trace;
    returns the number of span links."""
    ids = [s["spanID"] for s in t["spans"]]
    assert len(ids) == len(set(ids)), t["traceID"]  # no span twice
    links = 0
    roots = [s for s in t["spans"] if not any(r["refType"] == "CHILD_OF" for r in s["references"])]
    assert len(roots) == 1, (t["traceID"], [s["operationName"] for s in roots])
    for span in t["spans"]:
        for ref in span["references"]:
            assert ref["traceID"] == t["traceID"] and ref["spanID"] in ids, (t["traceID"], span["operationName"])
            links += ref["refType"] == "FOLLOWS_FROM"
    return links


def test_searches_by_run_id_and_user_find_exactly_that_jobs_traces(chain, two_jobs):
    for name, job in two_jobs["expected"].items():
        mine = set(job["spans"])
        for tags in ({"otel_profiler.run.id": f"run-{name}"}, {"enduser.id": f"user-{name}"}):
            found = {t["traceID"] for t in chain.jaeger.traces(SERVICE, tags=tags)}
            assert found == mine, tags  # resource attributes: every trace of that job, none of the other
    assert not chain.jaeger.traces(SERVICE, tags={"enduser.id": "user-c"})


def test_the_step_time_exemplar_is_a_trace_jaeger_returns(chain, two_jobs):
    from prometheus_server import available, prometheus_server

    if not available():
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    steps_a = two_jobs["expected"]["a"]["steps"]
    with prometheus_server([{"job_name": "otel-collector", "honor_labels": True,
                             "static_configs": [{"targets": [f"127.0.0.1:{chain.gateway.prometheus_port}"]}]}]) as prom:
        def exemplar_ids():
            now = time.time()
            found = prom.query_exemplars('{__name__=~"otel_profiler_step_duration.*_bucket", enduser_id="user-a"}',
                                         now - 600, now + 5)
            return {e["labels"]["trace_id"] for s in found for e in s["exemplars"]}

        ids = poll(exemplar_ids, "a step-time exemplar of job a in Prometheus")
    assert ids <= steps_a
    for trace_id in ids:
        found = chain.jaeger.trace(trace_id)
        assert found and found["traceID"] == trace_id
        assert any(s["operationName"] == "train.step" for s in found["spans"])


def test_a_gpu_trace_sent_by_export_keeps_its_links_and_its_top_operator_search(chain, tmp_path):
    service, run_id = "e2e-gpu-trace", "gpu-run"
    expected = exported([trace(GPU_TRACE)], tmp_path / "expected.pb", run_id)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_PROFILER_RUN_ID=run_id, OTEL_SERVICE_NAME=service)
    done = subprocess.run([sys.executable, "-m", "otel_profiler", "export", str(trace(GPU_TRACE)),
                           "--endpoint", chain.agent.endpoint("grpc"), "--protocol", "grpc"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    spans = spans_by_trace(expected)
    assert wait_for_traces(chain.jaeger, service, spans) == spans
    links = sum(_check_references(t) for t in chain.jaeger.traces(service))
    assert links > 0  # GPU ops link to their launch calls
    tops: dict[str, set[str]] = {}
    for trace_id, root in roots(expected).items():
        if "otel_profiler.top_operator" in root:
            tops.setdefault(root["otel_profiler.top_operator"], set()).add(trace_id)
    assert tops, "the GPU trace has no top operator"
    for operator, traces in tops.items():
        found = {t["traceID"] for t in chain.jaeger.traces(service, tags={"otel_profiler.top_operator": operator})}
        assert found == traces, operator


def test_torchrun_two_ranks_give_the_documented_trace_ids(chain, tmp_path):
    service, run_id = "e2e-ddp", "ddp-run"
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    env = job_environment(tmp_path, chain.agent.endpoint(), run_id, service=service)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(script)], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0 and "dropped" not in done.stderr, done.stderr[-3000:]
    replay_spool(tmp_path, env)
    requests = exported([tmp_path / "prof"], tmp_path / "expected.pb", run_id)
    spans = spans_by_trace(requests)
    assert wait_for_traces(chain.jaeger, service, spans) == spans
    steps = {t["traceID"] for t in chain.jaeger.traces(service, operation="train.step")}
    by_step: dict[str, set[str]] = {}
    for trace_id in steps:
        by_step.setdefault(trace_id[:24], set()).add(trace_id[24:])
    assert len(by_step) == 6  # 6 optimizer steps: steps 0-5
    assert all(ranks == {"00000000", "00000001"} for ranks in by_step.values()), by_step
    for rank in (0, 1):
        found = chain.jaeger.traces(service, operation="train.step", tags={"otel_profiler.rank": str(rank)})
        assert {t["traceID"][24:] for t in found} == {f"{rank:08x}"} and len(found) == 6
