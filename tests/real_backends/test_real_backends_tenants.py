"""Tenant routing as docs/security.md describes it, on the real gateway (``otel-collector.yaml``): each
tenant's traces go to its own trace store (here one Jaeger per tenant in place of Tempo), the shared
store gets only jobs without a tenant, and a job whose X-Scope-OrgID does not match the tenant port it
sends to is refused with HTTP 401 and lands nowhere (the profiler drops those spans with a warning or,
when the job's close came before the answer, keeps them in its spool, whose replay is refused the same way).

Jobs: ``vision`` and ``nlp`` straight to their tenant ports (HTTP and gRPC), ``vision`` again through a
node agent (``otel-collector-node.yaml`` with ``OTEL_GATEWAY_TENANT``), one job without a header to the
shared ports, and one with ``X-Scope-OrgID=nlp`` on vision's port.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from fault_kit import run_jobs
from real_backends import (Gateway, Jaeger, NodeAgent, exported, job_environment, replay_spool, spans_by_trace,
                           wait_for_traces, write_stack)

pytest.importorskip("torch")
STEPS = 6


@pytest.fixture(scope="module")
def tenants(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tenants")
    stack = write_stack(folder / "stack")
    stores = {name: Jaeger(folder / name, name) for name in ("shared", "vision", "nlp")}
    gateway = Gateway(folder, stack, jaeger=stores["shared"].otlp_grpc,
                      tenants={"vision": stores["vision"].otlp_grpc, "nlp": stores["nlp"].otlp_grpc})
    agent = NodeAgent(folder, stack, gateway=gateway.endpoint("vision", "grpc").removeprefix("http://"),
                      tenant="vision")
    started = [*stores.values(), gateway, agent]
    try:
        for service in started:
            service.start()
        jobs = {  # service name: (endpoint, protocol, X-Scope-OrgID)
            "team-vision": (gateway.endpoint("vision"), "http/protobuf", "vision"),
            "team-nlp": (gateway.endpoint("nlp", "grpc"), "grpc", "nlp"),
            "team-vision-node": (agent.endpoint(), "http/protobuf", ""),
            "no-tenant": (gateway.endpoint(), "http/protobuf", ""),
            "wrong-tenant": (gateway.endpoint("vision"), "http/protobuf", "nlp"),
        }
        envs = {}
        for service, (endpoint, protocol, tenant) in jobs.items():
            envs[service] = job_environment(folder / service, endpoint, f"run-{service}", service,
                                            OTEL_EXPORTER_OTLP_PROTOCOL=protocol)
            if tenant:
                envs[service]["OTEL_EXPORTER_OTLP_HEADERS"] = f"X-Scope-OrgID={tenant}"
        outs = run_jobs([(["--steps", str(STEPS)], env) for env in envs.values()])  # side by side
        results = {}
        for (service, env), out in zip(envs.items(), outs):
            assert out.returncode == 0, out.stderr[-3000:]
            if service != "wrong-tenant":
                replay_spool(folder / service, env)  # what the Collector did not take in time, if any
            spans = spans_by_trace(exported([folder / service / "prof"], folder / service / "expected.pb",
                                            f"run-{service}"))
            results[service] = {"stderr": out.stderr, "spans": spans, "env": env, "folder": folder / service}
        yield {"stores": stores, "jobs": results}
    finally:
        for service in reversed(started):
            service.stop()


WHERE = {"vision": ["team-vision", "team-vision-node"], "nlp": ["team-nlp"], "shared": ["no-tenant"]}


@pytest.mark.parametrize("store", ["vision", "nlp", "shared"])
def test_each_store_holds_exactly_its_tenants_jobs(tenants, store):
    jaeger = tenants["stores"][store]
    for service in WHERE[store]:
        spans = tenants["jobs"][service]["spans"]
        assert wait_for_traces(jaeger, service, spans) == spans
        assert "dropped" not in tenants["jobs"][service]["stderr"]
    assert sorted(jaeger.services()) == sorted(WHERE[store])  # nobody else's service, not even listed


def test_a_job_with_another_tenants_header_is_refused_and_stored_nowhere(tenants):
    for store in ("vision", "nlp", "shared"):  # the others have all arrived (the test above polled)
        wait_for_traces(tenants["stores"][store], WHERE[store][0], tenants["jobs"][WHERE[store][0]]["spans"])
        assert "wrong-tenant" not in tenants["stores"][store].services()
    job = tenants["jobs"]["wrong-tenant"]
    if "refused spans (HTTP 401 Unauthorized); dropping them" in job["stderr"]:
        assert f"span export dropped {sum(map(len, job['spans'].values()))} spans" in job["stderr"]
    else:  # the job's close came first: its spans wait in the spool, and a replay is refused the same way
        env = {k: v for k, v in job["env"].items() if k not in ("OTEL_PROFILER_ENABLED", "PYTHONPATH")}
        done = subprocess.run([sys.executable, "-m", "otel_profiler", "replay", str(job["folder"] / "spool")],
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 1 and "HTTP 401 Unauthorized" in done.stderr, done.stdout + done.stderr
    for store in tenants["stores"].values():
        assert "wrong-tenant" not in store.services()
