"""``trace_files.events_to_profile``: already-decoded events convert exactly as the file reader does
(the live Kineto source relies on it), and ``decode_args`` never raises."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from conftest import trace
from cuda_tracer.trace_files import (TraceArgs, TraceEvent, decode_args, events_to_profile, read_bytes,
                                     read_trace)

TRACE = "hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz"


class _Doc(msgspec.Struct):
    traceEvents: list[TraceEvent]
    baseTimeNanoseconds: int = 0


def test_decoded_events_convert_like_the_file(shared_traces):
    path: Path = trace(TRACE)
    doc = msgspec.json.decode(read_bytes(str(path)), type=_Doc)
    ours = events_to_profile(doc.traceEvents, doc.baseTimeNanoseconds, source=path.name)
    theirs = read_trace(str(path))
    assert len(ours.batch) == len(theirs.batch) > 50
    for column in ("kind", "start_ns", "end_ns", "correlation", "external_id", "stream", "device"):
        np.testing.assert_array_equal(ours.batch.columns[column], theirs.batch.columns[column], column)
    assert ours.batch.names() == theirs.batch.names()
    assert ours.meta["source"] == theirs.meta["source"] == path.name


def test_decode_args_reads_kineto_fields_and_never_raises():
    args = decode_args('{"correlation": 7, "stream": 13, "External id": 3, "bytes": 4096}')
    assert (args.correlation, args.stream, args.external_id, args.bytes) == (7, 13, 3, 4096)
    for junk in ("", "{", "[1, 2]", b"\xff"):
        assert isinstance(decode_args(junk), TraceArgs)
