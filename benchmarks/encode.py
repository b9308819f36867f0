"""OTLP span encoding throughput: our vectorized encoder vs the OpenTelemetry SDK span path vs filling
opentelemetry-proto messages directly, on the same spans, side by side; plus the exporter process's
peak memory on a 1x and a 10x longer input.

    python benchmarks/encode.py [--copies 15] [--sdk-spans 20000] [--proto-spans 100000]

Input: the largest test trace (``hta/df_index_resolver``) tiled ``--copies`` times in time (step
numbers and correlation ids offset per copy), turned into spans with no span budget so that every
GPU op, launch, sync and annotation is one span (about 1M spans for 15 copies).

- ours: ``otel_profiler.export.otlp.split_requests`` (span table → serialized requests of ≤ 3 MiB).
- SDK: ``TracerProvider`` + ``BatchSpanProcessor`` + an in-memory exporter that runs the official
  OTLP protobuf encoder (``encode_spans(...).SerializeToString()``), spans created with the same
  names, times, parents, links and attributes; timed on the first ``--sdk-spans`` spans.
- proto: ``opentelemetry.proto`` ``Span`` messages filled field by field from the same columns, then
  serialized; timed on the first ``--proto-spans`` spans.
Rates are spans (events) per second of one process on one core.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cuda_tracer.model.events import MISSING, EventBatch  # noqa: E402
from cuda_tracer.loading import load_profile  # noqa: E402
from otel_profiler.export.otlp import split_requests  # noqa: E402
from otel_profiler.spans.options import SpanOptions  # noqa: E402
from otel_profiler.spans.build import SpanTable, build_spans  # noqa: E402

LARGEST = REPO / "tests" / "data" / "traces" / "hta" / "df_index_resolver" / \
    "df_index_resolver.json.gz"


def shifted_copy(batch: EventBatch, k: int) -> EventBatch:
    """Copy ``k`` of ``batch``: shifted after ``k`` earlier copies in time, correlation ids and step
    numbers offset, as if the run went on."""
    span = int(batch.end_ns.max() - batch.start_ns.min()) + 1_000_000
    id_step = int(batch.correlation.max()) + 1
    steps = batch.extra("step")
    step_step = (max(steps.values()) + 1) if steps else 0
    step_key = batch.strings.index("step") if steps else -1
    cols = {c: a.copy() for c, a in batch.columns.items()}
    cols["start_ns"] += k * span
    cols["end_ns"] += k * span
    cols["correlation"] = np.where(cols["correlation"] != MISSING, cols["correlation"] + k * id_step, MISSING)
    values = [v + k * step_step if key == step_key else v
              for key, v in zip(batch.extra_key.tolist(), batch.extra_value)]
    return EventBatch(cols, batch.strings, batch.extra_row, batch.extra_key, values)


def tile_steps(batch: EventBatch, copies: int) -> EventBatch:
    """``copies`` consecutive shifted copies of ``batch`` in one batch."""
    return EventBatch.concat(shifted_copy(batch, k) for k in range(copies))


def rows_as_python(table: SpanTable, n: int) -> list[dict]:
    """The first ``n`` spans as plain Python values (input of the two per-span paths, not timed)."""
    out = []
    for i in range(min(n, len(table))):
        attrs = {}
        for a in table.attrs:
            if a.present is None or a.present[i]:
                v = a.values[i]
                attrs[a.key] = table.values[int(v)] if a.type == "value" else v.item()
        out.append({"trace_hi": int(table.trace_hi[i]), "trace_lo": int(table.trace_lo[i]),
                    "span": int(table.span_id[i]), "parent": int(table.parent_id[i]),
                    "link": int(table.link_id[i]), "name": table.names[int(table.name[i])],
                    "start": int(table.start_ns[i]), "end": int(table.end_ns[i]), "attrs": attrs})
    return out


def bench_ours(table: SpanTable) -> tuple[float, int]:
    t = time.perf_counter()
    parts = split_requests(table)
    return time.perf_counter() - t, sum(len(b) for b, _ in parts)


def bench_sdk(rows: list[dict], resource_attrs: dict) -> float:
    from opentelemetry import trace as trace_api
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class EncodingExporter(SpanExporter):
        def __init__(self) -> None:
            self.bytes = self.spans = 0

        def export(self, spans):
            self.spans += len(spans)
            self.bytes += len(encode_spans(spans).SerializeToString())
            return SpanExportResult.SUCCESS

    def flat(v):
        return [str(x) for x in v] if isinstance(v, list) else v

    exporter = EncodingExporter()
    provider = TracerProvider(resource=Resource.create({k: flat(v) for k, v in resource_attrs.items()}))
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=len(rows) + 1,
                                                   max_export_batch_size=512))
    tracer = provider.get_tracer("otel_profiler")
    sampled = trace_api.TraceFlags(trace_api.TraceFlags.SAMPLED)  # else ParentBased drops the children
    t = time.perf_counter()
    for r in rows:
        ctx = None
        if r["parent"]:
            parent = trace_api.SpanContext((r["trace_hi"] << 64) | r["trace_lo"], r["parent"], is_remote=True,
                                           trace_flags=sampled)
            ctx = trace_api.set_span_in_context(trace_api.NonRecordingSpan(parent))
        links = [trace_api.Link(trace_api.SpanContext((r["trace_hi"] << 64) | r["trace_lo"], r["link"],
                                                      is_remote=True, trace_flags=sampled))] \
            if r["link"] else None
        span = tracer.start_span(r["name"], context=ctx, start_time=r["start"], links=links,
                                 attributes={k: flat(v) for k, v in r["attrs"].items()})
        span.end(end_time=r["end"])
    provider.force_flush(600_000)
    elapsed = time.perf_counter() - t
    provider.shutdown()
    assert exporter.spans == len(rows), (exporter.spans, len(rows))
    return elapsed


def bench_proto(rows: list[dict], resource_attrs: dict) -> float:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    def value(v) -> AnyValue:
        if isinstance(v, bool):
            return AnyValue(bool_value=v)
        if isinstance(v, int):
            return AnyValue(int_value=v)
        if isinstance(v, float):
            return AnyValue(double_value=v)
        if isinstance(v, list):
            out = AnyValue()
            out.array_value.values.extend(value(x) for x in v)
            return out
        return AnyValue(string_value=str(v))

    t = time.perf_counter()
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend(KeyValue(key=k, value=value(v)) for k, v in resource_attrs.items())
    ss = rs.scope_spans.add()
    ss.scope.name = "otel_profiler"
    size = 0
    for i, r in enumerate(rows):
        trace_id = r["trace_hi"].to_bytes(8, "big") + r["trace_lo"].to_bytes(8, "big")
        s = Span(trace_id=trace_id, span_id=r["span"].to_bytes(8, "big"), name=r["name"],
                 kind=Span.SPAN_KIND_INTERNAL, start_time_unix_nano=r["start"], end_time_unix_nano=r["end"],
                 attributes=[KeyValue(key=k, value=value(v)) for k, v in r["attrs"].items()])
        if r["parent"]:
            s.parent_span_id = r["parent"].to_bytes(8, "big")
        if r["link"]:
            s.links.add(trace_id=trace_id, span_id=r["link"].to_bytes(8, "big"))
        ss.spans.append(s)
        if (i + 1) % 10_000 == 0:  # requests of about 3 MB, like ours
            size += len(req.SerializeToString())
            del ss.spans[:]
    size += len(req.SerializeToString())
    return time.perf_counter() - t


def memory_run(batches: int) -> None:
    """Child mode: push ``batches`` consecutive copies of the largest trace through an Exporter (to a
    .pb file on /dev/null) and print the exporter process's peak RSS (polled every 20 ms) in MiB."""
    import threading

    import psutil

    from otel_profiler.export.exporter import ExportConfig, Exporter

    rank = load_profile([str(LARGEST)]).ranks[0]
    exporter = Exporter(ExportConfig(pb_file=os.devnull, queue_size=4))
    child = psutil.Process(exporter._proc.pid)
    peak, done = [0], threading.Event()

    def poll() -> None:
        while not done.is_set():
            try:
                peak[0] = max(peak[0], child.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.02)

    threading.Thread(target=poll, daemon=True).start()
    t = time.perf_counter()
    meta = dict(rank.meta, run_id="mem")
    for k in range(batches):
        batch = shifted_copy(rank.batch, k)  # the run goes on: later steps, later times
        while not exporter.submit(meta, batch):
            exporter.dropped -= 1  # the queue is full: wait, this run measures memory, not drops
            time.sleep(0.05)
    counters = exporter.close(600)
    done.set()
    print(json.dumps({"batches": batches, "events": batches * len(rank.batch), "peak_mib": peak[0] / 2**20,
                      "spans": counters["spans_built"], "seconds": time.perf_counter() - t}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--copies", type=int, default=15)
    ap.add_argument("--sdk-spans", type=int, default=20_000)
    ap.add_argument("--proto-spans", type=int, default=100_000)
    ap.add_argument("--memory-batches", type=int, default=4, help="1x input of the memory check")
    ap.add_argument("--memory-run", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_run:
        memory_run(args.memory_run)
        return

    rank = load_profile([str(LARGEST)]).ranks[0]
    batch = tile_steps(rank.batch, args.copies)
    t = time.perf_counter()
    table = build_spans(rank.meta, batch, SpanOptions(budget=10**9))
    t_model = time.perf_counter() - t
    t_ours, size = bench_ours(table)
    t_ours = min(t_ours, bench_ours(table)[0])
    rows_sdk = rows_as_python(table, args.sdk_spans)
    rows_proto = rows_as_python(table, args.proto_spans)
    t_sdk = bench_sdk(rows_sdk, table.resource)
    t_proto = bench_proto(rows_proto, table.resource)

    rate_ours = len(table) / t_ours
    rates = [("ours: vectorized encoder (otel_profiler.export.otlp)", len(table), t_ours, rate_ours),
             ("(a) OTel SDK: TracerProvider+BatchSpanProcessor+OTLP encoder", len(rows_sdk), t_sdk,
              len(rows_sdk) / t_sdk),
             ("(b) opentelemetry-proto messages filled directly", len(rows_proto), t_proto,
              len(rows_proto) / t_proto)]
    print(f"input: {len(batch):,} events ({args.copies} copies of {LARGEST.name}) -> {len(table):,} spans, "
          f"{size / 1e6:.0f} MB of OTLP protobuf")
    print(f"span model (build_spans): {t_model:.2f} s = {len(batch) / t_model:,.0f} events/s in, "
          f"{len(table) / t_model:,.0f} spans/s out")
    print()
    print(f"| {'path':<62} | {'spans':>9} | {'seconds':>7} | {'spans/s':>11} | {'ours is':>8} |")
    print(f"|{'-' * 64}|{'-' * 11}|{'-' * 9}|{'-' * 13}|{'-' * 10}|")
    for label, n, secs, rate in rates:
        print(f"| {label:<62} | {n:>9,} | {secs:>7.2f} | {rate:>11,.0f} | {rate_ours / rate:>7.1f}x |")
    end_to_end = len(table) / (t_model + t_ours)
    print(f"\nspan model + encoder together: {end_to_end:,.0f} spans/s")

    print("\nexporter process peak memory (pb file sink on /dev/null):")
    for batches in (args.memory_batches, 10 * args.memory_batches):
        out = subprocess.run([sys.executable, __file__, "--memory-run", str(batches)], capture_output=True,
                             text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"  {r['batches']:>3} batches, {r['events']:>10,} events, {r['spans']:>9,} spans: "
              f"peak RSS {r['peak_mib']:.0f} MiB ({r['seconds']:.1f} s)")


if __name__ == "__main__":
    main()
