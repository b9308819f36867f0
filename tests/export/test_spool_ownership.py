"""Another local user cannot make a profiled job write into the victim's files: real training jobs
with a closed OTLP endpoint (everything they export goes to the spool) run against spool and profile
folders pre-created by "another user", as far as a root-run test can make one: a folder owned by
another uid (``os.chown``), a world-writable one, a spool path that is another user's symbolic link
to the victim's folder, each full of symbolic links to a victim file under every name the spool
used to take (``spool-<pid>-000001.pb`` for the next few thousand pids) and the profile folder's
temporary names. The victim file is never written, the job's exit code never changes; a refused
spool is one warning and its spans are counted as dropped; the user's own folder of links is used
without following a single link."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fault_kit import expected_requests, job_env, otlp_env, pb_requests, run_job, span_ids
from otlp_receiver import free_port

pytest.importorskip("torch")
pytestmark = pytest.mark.fault_process

JOB_EXIT = 7
OTHER_UID = 4242
LINKED_PIDS = 4000  # spool names of the next this many pids point at the victim
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="a folder of another uid needs root")


def _fill_with_links(folder: Path, victim: Path) -> None:
    start = os.getpid()
    for pid in range(start, start + LINKED_PIDS):
        (folder / f"spool-{pid}-000001.pb").symlink_to(victim)
    for name in ("rank-0.00000.events.tmp", "rank-0.json.tmp", "summary.json.tmp", "rank-0.json"):
        (folder / name).symlink_to(victim)


def _state(path: Path) -> tuple:
    """What must not change: a file's bytes and times, a folder's names."""
    if path.is_dir():
        return tuple(sorted(p.name for p in path.iterdir()))
    st = path.stat()
    return path.read_bytes(), st.st_mtime_ns, st.st_ctime_ns


def _job(tmp_path: Path, spool: Path, profile: Path | None = None):
    env = job_env(profile or tmp_path / "prof",
                  **otlp_env(f"http://127.0.0.1:{free_port()}", "http/protobuf", spool))
    return run_job(["--steps", "30", "--step-sleep", "0.02", "--exit-code", str(JOB_EXIT)], env)


def _hostile_spool(tmp_path: Path, case: str, victim: Path) -> tuple[Path, Path, str]:
    """The spool path a job is given, what must stay unchanged, and why the spool is refused."""
    shared = tmp_path / "shared"  # a sticky, world-writable folder, like /tmp
    shared.mkdir()
    os.chmod(shared, 0o1777)
    if case == "link-of-another-user":
        target = victim.parent
        spool = shared / "otlp-spool"
        spool.symlink_to(target, target_is_directory=True)
        os.lchown(spool, OTHER_UID, OTHER_UID)
        return spool, target, f"is a symbolic link of another user (uid {OTHER_UID})"
    spool = shared / "otlp-spool"
    spool.mkdir()
    _fill_with_links(spool, victim)
    if case == "another-user":
        os.chown(spool, OTHER_UID, OTHER_UID)
        os.chmod(spool, 0o755)
        return spool, spool, f"belongs to another user (uid {OTHER_UID})"
    os.chmod(spool, 0o777)
    return spool, spool, "can be written by other users (mode 0777)"


@pytest.mark.parametrize("case", [pytest.param("another-user", marks=ROOT_ONLY), "world-writable",
                                  pytest.param("link-of-another-user", marks=ROOT_ONLY)])
def test_a_spool_folder_of_another_user_is_refused_and_the_victim_untouched(tmp_path, case):
    victim_dir = tmp_path / "victim"
    victim_dir.mkdir(mode=0o700)
    victim = victim_dir / "notes.txt"
    victim.write_bytes(b"the victim's own file\n" * 100)
    spool, watched, why = _hostile_spool(tmp_path, case, victim)
    before = (_state(victim), _state(watched))
    out = _job(tmp_path, spool)
    assert out.returncode == JOB_EXIT, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr
    assert (_state(victim), _state(watched)) == before  # not a byte, not a file
    refused = [line for line in out.stderr.splitlines() if "is not used" in line]
    assert refused == [f"otel-profiler: warning: OTLP spool {spool} is not used: it {why}; nothing is "
                       "written there, undelivered spans are dropped"], out.stderr
    expected = len(span_ids(expected_requests(tmp_path / "prof", tmp_path / "expected.pb")))
    assert expected > 0
    dropped = re.search(r"span export dropped .*?(\d+) spans(?:,|$)", out.stderr, re.M)
    assert dropped and int(dropped.group(1)) == expected, out.stderr  # every span counted, none silent
    assert "otel-profiler replay" not in out.stderr  # nothing waits in a spool


def test_the_users_own_folder_of_links_is_used_without_following_one(tmp_path):
    victim = tmp_path / "notes.txt"
    victim.write_bytes(b"the victim's own file\n" * 100)
    spool = tmp_path / "otlp-spool"
    spool.mkdir(mode=0o700)
    _fill_with_links(spool, victim)
    links = _state(spool)
    before = _state(victim)
    out = _job(tmp_path, spool)
    assert out.returncode == JOB_EXIT, out.stderr[-3000:]
    assert _state(victim) == before
    new = sorted(set(_state(spool)) - set(links))
    assert new and all(re.fullmatch(r"spool-\d+-[0-9a-f]{16}-\d{6}\.pb", name) for name in new), new
    assert all((spool / name).is_symlink() for name in links)  # every link still there, unfollowed
    spooled = [s for name in new for s in span_ids(pb_requests(spool / name))]
    assert set(spooled) == set(span_ids(expected_requests(tmp_path / "prof", tmp_path / "expected.pb")))
    assert "dropped" not in out.stderr and "otel-profiler replay" in out.stderr, out.stderr


@ROOT_ONLY
def test_a_profile_folder_of_another_user_gets_no_part_and_the_victim_is_untouched(tmp_path):
    victim = tmp_path / "notes.txt"
    victim.write_bytes(b"the victim's own file\n" * 100)
    profile = tmp_path / "shared-prof"
    profile.mkdir()
    _fill_with_links(profile, victim)
    os.chown(profile, OTHER_UID, OTHER_UID)
    os.chmod(profile, 0o755)
    before = _state(victim)
    out = _job(tmp_path, tmp_path / "spool", profile=profile)
    assert out.returncode == JOB_EXIT, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr
    assert _state(victim) == before
    assert not list(profile.glob("*.events")) and (profile / "rank-0.json").is_symlink()
    lines = [line for line in out.stderr.splitlines() if "profile folder" in line]
    assert len(lines) == 1 and f"belongs to another user (uid {OTHER_UID})" in lines[0], out.stderr


@ROOT_ONLY
def test_a_profile_folder_swapped_for_a_link_mid_run_gets_nothing_more(tmp_path):
    """The profile folder is made in a folder another user can rename entries of. Once the job has
    written its first part, that user renames the job's folder away and puts a link of theirs to
    a folder of the victim's in its place: nothing more is written through the link (no part, no
    summary, no delivery notes of the exporter, which has spans it could not send), the job keeps
    its exit code, and one line says the profile folder was refused. The job is told to stop only
    once that line came: a job that ends right after the swap may have nothing more to write (its
    last events flushed just before), and then there is nothing to refuse."""
    import threading

    from app_support import wait_until
    from fault_kit import JOB

    shared = tmp_path / "shared"  # another user's, writable by all and not sticky: entries can be renamed
    shared.mkdir()
    os.chown(shared, OTHER_UID, OTHER_UID)
    os.chmod(shared, 0o777)
    profile, victim = shared / "run", tmp_path / "victim"
    victim.mkdir(mode=0o700)
    (victim / "notes.txt").write_text("the victim's own file\n")
    until = tmp_path / "stop-now"
    env = job_env(profile, **otlp_env(f"http://127.0.0.1:{free_port()}", "http/protobuf", tmp_path / "spool"))
    proc = subprocess.Popen([sys.executable, JOB, "--steps", "0", "--step-sleep", "0.02", "--until", str(until),
                             "--exit-code", str(JOB_EXIT)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    err_lines: list[str] = []
    reader = threading.Thread(target=lambda: err_lines.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        wait_until(lambda: (profile / "rank-0.json").exists(), "the job's first part")
        before = _state(victim)
        profile.rename(shared / "run.moved")
        profile.symlink_to(victim, target_is_directory=True)
        os.lchown(profile, OTHER_UID, OTHER_UID)
        wait_until(lambda: any("profile folder" in line for line in list(err_lines)),
                   "the next part's refusal", deadline_s=120)
        until.touch()
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(60)
    err = "".join(err_lines)
    assert proc.returncode == JOB_EXIT, err[-3000:]
    assert "Traceback" not in err, err
    assert _state(victim) == before, sorted(os.listdir(victim))
    refused = [line for line in err.splitlines() if "profile folder" in line]
    assert len(refused) == 1 and f"is a symbolic link of another user (uid {OTHER_UID})" in refused[0], err
