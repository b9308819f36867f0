"""Start-up and per-step cost of the training process's session with joined traces
(docs/trace-context.md), side by side in one run, each configuration a fresh process, runs interleaved:

- ``before``: neither ``TRACEPARENT`` nor the OpenTelemetry API, with the trace-context work taken
  out (the session as it was before joined traces existed);
- ``none``: neither ``TRACEPARENT`` nor the API (what every job without them runs now);
- ``traceparent``: ``TRACEPARENT`` set (parsed once, recorded in the metadata);
- ``api``: the job imported the OpenTelemetry API and configured an SDK ``TracerProvider`` before the
  profiler started, and its own span is current at every step (read at each step begin);
- ``api+mark``: the same with ``OTEL_PROFILER_MARK_USER_SPANS=true`` (an event on that span per step).

Start-up: from importing the session module to a started session (the job's own imports of
OpenTelemetry are not counted). Per step: ``step()`` boundaries in a tight loop. Prints medians and
each configuration's ratio to ``before``.

    python benchmarks/trace_context_startup.py [--runs 15] [--steps 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
CONFIGS = ("before", "none", "traceparent", "api", "api+mark")
CHILD = r"""
import contextlib, json, sys, time
config, steps = sys.argv[1], int(sys.argv[2])
span = contextlib.nullcontext()
if config.startswith("api"):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    trace.set_tracer_provider(TracerProvider())
    span = trace.get_tracer("bench").start_as_current_span("job")
t0 = time.perf_counter_ns()
from otel_profiler.live import session
if config == "before":
    from otel_profiler.live import trace_context
    session.parent_from_settings = lambda settings: None
    trace_context.UserSpans.step_began = lambda self, number, rank: None
s = session.start_session("benchmark")
t1 = time.perf_counter_ns()
with span:
    t2 = time.perf_counter_ns()
    for _ in range(steps):
        s.step_boundary(manual=True)
    t3 = time.perf_counter_ns()
print(json.dumps({"start_ms": (t1 - t0) / 1e6, "step_us": (t3 - t2) / steps / 1e3}))
sys.stdout.flush()
"""


def environment(config: str, folder: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k not in ("TRACEPARENT", "TRACESTATE")}
    env.update(PYTHONPATH=REPO, OTEL_PROFILER_OUTPUT_DIR=folder, OTEL_PROFILER_SUMMARY_AT_EXIT="false",
               OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", OTEL_PROFILER_SIGNAL="false",
               OTEL_PROFILER_ACTIVITIES="")
    if config == "traceparent":
        env["TRACEPARENT"] = PARENT
    if config == "api+mark":
        env["OTEL_PROFILER_MARK_USER_SPANS"] = "true"
    return env


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--steps", type=int, default=2000)
    args = ap.parse_args()
    figures: dict[str, dict[str, list[float]]] = {c: {"start_ms": [], "step_us": []} for c in CONFIGS}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.runs):
            for config in CONFIGS:
                done = subprocess.run([sys.executable, "-c", CHILD, config, str(args.steps)], capture_output=True,
                                      text=True, env=environment(config, folder), check=True)
                line = [x for x in done.stdout.splitlines() if x.startswith("{")][-1]
                for key, value in json.loads(line).items():
                    figures[config][key].append(value)
    base = {k: statistics.median(v) for k, v in figures["before"].items()}
    print(f"{'configuration':<13} {'start-up ms':>12} {'ratio':>6} {'per step us':>12} {'ratio':>6}  "
          f"(medians of {args.runs} processes, {args.steps} steps each)")
    for config in CONFIGS:
        start, step = (statistics.median(figures[config][k]) for k in ("start_ms", "step_us"))
        print(f"{config:<13} {start:>12.1f} {start / base['start_ms']:>6.2f} {step:>12.2f} "
              f"{step / base['step_us']:>6.2f}")


if __name__ == "__main__":
    main()
