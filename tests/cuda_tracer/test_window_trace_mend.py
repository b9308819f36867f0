"""A window's trace that torch wrote with stray bytes in a name (torch 2.4's Python tracer names a
function from freed memory now and then: invalid UTF-8 and raw control characters inside a string)
is mended and read whole; one that cannot be mended costs that window's events and one warning,
never the run's profiling.
"""

from __future__ import annotations

import gzip
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from cuda_tracer.capture.kineto import _read_window_file
from cuda_tracer.loading import load_profile
from cuda_tracer.model.events import EventBatch, Kind
from cuda_tracer.profile import TraceError
from cuda_tracer.trace_json.files import read_trace
from cuda_tracer.trace_json import mend
from cuda_tracer.trace_json.mend import CHUNK_BYTES, mend_trace_file
from otel_profiler import api
from otel_profiler.live.session import ProfilerWarning, current

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "hta" / "critical_path" / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz"
QUIET = dict(summary_at_exit=False, auto_steps=False, signal=False, steps="off")
# what the torch 2.4 windows held (two of them seen in one run), each put in place of a name's tail
GARBAGE = [b"\xc5", b"`\xc3\xe3\xa9H\x7f", b"\x01\x0a\x1f ok", "gemm µs→ok".encode()]


def _names(batch: EventBatch) -> list[str]:
    return [batch.strings[i] for i in batch.name.tolist()]


def _spoiled_copy(tmp_path):
    """The trace as torch 2.4 might have saved it: operator names spoiled by ``GARBAGE`` (and one
    that is valid UTF-8 of two and three bytes a character)."""
    text = gzip.decompress(TRACE.read_bytes())
    start = 0
    for garbage in GARBAGE:
        at = text.index(b'"name": "aten::', start) + len(b'"name": "aten::')
        text = text[:at] + garbage + text[text.index(b'"', at):]
        start = at + 1
    path = tmp_path / "window.json"
    path.write_bytes(text)
    return path


@pytest.mark.parametrize("chunk_bytes", [CHUNK_BYTES, 5])  # 5: characters split between reads
def test_a_spoiled_trace_is_mended_and_read_whole(tmp_path, monkeypatch, chunk_bytes):
    monkeypatch.setattr(mend, "CHUNK_BYTES", chunk_bytes)
    clean = read_trace(str(TRACE)).batch
    path = _spoiled_copy(tmp_path)
    with pytest.raises(TraceError):
        read_trace(str(path))

    mended = _read_window_file(str(path)).batch
    assert len(mended) == len(clean)
    assert np.array_equal(mended.kind, clean.kind) and np.array_equal(mended.start_ns, clean.start_ns)
    before, after = _names(clean), _names(mended)
    changed = [(b, a) for b, a in zip(before, after) if b != a]
    assert [a for _, a in changed] == ["aten::\ufffd", "aten::`\ufffd\ufffdH\x7f", "aten::    ok",
                                       "aten::gemm µs→ok"]  # the spoiled names, and nothing else
    assert not list(tmp_path.glob(".mended-*"))  # no copy left beside it


def test_a_valid_trace_reads_the_same_after_mending(tmp_path):
    path = tmp_path / "window.json"
    path.write_bytes(gzip.decompress(TRACE.read_bytes()))
    before = read_trace(str(path)).batch
    mend_trace_file(str(path))
    after = read_trace(str(path)).batch
    assert _names(before) == _names(after) and np.array_equal(before.end_ns, after.end_ns)


class _Unreadable:
    """A window's capture whose trace no reader takes (a stray quote in a name cannot be mended)."""

    def to_batch(self) -> EventBatch:
        raise TraceError("window.json", "invalid JSON (byte 12)")


def test_an_unreadable_window_costs_its_events_and_one_warning_not_the_run(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with api.Profiler(profile_dir=str(tmp_path), **QUIET):
            session = current()
            for n in range(6):
                time.sleep(0.001)
                api.step()
                if n in (1, 3):
                    session.windows.finished.append((_Unreadable(), None))
                    session.flush()
    ours = [str(w.message) for w in caught if issubclass(w.category, ProfilerWarning)]
    assert set(ours) == {"otel-profiler: the events of a detailed window are left out: torch's trace of it "
                         "could not be read (invalid JSON (byte 12))"}, ours  # (said once on stderr)
    steps = load_profile([str(tmp_path)]).ranks[0].batch.of_kind(Kind.STEP)
    assert sorted(steps.extra("step").values()) == [0, 1, 2, 3, 4, 5]
