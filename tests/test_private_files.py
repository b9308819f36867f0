"""What the profiler writes is readable by its owner only, whatever the umask."""

from __future__ import annotations

import os
import stat

import pytest

from conftest import trace
from cuda_tracer.loading import load_profile
from cuda_tracer.profile import write_rank
from otel_profiler.live.output import write_summary
from otel_profiler.export.sinks.files import DelimitedFile, JsonLinesFile


@pytest.fixture
def open_umask():
    old = os.umask(0)
    yield
    os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_profile_folder_summary_and_export_files_are_user_only(tmp_path, open_umask):
    rank = load_profile([str(trace("hta/critical_path/alexnet/"
                                   "benchmark_result_2869224_1695835535_trace.json.gz"))]).ranks[0]
    folder = tmp_path / "profile"
    write_rank(str(folder), rank)
    assert write_summary(str(folder)) is not None
    assert mode(folder) == 0o700
    files = list(folder.iterdir())
    assert {p.name for p in files} >= {"summary.json", "rank-0.json", "rank-0.00000.events"}
    assert all(mode(p) == 0o600 for p in files), {p.name: oct(mode(p)) for p in files}
    for sink, name in ((JsonLinesFile, "spans.jsonl"), (DelimitedFile, "spans.pb")):
        out = sink(str(tmp_path / "exports" / name))
        out.write(b"{}\n")
        out.close()
        assert mode(tmp_path / "exports" / name) == 0o600
    assert mode(tmp_path / "exports") == 0o700
