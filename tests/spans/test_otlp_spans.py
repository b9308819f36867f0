"""The span model (otel_profiler.spans.build) on shared real traces and on a synthetic CUDA-graph batch."""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

import numpy as np
import pytest

from conftest import trace
from cuda_tracer.model.events import GPU_OP_KINDS, MISSING, BatchBuilder, Kind
from cuda_tracer.loading import load_profile
from otel_profiler.spans.options import SpanOptions
from otel_profiler.spans.build import build_spans
from otel_profiler.shared.ids import batch_steps, trace_id

TRACES = ["hta/negative_queue_length_values_check/rank0.json.gz",  # orphan GPU ops, 5 steps
          "hta/nccl_parser_config/nccl_data.json.gz",  # annotations, gpu annotations
          "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",  # no steps, syncs
          "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"]


@lru_cache(maxsize=None)
def rank_of(path: str):
    return load_profile([str(trace(path))]).ranks[0]


def _gpu_counts(batch) -> Counter:
    rows = np.flatnonzero(np.isin(batch.kind, np.asarray(GPU_OP_KINDS, np.uint8)))
    return Counter(zip(batch.kind[rows].tolist(), batch.name[rows].tolist()))


def _exported_counts(batch, table) -> Counter:
    """GPU ops per (kind, name): individual spans plus aggregate counts."""
    out: Counter = Counter()
    src = table.source_row
    ind = src[src >= 0]
    gpu = ind[np.isin(batch.kind[ind], np.asarray(GPU_OP_KINDS, np.uint8))]
    out.update(zip(batch.kind[gpu].tolist(), batch.name[gpu].tolist()))
    if not any(a.key == "otel_profiler.aggregate.count" for a in table.attrs):
        return out
    agg = table.attr("otel_profiler.aggregate.count")
    kinds = table.attr("otel_profiler.kind")
    for i in np.flatnonzero(agg.present if agg.present is not None else np.ones(len(table), bool)):
        kind_name = table.values[int(kinds.values[i])]
        k = {"kernel": Kind.KERNEL, "memcpy": Kind.MEMCPY, "memset": Kind.MEMSET}.get(kind_name)
        if k is not None:
            out[(int(k), int(table.name[i]))] += int(agg.values[i])
    return out


@pytest.mark.parametrize("path", TRACES)
@pytest.mark.parametrize("budget", [2000, 60])
def test_every_gpu_op_exactly_once(path, budget):
    r = rank_of(path)
    table = build_spans(r.meta, r.batch, SpanOptions(budget=budget))
    src = table.source_row[table.source_row >= 0]
    assert len(np.unique(src)) == len(src)
    assert _exported_counts(r.batch, table) == _gpu_counts(r.batch)
    assert len(np.unique(table.span_id)) == len(table)


@pytest.mark.parametrize("path", TRACES)
def test_parents_links_and_times(path):
    r = rank_of(path)
    b = r.batch
    table = build_spans(r.meta, b, SpanOptions(budget=300))
    index = {int(s): i for i, s in enumerate(table.span_id.tolist())}
    row_of_span = table.source_row
    span_of_row = {int(row): i for i, row in enumerate(row_of_span.tolist()) if row >= 0}
    for i in range(len(table)):
        p = int(table.parent_id[i])
        if p:  # parent exists, in the same trace
            j = index[p]
            assert (table.trace_hi[j], table.trace_lo[j]) == (table.trace_hi[i], table.trace_lo[i])
        row = row_of_span[i]
        if row >= 0:  # ns-exact times
            assert (table.start_ns[i], table.end_ns[i]) == (b.start_ns[row], b.end_ns[row])
        link = int(table.link_id[i])
        if link:
            j = index[link]
            launch = row_of_span[j]
            assert b.kind[launch] in (Kind.RUNTIME, Kind.DRIVER)
            assert b.correlation[launch] == b.correlation[row]
            assert table.parent_id[j] == table.parent_id[i]  # GPU op under its launch's parent
            parent = index[int(table.parent_id[i])]
            prow = row_of_span[parent]
            if prow >= 0:  # an annotation or CPU op on the launch thread containing the launch start
                assert b.kind[prow] in (Kind.USER_ANNOTATION, Kind.CPU_OP) and b.tid[prow] == b.tid[launch]
                assert b.start_ns[prow] <= b.start_ns[launch] < b.end_ns[prow]
    # Linked GPU ops whose launch is a span always carry the link.
    linked_ops = [i for i in range(len(table)) if row_of_span[i] >= 0 and b.kind[row_of_span[i]] == Kind.KERNEL
                  and b.correlation[row_of_span[i]] != MISSING]
    assert sum(1 for i in linked_ops if table.link_id[i]) > 0.5 * len(linked_ops)
    _ = span_of_row


def test_budget_and_root_attributes():
    r = rank_of(TRACES[0])
    table = build_spans(r.meta, r.batch, SpanOptions(budget=500))
    traces = Counter(zip(table.trace_hi.tolist(), table.trace_lo.tolist()))
    assert max(traces.values()) <= 500
    roots = np.flatnonzero(table.parent_id == 0)
    assert len(roots) == len(traces)
    step = table.attr("otel_profiler.step")
    steps = sorted(int(step.values[i]) for i in roots if step.present is None or step.present[i])
    assert steps == sorted(r.batch.extra("step").values())
    step_roots = [i for i in roots if table.names[int(table.name[i])] == "train.step"]
    assert len(step_roots) == len(steps)  # the rest are window traces (events before the first step)
    assert all(int(table.attr("otel_profiler.span_budget").values[i]) == 500 for i in roots)
    top = table.attr("otel_profiler.top_kernels")
    assert all(isinstance(table.values[int(top.values[i])], list) for i in step_roots)
    # Per trace, every individual GPU op lasts at least as long as any aggregated one.
    b = r.batch
    agg = table.attr("otel_profiler.aggregated").present
    longest_agg = table.attr("otel_profiler.aggregate.max_duration_ns")
    kinds = table.attr("otel_profiler.kind")
    gpu_kind = {"kernel", "memcpy", "memset"}
    checked = 0
    for key in traces:
        in_trace = (table.trace_hi == key[0]) & (table.trace_lo == key[1])
        ind = [i for i in np.flatnonzero(in_trace) if table.source_row[i] >= 0
               and b.kind[table.source_row[i]] in GPU_OP_KINDS]
        aggs = [i for i in np.flatnonzero(in_trace & agg) if table.values[int(kinds.values[i])] in gpu_kind]
        if ind and aggs:
            assert min(int(table.end_ns[i] - table.start_ns[i]) for i in ind) >= \
                max(int(longest_agg.values[i]) for i in aggs)
            checked += 1
    assert checked >= 3


def test_trace_ids_shared_across_ranks_of_a_step():
    ranks = load_profile([str(trace("hta/trace_filter"))]).ranks
    tables = [build_spans(r.meta, r.batch, SpanOptions(run_id="job-1")) for r in ranks]
    for r, t in zip(ranks, tables):
        roots = np.flatnonzero(t.parent_id == 0)
        for i in roots:
            n = int(t.attr("otel_profiler.step").values[i])
            assert (int(t.trace_hi[i]), int(t.trace_lo[i])) == trace_id("job-1", r.rank, "step", n)
            assert t.trace_hex(i)[-8:] == f"{r.rank:08x}"
    a, b = tables
    assert a.trace_hex(0)[:24] == b.trace_hex(0)[:24] and a.trace_hex(0) != b.trace_hex(0)
    again = build_spans(ranks[0].meta, ranks[0].batch, SpanOptions(run_id="job-1"))
    assert np.array_equal(again.span_id, a.span_id)


def test_events_outside_steps_form_window_traces():
    r = rank_of(TRACES[2])  # alexnet: no ProfilerStep
    table = build_spans(r.meta, r.batch, SpanOptions(window_ns=10**9))
    roots = np.flatnonzero(table.parent_id == 0)
    assert {table.names[int(table.name[i])] for i in roots} == {"otel_profiler.window"}
    assert _exported_counts(r.batch, table) == _gpu_counts(r.batch)
    # Blocking sync calls are spans on their thread, marked as such.
    sync = table.attr("gpu.api.synchronizing")
    marked = Counter(table.names[int(table.name[i])] for i in np.flatnonzero(sync.present))
    assert marked == {"cudaStreamSynchronize": 16, "cudaDeviceSynchronize": 5}
    thread = table.attr("thread.id")
    assert thread.present[np.flatnonzero(sync.present)].all()


def _graph_batch():
    """A step with one cudaGraphLaunch running 3 correlated kernels and 2 without correlation."""
    bb = BatchBuilder()
    t0 = 1_700_000_000_000_000_000
    step = bb.add(Kind.STEP, "ProfilerStep#7", t0, t0 + 1_000_000, pid=1, tid=1, rank=0)
    bb.add_extra(step, "step", 7)
    bb.add(Kind.RUNTIME, "cudaGraphLaunch", t0 + 100, t0 + 200, pid=1, tid=1, correlation=10, rank=0)
    bb.add(Kind.RUNTIME, "cudaLaunchKernel", t0 + 300, t0 + 400, pid=1, tid=1, correlation=11, rank=0)
    for i in range(3):
        bb.add(Kind.KERNEL, f"graph_kernel_{i}", t0 + 1000 + 100 * i, t0 + 1050 + 100 * i, device=0, stream=7,
               correlation=10, graph_id=42, rank=0)
    for i in range(2):
        bb.add(Kind.KERNEL, "graph_kernel_late", t0 + 2000 + 100 * i, t0 + 2050 + 100 * i, device=0, stream=7,
               graph_id=42, rank=0)
    bb.add(Kind.KERNEL, "plain", t0 + 5000, t0 + 6000, device=0, stream=7, correlation=11, rank=0)
    return bb.build()


def test_cuda_graph_kernels_attributed_to_their_launch():
    batch = _graph_batch()
    table = build_spans({"rank": 0}, batch, SpanOptions())
    by_row = {int(r): i for i, r in enumerate(table.source_row.tolist()) if r >= 0}
    graph_launch = table.span_id[by_row[1]]
    graph_kernels = np.flatnonzero(batch.graph_id == 42)
    assert len(graph_kernels) == 5
    gid = table.attr("gpu.graph.id")
    for row in graph_kernels.tolist():
        i = by_row[row]
        assert table.link_id[i] == graph_launch
        assert gid.values[i] == 42 and gid.present[i]
    plain = by_row[8]
    assert table.link_id[plain] == table.span_id[by_row[2]]


def test_graph_kernels_aggregated_never_lost():
    batch = _graph_batch()
    table = build_spans({"rank": 0}, batch, SpanOptions(budget=10))
    assert _exported_counts(batch, table) == _gpu_counts(batch)
    assert len(table) <= 10


def test_resource_attributes():
    r = rank_of("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    meta = dict(r.meta, pid=4242, versions={"torch": "2.13.0", "cuda_runtime": 12040},
                resource={"k8s.pod.name": "pod-1"})
    table = build_spans(meta, r.batch, SpanOptions(service_name="trainer", resource_attributes={"team": "ml"}))
    res = table.resource
    assert res["service.name"] == "trainer" and res["host.name"] == r.meta["host_name"]
    assert res["process.pid"] == 4242 and res["otel_profiler.rank"] == 0
    assert res["otel_profiler.framework.torch.version"] == "2.13.0"
    assert res["gpu.cuda.runtime_version"] == "12040"
    assert res["team"] == "ml" and res["k8s.pod.name"] == "pod-1"


def test_events_split_over_batches_join_their_step_trace(tmp_path):
    r = rank_of("hta/nccl_parser_config/nccl_data.json.gz")
    b = r.batch
    gpu = np.isin(b.kind, np.asarray(GPU_OP_KINDS, np.uint8))
    cpu_part, gpu_part = b.take(~gpu), b.take(gpu)  # the live case: GPU records flushed later
    opts = SpanOptions(run_id="r", budget=10**6)
    whole = build_spans(r.meta, b, opts)
    first = build_spans(r.meta, cpu_part, opts)
    roots = {int(s) for s in first.span_id[first.parent_id == 0]}
    late = build_spans(r.meta, gpu_part, opts, known_steps=batch_steps(cpu_part))
    assert not (late.parent_id == 0).any() or set(late.span_id[late.parent_id == 0]) <= roots
    in_step = {(int(h), int(lo)) for h, lo in zip(first.trace_hi, first.trace_lo)}
    late_traces = Counter((int(h), int(lo)) in in_step for h, lo in zip(late.trace_hi, late.trace_lo))
    assert late_traces[True] > 0.9 * len(late)  # the rest: GPU ops launched outside every step
    # The exporter pipeline remembers steps across batches by itself ...
    assert _pipeline_traces(tmp_path / "a.pb", r.meta, [cpu_part, gpu_part], opts) == _trace_set(whole)
    # ... and holds events of a step whose STEP event comes in the next batch (flush mid-step).
    steps = batch_steps(b)
    mid = (steps[-1][1] + steps[-1][2]) // 2
    early = b.end_ns < mid
    assert early.sum() > 100 and (~early).sum() > 100
    got = _pipeline_traces(tmp_path / "b.pb", r.meta, [b.take(early), b.take(~early)], opts)
    assert got == _trace_set(whole)


def _trace_set(table) -> set[str]:
    return {table.trace_hex(i) for i in range(len(table))}


def _pipeline_traces(out, meta, batches, opts) -> set[str]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from otel_profiler.export.export_config import ExportConfig
    from otel_profiler.export.pipeline import Counters, Pipeline
    from otel_profiler.export.otlp import read_delimited

    pipeline = Pipeline(ExportConfig(pb_file=str(out), span_options=opts), Counters())
    for batch in batches:
        pipeline.handle(meta, batch)
    pipeline.close()
    traces = set()
    for raw in read_delimited(out.read_bytes()):
        for rs in ExportTraceServiceRequest.FromString(raw).resource_spans:
            for ss in rs.scope_spans:
                traces.update(sp.trace_id.hex() for sp in ss.spans)
    return traces


def test_annotation_heavy_steps_stay_near_the_budget():
    r = rank_of("hta/df_index_resolver/df_index_resolver.json.gz")  # ~400 annotations per step
    b = r.batch
    table = build_spans(r.meta, b, SpanOptions(budget=300))
    traces = Counter(zip(table.trace_hi.tolist(), table.trace_lo.tolist()))
    assert max(traces.values()) <= 300
    ids = set(table.span_id.tolist())
    assert all(int(p) in ids for p in table.parent_id.tolist() if p)  # no parent was lost
    # Every annotation is a span or counted in an aggregate span; torch's own ranges among them
    # (Optimizer.step#..., enumerate(DataLoader)#...) say so, recounted by name.
    kinds = table.attr("otel_profiler.kind")
    count = table.attr("otel_profiler.aggregate.count")
    n = {"annotation": 0, "torch_range": 0}
    for i in range(len(table)):
        kind = table.values[int(kinds.values[i])]
        if kind in n:
            n[kind] += int(count.values[i]) if count.present[i] else 1
    names = [b.strings[int(i)] for i in b.name[b.kind == Kind.USER_ANNOTATION]]
    torchs = sum(name.startswith(("Optimizer.", "enumerate(DataLoader)#", "ProfilerStep#")) for name in names)
    assert n == {"annotation": len(names) - torchs, "torch_range": torchs} and torchs > 0
    assert _exported_counts(b, table) == _gpu_counts(b)


@pytest.mark.parametrize("path", TRACES[:2] + ["hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"])
@pytest.mark.parametrize("budget", [2000, 200])
def test_cpu_ops_are_the_context_of_kept_launches(path, budget):
    """CPU ops become spans only around launch calls that are spans, at most budget // 4 per trace,
    never aggregated; a kept launch inside a kept CPU op hangs under the innermost such op."""
    b = rank_of(path).batch
    table = build_spans({}, b, SpanOptions(budget=budget))
    rows = table.source_row
    span_of_row = {int(r): i for i, r in enumerate(rows.tolist()) if r >= 0}
    kinds = table.attr("otel_profiler.kind")
    kind_of_span = [table.values[int(v)] for v in kinds.values]
    assert "cpu_op" not in {kind_of_span[i] for i in np.flatnonzero(rows < 0)}  # no aggregate
    op_spans = [i for i in range(len(table)) if rows[i] >= 0 and b.kind[rows[i]] == Kind.CPU_OP]
    call_rows = [int(r) for r in rows if r >= 0 and b.kind[r] in (Kind.RUNTIME, Kind.DRIVER)]
    if budget == 2000:
        assert op_spans and call_rows
    per_trace = Counter(zip(table.trace_hi[op_spans].tolist(), table.trace_lo[op_spans].tolist()))
    assert max(per_trace.values(), default=0) <= budget // 4
    call_starts: dict[int, list[int]] = {}
    for c in call_rows:
        call_starts.setdefault(int(b.tid[c]), []).append(int(b.start_ns[c]))
    calls_by_tid = {tid: np.sort(np.array(starts)) for tid, starts in call_starts.items()}  # per thread, sorted
    for i in op_spans:  # each exported op encloses a kept launch call on its thread
        r = rows[i]
        starts = calls_by_tid.get(int(b.tid[r]), np.array([], dtype=np.int64))
        first = int(np.searchsorted(starts, b.start_ns[r], side="left"))  # the first call at or after the op's start
        assert first < len(starts) and starts[first] < b.end_ns[r]
    kept_ops = np.array(sorted(int(rows[i]) for i in op_spans), dtype=np.int64)
    row_of_span = {int(span): int(rows[i]) for i, span in enumerate(table.span_id.tolist())}
    inside_kept_op = 0
    for c in call_rows:  # a launch under an exported op hangs under the innermost exported one
        enclosing = kept_ops[(b.tid[kept_ops] == b.tid[c]) & (b.start_ns[kept_ops] <= b.start_ns[c])
                             & (b.end_ns[kept_ops] > b.start_ns[c])].tolist()
        if enclosing:
            inside_kept_op += 1
            innermost = max(enclosing, key=lambda r: (b.start_ns[r], -b.end_ns[r]))
            prow = row_of_span[int(table.parent_id[span_of_row[c]])]
            # (an op with the very same interval is as innermost; an annotation may sit inside the op)
            assert b.kind[prow] == Kind.USER_ANNOTATION or \
                (b.start_ns[prow], b.end_ns[prow]) == (b.start_ns[innermost], b.end_ns[innermost])
    if budget == 2000:
        assert inside_kept_op > 0.5 * len(call_rows)


@pytest.mark.parametrize("how", ["nesting", "nesting_walk"])
def test_nesting_finds_the_innermost_open_container(how):
    """``nesting`` (vectorized) and its fallback for deep nesting, against the definition, on random
    intervals with ties and zero lengths."""
    from otel_profiler.spans import nesting as module

    nesting = getattr(module, how)
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        starts = rng.integers(0, 50, n)
        ends = starts + rng.integers(0, 30, n)
        order = np.lexsort((-ends, starts))
        s, e = starts[order].astype(np.int64), ends[order].astype(np.int64)
        expected = [max((j for j in range(i) if e[j] > s[i] and e[j] >= e[i]), default=-1) for i in range(n)]
        assert nesting(s, e).tolist() == expected


@pytest.mark.parametrize("path,budget", [("hta/df_index_resolver/df_index_resolver.json.gz", 200),
                                         ("hta/negative_queue_length_values_check/rank0.json.gz", 200),
                                         ("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", 60)])
def test_room_for_cpu_ops_never_costs_gpu_spans_it_does_not_use(path, budget):
    """With CPU ops in the batch, the GPU ops that are spans lose at most the room the CPU-op spans
    took: room they could not use (no launch kept, a tight budget) goes back to the GPU work."""
    b = rank_of(path).batch
    without_ops = b.take(b.kind != Kind.CPU_OP)

    def kinds(batch):
        rows = build_spans({}, batch, SpanOptions(budget=budget)).source_row
        rows = rows[rows >= 0]
        return Counter(batch.kind[rows].tolist())

    with_ops, plain = kinds(b), kinds(without_ops)
    gpu = sum(with_ops[k] for k in GPU_OP_KINDS)
    assert gpu >= sum(plain[k] for k in GPU_OP_KINDS) - with_ops[Kind.CPU_OP] > 0


def test_cpu_ops_make_no_trace_of_their_own():
    """CPU ops join the step or window trace their start falls in; alone, they make no trace, and an
    unrelated op changes no trace id."""
    t0 = 1_700_000_000_000_000_000
    bb = BatchBuilder()
    bb.add(Kind.CPU_OP, "aten::empty", t0, t0 + 10, pid=1, tid=1, rank=0)
    bb.add(Kind.CPU_OP, "aten::zeros", t0 + 20, t0 + 30, pid=1, tid=1, rank=0)
    assert len(build_spans({}, bb.build())) == 0

    def ids(extra_op: bool) -> set:
        bb = BatchBuilder()
        if extra_op:
            bb.add(Kind.CPU_OP, "aten::unrelated", t0 - 5, t0 - 1, pid=1, tid=1, rank=0)
        bb.add(Kind.CPU_OP, "aten::mm", t0 + 90, t0 + 400, pid=1, tid=1, rank=0)
        bb.add(Kind.RUNTIME, "cudaLaunchKernel", t0 + 100, t0 + 200, pid=1, tid=1, correlation=5, rank=0)
        bb.add(Kind.KERNEL, "gemm", t0 + 300, t0 + 900, device=0, stream=7, correlation=5, rank=0)
        table = build_spans({}, bb.build())
        names = [table.names[int(n)] for n in table.name]
        assert "aten::mm" in names and "aten::unrelated" not in names
        return set(zip(table.trace_hi.tolist(), table.trace_lo.tolist(), table.start_ns.tolist()))

    assert ids(False) == ids(True)
