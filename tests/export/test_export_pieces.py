"""``otel-profiler export`` in pieces of whole steps (``cuda_tracer.model.batch_pieces``): the pieces cover
a real trace's rows once, each begins with a step, and the spans exported piece by piece through the
pipeline equal, field for field, the spans of the whole batch at once."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cuda_tracer.model.batch_pieces import anchor_times, step_pieces
from cuda_tracer.model.events import Kind
from cuda_tracer.loading import load_profile
from otel_profiler.export.pipeline import Counters, ExportConfig, Pipeline
from otel_profiler.spans.options import SpanOptions

from conftest import trace

STEPPED = ["hta/df_index_resolver/df_index_resolver.json.gz",
           "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
           "hta/negative_queue_length_values_check/rank0.json.gz",
           "hta/trace_diff/control/control.json.gz"]


def _batch(rel: str):
    profile = load_profile([str(trace(rel))])
    return profile.ranks[0]


@pytest.mark.parametrize("rel", STEPPED)
def test_pieces_cover_every_row_once_and_begin_with_a_step(rel):
    rank = _batch(rel)
    b = rank.batch
    pieces = list(step_pieces(b, piece_rows=len(b) // 5))
    assert len(pieces) >= 3
    assert sum(map(len, pieces)) == len(b)
    joined = np.concatenate([np.sort(np.stack([p.start_ns, p.end_ns, p.kind, p.correlation], 1)
                                     .view([("", np.int64)] * 4).ravel()) for p in pieces])
    whole = np.sort(np.stack([b.start_ns, b.end_ns, b.kind, b.correlation], 1).view([("", np.int64)] * 4).ravel())
    assert (np.sort(joined) == whole).all()
    for p in pieces[1:]:
        steps = p.start_ns[p.kind == Kind.STEP]
        assert len(steps) and anchor_times(p).min() == steps.min()  # a piece begins where a step does


def _export(rank, options: SpanOptions, pieces: list, tmp_path) -> list[dict]:
    path = tmp_path / f"spans-{len(pieces)}.jsonl"
    pipeline = Pipeline(ExportConfig(json_file=str(path), span_options=options), Counters())
    for piece in pieces:
        pipeline.handle(rank.meta, piece)
    pipeline.close()
    spans = [span for line in path.read_text().splitlines()
             for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]]
    return sorted(spans, key=lambda s: (s["traceId"], s["spanId"]))


@pytest.mark.parametrize("rel", STEPPED)
@pytest.mark.parametrize("window_ns", [10**10, 10**8])
def test_spans_exported_in_pieces_equal_the_whole_batch(rel, window_ns, tmp_path):
    rank = _batch(rel)
    options = SpanOptions(run_id="test", window_ns=window_ns)
    pieces = list(step_pieces(rank.batch, piece_rows=len(rank.batch) // 5, window_ns=window_ns))
    assert len(pieces) >= 2
    whole = _export(rank, options, [rank.batch], tmp_path)
    assert len(whole) > 1000
    assert _export(rank, options, pieces, tmp_path) == whole


def test_a_batch_without_steps_is_one_piece():
    rank = _batch(STEPPED[0])
    b = rank.batch.take(np.flatnonzero(rank.batch.kind != Kind.STEP))
    assert [len(p) for p in step_pieces(b, piece_rows=100)] == [len(b)]
