"""A small file may not cost gigabytes: an ``.events`` column that decompresses to far more than its
header's rows, a file whose rows are far more than its compressed size can hold, or an upload archive
that unpacks to far more than it weighs is refused with one clear error after a bounded amount of
decompressed data (memory and disk measured, not timed). The app answers such a run with 422 and
remembers it: the next open does not decompress it again."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from app_support import AppServer, cli, profile_run, wait_until
from cuda_tracer.loading import load_profile
from cuda_tracer.model.events import EventBatch
from cuda_tracer.profile import RankProfile, TraceError, write_rank

BOMB_BYTES = 512 << 20
"""Zeros in the bomb column: the loader must refuse it long before holding them."""
MEMORY_BOUND_MB = 400
EVENTS = "rank-0.00000.events"


class Zeros(io.RawIOBase):
    """``size`` zero bytes, read in pieces (never all in memory)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.left, 1 << 20)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def _batch(rows: int = 10) -> EventBatch:
    return EventBatch.from_columns(["kernel"], kind=[1] * rows, name=[0] * rows,
                                   start_ns=range(rows), end_ns=range(1, rows + 1))


def _rewritten(valid: bytes, replace: dict[str, tuple[bytes, int]], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    """The zip ``valid`` with the members of ``replace`` (name -> (head, zeros)) written as ``head``
    followed by that many zero bytes, streamed; the other members copied."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(valid)) as source, zipfile.ZipFile(out, "w", compression) as target:
        for name in source.namelist():
            if name not in replace:
                target.writestr(name, source.read(name))
                continue
            head, zeros = replace[name]
            info = zipfile.ZipInfo(name)
            info.compress_type = compression
            with target.open(info, "w", force_zip64=True) as member:
                member.write(head)
                shutil.copyfileobj(Zeros(zeros), member, 1 << 20)
    return out.getvalue()


def _npy_head(dtype: str, rows: int) -> bytes:
    """The ``.npy`` header of a column of ``rows`` values of ``dtype``."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": np.dtype(dtype).str, "fortran_order": False,
                                                  "shape": (rows,)})
    return buffer.getvalue()


@pytest.fixture(scope="module")
def valid_events() -> bytes:
    buffer = io.BytesIO()
    _batch().save(buffer)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def bomb_events(valid_events) -> bytes:
    """The project's writer's file for 10 events, its ``start_ns`` column followed by 512 MiB of
    zeros (the column's header still says 10 rows): about 500 kB."""
    return _rewritten(valid_events, {"start_ns.npy": (_npy_head("<i8", 10), BOMB_BYTES)})


def _folder(root: Path, events: bytes) -> Path:
    folder = root / "run"
    path = write_rank(str(folder), RankProfile(meta={"rank": 0}, batch=_batch()))
    Path(path).write_bytes(events)
    return folder


def _refusal(folder: Path) -> TraceError:
    with pytest.raises(TraceError) as refused:
        load_profile([str(folder)])
    return refused.value


def test_a_column_larger_than_its_header_says_is_refused_naming_the_file(tmp_path, bomb_events):
    refused = _refusal(_folder(tmp_path, bomb_events))
    assert refused.path == str(tmp_path / "run" / EVENTS)
    assert "start_ns.npy" in refused.problem and "10 rows" in refused.problem, refused.problem
    assert "\n" not in str(refused)


def _zero_rows(valid: bytes, rows: int) -> bytes:
    """A well-formed file of ``rows`` events whose every column is zeros (each header honest)."""
    from cuda_tracer.model.events import COLUMNS

    return _rewritten(valid, {f"{c}.npy": (_npy_head(dt.str, rows), rows * dt.itemsize) for c, dt in COLUMNS.items()})


def test_rows_beyond_what_the_compressed_size_can_hold_are_refused(tmp_path, valid_events):
    """A million rows of zeros: 122 MiB in a file of about 150 kB."""
    refused = _refusal(_folder(tmp_path, _zero_rows(valid_events, 1 << 20)))
    assert "times" in refused.problem and "compressed size" in refused.problem, refused.problem


def test_the_files_of_a_run_share_one_bound(tmp_path, valid_events):
    """Three parts of 80,000 zero rows (10 MB each): each alone within a file's bound, together past
    the run's (what the app reads a run under)."""
    from cuda_tracer.model.bounded import run_allowance

    part = _zero_rows(valid_events, 80_000)
    folder = tmp_path / "run"
    for number in range(3):
        Path(write_rank(str(folder), RankProfile(meta={"rank": 0}, batch=_batch()), part=number)).write_bytes(part)
    assert len(load_profile([str(folder)]).batch()) == 3 * 80_000
    with run_allowance("the run's event files"):
        refused = _refusal(folder)
    assert "the run's event files" in refused.problem, refused.problem


def test_a_member_compressed_with_another_method_than_deflate_is_refused(tmp_path, valid_events):
    """bzip2 (and LZMA) members are decompressed by ``zipfile`` without an output bound: refused
    before any of their data is read (the project writes deflate only)."""
    refused = _refusal(_folder(tmp_path, _rewritten(valid_events, {}, zipfile.ZIP_BZIP2)))
    assert "compression" in refused.problem and "deflate" in refused.problem, refused.problem


def test_the_summary_command_says_one_line_and_exits_2(tmp_path, bomb_events):
    folder = _folder(tmp_path, bomb_events)
    done = cli("summary", str(folder), check=False)
    assert done.returncode == 2, done.stderr[-500:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and EVENTS in lines[0] and "start_ns.npy" in lines[0], lines


PEAK_SCRIPT = """
import resource, sys
from cuda_tracer.loading import load_profile
from cuda_tracer.profile import TraceError
try:
    load_profile([sys.argv[1]])
except TraceError:
    pass
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


def _peak_mb(folder: Path) -> int:
    done = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, str(folder)], capture_output=True, text=True,
                          check=True, timeout=300)
    return int(done.stdout.split()[-1])


def test_loading_the_bomb_keeps_the_memory_of_loading_a_valid_file(tmp_path, valid_events, bomb_events):
    baseline = _peak_mb(_folder(tmp_path / "valid", valid_events))
    peak = _peak_mb(_folder(tmp_path / "bomb", bomb_events))
    assert peak - baseline < MEMORY_BOUND_MB, (baseline, peak)


def _archive(members: dict[str, int]) -> bytes:
    """A gzip tar of members named ``name`` holding that many zero bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, size in members.items():
            info = tarfile.TarInfo(name)
            info.size = size
            archive.addfile(info, Zeros(size))
    return buffer.getvalue()


def test_an_archive_that_unpacks_to_far_more_than_it_weighs_stops_while_unpacking(tmp_path):
    from otel_profiler.app.storage.uploads import UploadError, _unpack

    body = _archive({EVENTS: 256 << 20})  # about 250 kB; the app's unpack limit would allow 1 GiB
    folder = tmp_path / "unpacked"
    folder.mkdir()
    with pytest.raises(UploadError) as refused:
        _unpack(io.BytesIO(body), str(folder), 1 << 30)
    written = sum(p.stat().st_size for p in folder.iterdir())
    assert refused.value.status == 413 and "compressed size" in str(refused.value), str(refused.value)
    assert written < 64 << 20, written


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    return profile_run(tmp_path_factory.mktemp("bounds") / "vision-run", "vision", "alice")


def test_the_app_answers_422_and_remembers_the_run_as_unreadable(real_run, tmp_path, bomb_events):
    store = tmp_path / "store"
    run = store / "bomb-run"
    shutil.copytree(real_run, run)
    for events in run.glob("rank-0.*.events"):
        events.unlink()
    (run / EVENTS).write_bytes(bomb_events)
    cli("teams", "add", "vision", "--store", str(store))
    cli("users", "add", "alice", "--team", "vision", "--role", "member", "--no-password", "--store", str(store))
    token = cli("users", "token", "alice", "--store", str(store)).stdout.strip()
    server = AppServer(store, extra=("--sso-header", "X-Test-User"))
    try:
        import requests

        wait_until(lambda: requests.get(server.url + "/api/runs", headers={"Authorization": f"Bearer {token}"},
                                        timeout=60).json()["runs"], "the run to be listed")

        def open_report():
            return requests.get(server.url + "/runs/bomb-run", headers={"X-Test-User": "alice"}, timeout=300)

        first = open_report()
        assert first.status_code == 422, first.status_code
        assert EVENTS in first.text and "start_ns.npy" in first.text and str(store) not in first.text
        with open(run / EVENTS, "r+b") as f:  # a valid file now, the run's signature unchanged
            f.truncate(0)
            _batch().save(f)
        again = open_report()
        assert again.status_code == 422 and "start_ns.npy" in again.text, again.status_code
    finally:
        server.stop()
