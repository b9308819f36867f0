"""The delivery contract on the real chain (job --> node agent --> gateway --> Jaeger, the shipped
Collector configs with their file-storage queues), default export settings:

- the node agent SIGKILLed and restarted mid-run: every span arrives in Jaeger;
- Jaeger down while the Collectors are up (and the gateway SIGKILLed and restarted meanwhile): the
  gateway's persistent queue holds the spans, and they arrive once Jaeger is back;
- the Collector down for the whole job: the profiler's spool holds them and ``otel-profiler replay``
  delivers them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fault_kit import pb_requests, span_ids
from real_backends import (Gateway, Jaeger, NodeAgent, exported, job_environment, poll, replay_spool, spans_by_trace, step_traces,
                           wait_for_traces, write_stack)

pytest.importorskip("torch")
JOB = str(Path(__file__).resolve().parents[1] / "fault_job.py")


@pytest.fixture
def chain(tmp_path):
    stack = write_stack(tmp_path / "stack")
    jaeger = Jaeger(tmp_path / "jaeger")
    gateway = Gateway(tmp_path, stack, jaeger=jaeger.otlp_grpc)
    agent = NodeAgent(tmp_path, stack, gateway=gateway.otlp_grpc)
    try:
        yield jaeger, gateway, agent
    finally:
        for service in (agent, gateway, jaeger):
            service.stop()


def profiled_steps(folder: Path) -> int:
    try:
        return json.loads((folder / "prof" / "rank-0.json").read_text())["steps"]
    except (OSError, ValueError, KeyError):
        return 0


def arrive(record_property, jaeger: Jaeger, service: str, expected: dict[str, set[str]], spooled: int = 0):
    """Wait for every expected span in Jaeger; the figures of docs/delivery.md go to the test report
    (``--junitxml``): spans expected, spans spooled by the job, seconds until all had arrived."""
    start = time.monotonic()
    got = wait_for_traces(jaeger, service, expected)
    record_property("spans_expected", sum(map(len, expected.values())))
    record_property("spans_spooled", spooled)
    record_property("spans_in_jaeger", sum(len(got.get(t, ())) for t in expected))
    record_property("seconds_until_all_arrived", round(time.monotonic() - start, 1))
    return got


def test_node_agent_killed_and_restarted_mid_run_loses_no_span(chain, tmp_path, record_property):
    jaeger, gateway, agent = chain
    jaeger.start(), gateway.start(), agent.start()
    env = job_environment(tmp_path, agent.endpoint(), "kill-run", service="e2e-agent-killed",
                          OTEL_PROFILER_FLUSH_INTERVAL_S="0.5")  # parts flow while the job runs
    until = tmp_path / "stop"
    job = subprocess.Popen([sys.executable, JOB, "--steps", "0", "--step-sleep", "0.05", "--until", str(until)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        poll(lambda: len(jaeger.traces("e2e-agent-killed", operation="train.step")) >= 3,
             "step traces in Jaeger before the kill", proc=job)
        agent.stop(kill=True)
        at_kill = profiled_steps(tmp_path)
        poll(lambda: profiled_steps(tmp_path) >= at_kill + 20, "steps while the agent is down", proc=job)
        agent.start()
        restarted = profiled_steps(tmp_path)
        poll(lambda: profiled_steps(tmp_path) >= restarted + 20, "steps after the restart", proc=job)
        until.write_text("stop")
        _, err = job.communicate(timeout=300)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
    assert job.returncode == 0, err[-3000:]
    assert "dropped" not in err, err
    requests = exported([tmp_path / "prof"], tmp_path / "expected.pb", "kill-run")
    spooled = replay_spool(tmp_path, env)  # what the agent did not take in time, if any
    expected = spans_by_trace(requests)
    assert len(step_traces(requests)) >= profiled_steps(tmp_path) - 1 >= 40
    got = arrive(record_property, jaeger, "e2e-agent-killed", expected, spooled)
    assert {t: got[t] for t in expected} == expected  # every span, the step traces and the others


def test_jaeger_down_the_gateway_queue_holds_the_spans_across_a_gateway_crash(chain, tmp_path, record_property):
    jaeger, gateway, agent = chain
    gateway.start(), agent.start()  # Jaeger is not running
    env = job_environment(tmp_path, agent.endpoint("grpc"), "jaeger-down", service="e2e-jaeger-down")
    env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
    out = subprocess.run([sys.executable, JOB, "--steps", "30"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0 and "dropped" not in out.stderr, out.stderr[-3000:]
    replay_spool(tmp_path, env)  # what the agent did not take in time, if any
    spans = spans_by_trace(exported([tmp_path / "prof"], tmp_path / "expected.pb", "jaeger-down"))
    total = sum(map(len, spans.values()))
    poll(lambda: gateway.accepted_spans() >= total, "every span acknowledged by the gateway")
    assert jaeger.proc is None  # Jaeger has not run yet: every span is in the gateway
    gateway.stop(kill=True)  # a crash: only what its queue put on disk survives
    gateway.start()
    jaeger.start()
    assert arrive(record_property, jaeger, "e2e-jaeger-down", spans) == spans


def test_collector_down_the_spool_and_replay_deliver_every_span(chain, tmp_path, record_property):
    jaeger, gateway, agent = chain
    jaeger.start(), gateway.start()  # the node agent is down for the whole job
    env = job_environment(tmp_path, agent.endpoint(), "agent-down", service="e2e-agent-down")
    out = subprocess.run([sys.executable, JOB, "--steps", "30"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0 and "dropped" not in out.stderr, out.stderr[-3000:]
    spans = spans_by_trace(exported([tmp_path / "prof"], tmp_path / "expected.pb", "agent-down"))
    spooled = len(span_ids(pb_requests(tmp_path / "spool")))
    assert spooled == sum(map(len, spans.values()))  # every span in the spool, none in Jaeger
    assert "e2e-agent-down" not in jaeger.services()
    agent.start()
    done = subprocess.run([sys.executable, "-m", "otel_profiler", "replay", str(tmp_path / "spool"),
                           "--endpoint", agent.endpoint()], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not list((tmp_path / "spool").glob("*.pb"))
    assert arrive(record_property, jaeger, "e2e-agent-down", spans, spooled) == spans
