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


# ----------------------------------------------------------------------------- folders of others
def _victim(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"the victim's own data\n")
    return victim


def _refused(path) -> str:
    from cuda_tracer.private_files import UnsafeFolderError, make_private_dir

    with pytest.raises(UnsafeFolderError) as info:
        make_private_dir(str(path))
    assert isinstance(info.value, OSError) and info.value.filename == str(path)
    return info.value.strerror


def test_private_folders_are_made_or_accepted_only_when_no_one_else_can_write_them(tmp_path, open_umask):
    from cuda_tracer.private_files import make_private_dir

    made = tmp_path / "a" / "b" / "spool"
    make_private_dir(str(made))
    assert mode(made) == 0o700
    make_private_dir(str(made))  # again: accepted as it is
    readable = tmp_path / "readable"
    readable.mkdir(mode=0o755)
    make_private_dir(str(readable))  # others may list it but not write it: used, left as it is
    assert mode(readable) == 0o755
    for bits, word in ((0o777, "0777"), (0o770, "0770"), (0o1777, "1777"), (0o702, "0702")):
        hostile = tmp_path / f"hostile-{bits:o}"
        hostile.mkdir()
        os.chmod(hostile, bits)
        assert _refused(hostile) == f"can be written by other users (mode {word})"
    own_link = tmp_path / "own-link"
    own_link.symlink_to(made)
    make_private_dir(str(own_link))  # a link of this user to a private folder is fine


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder of another user needs root")
def test_folders_and_links_of_another_user_are_refused(tmp_path):
    other = tmp_path / "others"
    other.mkdir(mode=0o700)
    os.chown(other, 4242, 4242)
    assert _refused(other) == "belongs to another user (uid 4242)"
    target = tmp_path / "mine"
    target.mkdir(mode=0o700)
    link = tmp_path / "their-link"
    link.symlink_to(target)
    os.lchown(link, 4242, 4242)
    assert _refused(link) == "is a symbolic link of another user (uid 4242)"


def test_private_files_never_follow_links_and_x_never_reuses_a_file(tmp_path):
    from cuda_tracer.private_files import open_private

    victim = _victim(tmp_path)
    before = victim.read_bytes()
    link = tmp_path / "link"
    link.symlink_to(victim)
    for m in ("w", "ab", "xb"):
        with pytest.raises(OSError):
            open_private(str(link), m)
    with pytest.raises(FileExistsError):
        open_private(str(victim), "xb")
    assert victim.read_bytes() == before
    with open_private(str(tmp_path / "new.pb"), "xb") as f:
        f.write(b"x")
    assert mode(tmp_path / "new.pb") == 0o600


def test_write_rank_into_a_folder_others_can_write_writes_nothing(tmp_path):
    from cuda_tracer.private_files import UnsafeFolderError

    victim = _victim(tmp_path)
    before = victim.read_bytes()
    rank = load_profile([str(trace("hta/trace_filter/sampled_rank-0.json.gz"))]).ranks[0]
    folder = tmp_path / "shared-prof"
    folder.mkdir()
    os.chmod(folder, 0o777)
    for name in ("rank-0.00000.events.tmp", "rank-0.json.tmp", "rank-0.00000.events", "rank-0.json"):
        (folder / name).symlink_to(victim)
    listing = sorted(p.name for p in folder.iterdir())
    with pytest.raises(UnsafeFolderError):
        write_rank(str(folder), rank)
    assert victim.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == listing


def test_spool_names_cannot_be_guessed_and_a_refused_folder_gets_nothing(tmp_path):
    import re

    from otel_profiler.export.sinks.files import Spool

    said: list[str] = []
    spools = [Spool(str(tmp_path / "spool"), 1 << 20, said.append) for _ in range(2)]
    for spool in spools:
        assert spool.put(b"\x0a\x00") is None
    names = sorted(p.name for p in (tmp_path / "spool").iterdir())
    assert len(names) == 2 and names[0] != names[1]
    assert all(re.fullmatch(rf"spool-{os.getpid()}-[0-9a-f]{{16}}-000001\.pb", n) for n in names), names
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    os.chmod(hostile, 0o777)
    spool = Spool(str(hostile), 1 << 20, said.append)
    said.clear()
    reasons = [spool.put(b"\x0a\x00") for _ in range(5)]
    assert all(r and "spool folder refused" in r for r in reasons) and spool.size == 0
    assert said == [f"OTLP spool {hostile} is not used: it can be written by other users (mode 0777); "
                    "nothing is written there, undelivered spans are dropped"]
    assert not list(hostile.iterdir())
