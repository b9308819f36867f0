"""What a rank says of its own profile: parts it could not write (a full disk, a refused folder) are
counted in its metadata and turn the line at exit into one that says the profile is incomplete."""

from __future__ import annotations

import errno
import json

import pytest

from otel_profiler.live.output import RankOutput
from otel_profiler.profiler_warnings import ProfilerWarning


def _output(folder) -> RankOutput:
    position = {"rank": 0, "local_rank": 0, "world_size": 1}
    return RankOutput(str(folder), "env", "run-1", position, {}, frozenset({"gpu"}))


def test_parts_not_written_are_counted_and_the_line_at_exit_says_incomplete(tmp_path):
    output = _output(tmp_path / "prof")
    assert output.written_line() == (f"otel-profiler: profile of rank 0 written to {tmp_path / 'prof'} "
                                     f"(`otel-profiler summary {tmp_path / 'prof'}`)")
    assert "parts_not_written" not in output.meta({}, {})
    full = OSError(errno.ENOSPC, "No space left on device")
    with pytest.warns(ProfilerWarning, match="cannot write the profile folder") as said:
        output.cannot_write(full, 120)
        output.cannot_write(full, 80)
    assert len(said) == 1  # once
    meta = json.loads(json.dumps(output.meta({}, {}), default=str))
    assert meta["parts_not_written"] == {"parts": 2, "events": 200, "reason": "No space left on device"}
    assert output.written_line() == (
        f"otel-profiler: warning: the profile of rank 0 in {tmp_path / 'prof'} is incomplete: 2 of its parts "
        f"(200 events) could not be written (No space left on device); what was written: "
        f"`otel-profiler summary {tmp_path / 'prof'}`")
