"""``otel-profiler export`` whole-process against a plain OpenTelemetry SDK script, side by side in
one run, both sending to the same local OTLP receiver (gRPC; ``tests/otlp_receiver.py``, in this
process, which both share).

- ours: ``otel-profiler export --endpoint ... --protocol grpc TRACE`` (read, span model with its
  per-step budget and aggregates, encode, send), as a user runs it;
- SDK: what a user would write without us: ``json`` loads the trace, one span per GPU op (kernel,
  memcpy, memset) and per runtime/driver call with its name, times and a few args, through a
  ``TracerProvider`` with a ``BatchSpanProcessor`` (queue large enough to drop nothing) and the
  OTLP gRPC exporter.

Each is a fresh process, timed from interpreter start to exit (wall and CPU); the ratio is SDK
over ours (target >= 6x). The trace is ``large_trace.py``'s (a shared trace repeated, built once).

    python benchmarks/export_vs_sdk.py [--events 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from large_import import LAST_WAIT, run_measured  # noqa: E402
from large_trace import large_trace  # noqa: E402
from otlp_receiver import OtlpReceiver  # noqa: E402

SDK_SCRIPT = r"""
import gzip, json, sys
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

path, endpoint = sys.argv[1], sys.argv[2]
provider = TracerProvider(resource=Resource.create({"service.name": "sdk-script"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True),
                                               max_queue_size=1 << 21, max_export_batch_size=2048))
tracer = provider.get_tracer("trace-export")
with gzip.open(path, "rt") as f:
    doc = json.load(f)
base = int(doc.get("baseTimeNanoseconds") or 0)
gpu = {"kernel", "gpu_memcpy", "gpu_memset"}
calls = {"cuda_runtime", "cuda_driver"}
n = 0
for e in doc["traceEvents"]:
    cat = e.get("cat")
    if e.get("ph") != "X" or (cat not in gpu and cat not in calls):
        continue
    start = base + int(round(float(e["ts"]) * 1000))
    end = start + int(round(float(e.get("dur", 0)) * 1000))
    args = e.get("args") or {}
    attrs = {"category": cat, "correlation": int(args.get("correlation", -1))}
    if cat in gpu:
        attrs.update(device=int(args.get("device", -1)), stream=int(args.get("stream", -1)))
    span = tracer.start_span(e["name"], start_time=start, attributes=attrs)
    span.end(end_time=end)
    n += 1
provider.shutdown()  # flushes every queued span
print(n)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    path = large_trace(args.events)
    runs: dict[str, list] = {"ours": [], "sdk": []}
    with OtlpReceiver() as receiver:
        for _ in range(args.repeat):
            before = len(receiver.collected.spans())
            wall, peak, _, cpu = run_measured([sys.executable, "-m", "otel_profiler", "export", path,
                                               "--endpoint", receiver.grpc_endpoint, "--protocol", "grpc"])
            runs["ours"].append((wall, cpu, peak, LAST_WAIT[0], len(receiver.collected.spans()) - before))
            before = len(receiver.collected.spans())
            wall, peak, _, cpu = run_measured([sys.executable, "-c", SDK_SCRIPT, path, receiver.grpc_endpoint])
            runs["sdk"].append((wall, cpu, peak, LAST_WAIT[0], len(receiver.collected.spans()) - before))
    print(f"{os.path.basename(path)}; medians of {args.repeat} interleaved runs, each a fresh process")
    print(f"{'':28} {'wall (s)':>8} {'CPU (s)':>8} {'peak MiB':>8} {'waited (s)':>10} {'spans received':>14}")
    med = {k: [statistics.median(r[i] for r in v) for i in range(5)] for k, v in runs.items()}
    for key, label in (("ours", "otel-profiler export"), ("sdk", "OpenTelemetry SDK script")):
        wall, cpu, peak, waited, spans = med[key]
        print(f"{label:28} {wall:8.2f} {cpu:8.2f} {peak:8.0f} {waited:10.2f} {spans:14,.0f}")
    print(f"SDK / ours: wall {med['sdk'][0] / med['ours'][0]:.1f}x, CPU {med['sdk'][1] / med['ours'][1]:.1f}x "
          "(target >= 6x); the receiver in this process parses every request for both")


if __name__ == "__main__":
    main()
