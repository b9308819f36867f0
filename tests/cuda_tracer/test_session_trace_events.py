"""``trace_files.events_to_profile``: already-decoded events convert exactly as the file reader does
(the live Kineto source relies on it), and an unusable ``args`` costs only that args."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import msgspec
import numpy as np

from conftest import trace
from cuda_tracer.model.events import Kind
from cuda_tracer.trace_json.files import TraceEvent, events_to_profile, read_bytes, read_trace

TRACE = "hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz"


class _Doc(msgspec.Struct):
    traceEvents: list[dict]
    baseTimeNanoseconds: int = 0


def test_decoded_events_convert_like_the_file(shared_traces):
    path: Path = trace(TRACE)
    doc = msgspec.json.Decoder(_Doc, float_hook=Decimal).decode(read_bytes(str(path)))
    events = [TraceEvent(cat=e.get("cat"), name=e["name"], pid=e["pid"], tid=e["tid"], ts=e["ts"],
                         dur=e.get("dur", 0), args=msgspec.Raw(msgspec.json.encode(e.get("args", {}))))
              for e in doc.traceEvents if e.get("ph") == "X"]  # what a live source delivers
    ours = events_to_profile(events, doc.baseTimeNanoseconds, source=path.name)
    theirs = read_trace(str(path))
    complete = theirs.batch.take(~np.isin(theirs.batch.kind, [Kind.INSTANT, Kind.MEMORY]))
    assert len(ours.batch) == len(complete) > 50
    for column in ("kind", "start_ns", "end_ns", "correlation", "external_id", "stream", "device",
                   "grid_x", "bytes", "subkind"):
        np.testing.assert_array_equal(ours.batch.columns[column], complete.columns[column], column)
    assert ours.batch.names() == complete.names()
    assert ours.meta["source"] == theirs.meta["source"] == path.name


def test_an_args_that_is_not_an_object_keeps_the_event_and_loses_only_its_args(tmp_path):
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "dur": 1}
    events = [dict(kernel, ts=10, args={"correlation": 5, "stream": 9, "grid": [2, 1, 1]}),
              dict(kernel, ts=20, args=None), dict(kernel, ts=30, args=[1, 2]),
              dict(kernel, ts=40, args="junk"), dict(kernel, ts=50)]
    path = tmp_path / "trace.json"
    path.write_bytes(msgspec.json.encode({"traceEvents": events}))
    batch = read_trace(str(path)).batch
    assert batch.start_ns.tolist() == [10_000, 20_000, 30_000, 40_000, 50_000]
    assert batch.correlation.tolist() == [5, -1, -1, -1, -1]
    assert batch.stream.tolist() == [9, 7, 7, 7, 7]  # no args: the stream Kineto files it under
    assert batch.grid_x.tolist() == [2, -1, -1, -1, -1]


def test_live_args_keep_ids_when_kineto_metadata_is_not_json():
    from cuda_tracer.capture.kineto_events import _args

    def args(metadata, category="kernel"):  # an event with correlation 41, linked to the op 40
        return msgspec.json.decode(_args(category, 41, 40, metadata))

    good = args('"stream": 7, "correlation": 42')
    assert good == {"correlation": 42, "stream": 7, "External id": 40}
    null = args('"correlation": null, "stream": 7')
    assert null == {"correlation": 41, "stream": 7, "External id": 40}  # the event's own id fills it
    for junk in ('"stream": ', "{", '"a": 1}, {"b": 2', ""):
        assert args(junk) == {"correlation": 41, "External id": 40}
    assert args("", "cpu_op") == {"External id": 41}


def test_events_to_profile_survives_args_no_file_could_hold():
    """A live source's mistakes (None, empty text, two objects in one Raw) cost that event's args only."""
    def kernel(ts, args):
        return TraceEvent(cat="kernel", name="k", pid=0, tid=7, ts=ts, dur=1, args=args)

    events = [kernel(1, msgspec.Raw(b'{"correlation": 1}')), kernel(2, None), kernel(3, msgspec.Raw(b"")),
              kernel(4, msgspec.Raw(b'{"correlation": 9}, {"correlation": 8}')),
              kernel(5, msgspec.Raw(b'{"correlation": 5}'))]
    batch = events_to_profile(events, unit="ns").batch
    assert batch.start_ns.tolist() == [1, 2, 3, 4, 5]
    assert batch.correlation.tolist() == [1, -1, -1, -1, 5]
