"""Uploads at a job's exit (``OTEL_PROFILER_UPLOAD``) to a real ``otel-profiler serve``: a live zero-code
job and ``otel-profiler run`` each put their run on the app (the JSON API and the landing page); with
the app down the job's exit code and output are those of the same job without upload, the upload
waits in the user-only spool and reaches the app once it is up; ``otel-profiler upload --retry`` and
the next upload deliver what a manual upload spooled; the token is never printed."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app_support import REPO, SCRIPT, AppServer, cli, free_port, helpers_of, live_job, profile_run, stop_helpers, wait_until

requests = pytest.importorskip("requests")
pytest.importorskip("torch")


@pytest.fixture()
def store(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    cli("teams", "add", "vision", "--store", str(store))
    cli("users", "add", "alice", "--team", "vision", "--role", "member", "--no-password", "--store", str(store))
    token = cli("users", "token", "alice", "--store", str(store)).stdout.strip()
    return store, token


def runs_of(url: str, token: str) -> dict[str, dict]:
    try:
        reply = requests.get(url + "/api/runs", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    except requests.ConnectionError:
        return {}
    return {r["run_id"]: r for r in reply.json()["runs"]}


@pytest.fixture()
def no_helpers_left(tmp_path):
    """After the test, the detached processes started for the test's folders have ended (they end by
    themselves once the upload is settled; any still there at the deadline is stopped)."""
    yield
    stop_helpers(tmp_path)


def profile_folders(output_dir: Path) -> list[Path]:
    return [p for p in output_dir.iterdir() if p.is_dir() and p.name not in ("upload-spool", "otlp-spool")]


def upload_env(url: str, token: str) -> dict[str, str]:
    return {"OTEL_PROFILER_UPLOAD": url, "OTEL_PROFILER_UPLOAD_TOKEN": token}


def test_a_live_zero_code_job_uploads_its_run_at_exit(store, tmp_path, no_helpers_left):
    store, token = store
    server = AppServer(store)
    try:
        out = tmp_path / "out"
        out.mkdir()
        job = live_job(out, "vision", "alice", upload_env(server.url, token))
        assert job.returncode == 0, job.stderr[-3000:]
        assert token not in job.stdout + job.stderr
        [folder] = profile_folders(out)
        run = wait_until(lambda: runs_of(server.url, token).get(folder.name), "the job's run on the app")
        assert (run["team"], run["user"], run["status"]) == ("vision", "alice", "ok")
        summary = requests.get(f"{server.url}/api/runs/{folder.name}", timeout=60,
                               headers={"Authorization": f"Bearer {token}"}).json()
        assert summary == json.loads((folder / "summary.json").read_text())
        assert sorted(p.name for p in (store / folder.name).iterdir()) == \
            sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))
        spool = out / "upload-spool"
        assert stat.S_IMODE(spool.stat().st_mode) == 0o700
        wait_until(lambda: not list(spool.glob("*.json")), "the spool to be emptied")
    finally:
        server.stop()


def test_otel_profiler_run_hands_the_upload_to_a_detached_process(store, tmp_path, no_helpers_left):
    store, token = store
    server = AppServer(store)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
        env.update(OTEL_PROFILER_OUTPUT_DIR=str(tmp_path / "out"), OTEL_TRACES_EXPORTER="none",
                   OTEL_METRICS_EXPORTER="none", OTEL_RESOURCE_ATTRIBUTES="ml.team=vision,enduser.id=alice",
                   **upload_env(server.url, token))
        folder = tmp_path / "elsewhere" / "by-run"  # not under OTEL_PROFILER_OUTPUT_DIR
        done = subprocess.run([sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(folder), "--",
                               sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=240,
                              cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        spool = tmp_path / "elsewhere" / "upload-spool"  # beside the folder, not in the working directory
        assert (f"otel-profiler: uploading {folder} to {server.url} in the background (if the app cannot be "
                f"reached it waits in {spool}: `otel-profiler upload --retry --spool {spool}`)") in done.stderr
        assert spool.is_dir() and not (tmp_path / "out" / "upload-spool").exists()
        assert token not in done.stdout + done.stderr
        run = wait_until(lambda: runs_of(server.url, token).get("by-run"), "run's upload on the app")
        assert run["status"] == "ok" and run["team"] == "vision"

        env.pop("OTEL_PROFILER_UPLOAD_TOKEN")
        missing = subprocess.run([sys.executable, "-m", "otel_profiler", "run", "--output-dir",
                                  str(tmp_path / "out" / "no-token"), "--", sys.executable, str(SCRIPT)],
                                 env=env, capture_output=True, text=True, timeout=240)
        assert missing.returncode == 0
        assert "OTEL_PROFILER_UPLOAD is set but OTEL_PROFILER_UPLOAD_TOKEN is not" in missing.stderr
    finally:
        server.stop()


def _normalized(text: str, folder: Path) -> str:
    """A job's output with its own run id and folder (which differ from run to run) taken out."""
    return text.replace(str(folder), "FOLDER").replace(folder.name, "RUN")


def test_with_the_app_down_the_job_is_unchanged_and_the_run_is_delivered_later(store, tmp_path, no_helpers_left):
    store, token = store
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    results = {}
    for mode, upload in (("off", {}), ("down", upload_env(url, token))):
        out = tmp_path / mode
        out.mkdir()
        job = live_job(out, "vision", "alice", upload)
        [folder] = profile_folders(out)
        results[mode] = (job.returncode, job.stdout, _normalized(job.stderr, folder))
        wait_until(lambda: (folder / "summary.json").exists(), "the summary written after the job")
    assert results["down"] == results["off"]
    assert results["off"][0] == 0 and "manual-sgd: 20 iterations" in results["off"][1]

    spool = tmp_path / "down" / "upload-spool"
    [folder] = profile_folders(tmp_path / "down")
    record = wait_until(lambda: [json.loads(p.read_text()) for p in spool.glob("*.json")
                                 if json.loads(p.read_text()).get("attempts")], "a failed first attempt")[0]
    assert record["folder"] == str(folder) and record["url"] == url and "cannot reach the app" in record["last"]
    assert token not in "".join(p.read_text() for p in spool.iterdir())  # the token never goes to disk
    assert stat.S_IMODE(spool.stat().st_mode) == 0o700

    server = AppServer(store, extra=("--port", str(port)))  # the app comes up: the detached process delivers
    try:
        run = wait_until(lambda: runs_of(url, token).get(folder.name), "the spooled run on the app", 240)
        assert run["status"] == "ok"
        wait_until(lambda: not list(spool.glob("*.json")), "the spool to be emptied")
    finally:
        server.stop()


def test_upload_retry_and_the_next_upload_deliver_what_was_spooled(store, tmp_path):
    store, token = store
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first, second, third = (profile_run(tmp_path / name, "vision", "alice") for name in ("first", "second", "third"))
    spool = tmp_path / "spool"
    for folder in (first, second):
        down = cli("upload", str(folder), "--url", url, "--spool", str(spool), stdin=token + "\n", check=False)
        assert down.returncode == 2 and len(down.stderr.strip().splitlines()) == 1
        assert "cannot reach the app" in down.stderr and "otel-profiler upload --retry" in down.stderr
        assert token not in down.stderr
    assert len(list(spool.glob("*.json"))) == 2
    nothing = cli("upload", "--retry", "--spool", str(spool), stdin=token + "\n", check=False)
    assert nothing.returncode == 1 and "2 upload(s) still wait" in nothing.stderr

    server = AppServer(store, extra=("--port", str(port)))
    try:
        token_file = tmp_path / "token"
        token_file.write_text(token + "\n")
        next_upload = cli("upload", str(third), "--url", url, "--spool", str(spool), "--token-file", str(token_file))
        assert "uploaded as third" in next_upload.stderr
        assert re.search(r"delivered: .*first to .*uploaded as first", next_upload.stderr)
        assert runs_of(url, token).keys() >= {"first", "second", "third"}
        assert not list(spool.glob("*.json")) and token not in next_upload.stderr
        empty = cli("upload", "--retry", "--spool", str(spool), stdin=token + "\n")
        assert "no upload waits" in empty.stderr
    finally:
        server.stop()


def test_upload_retry_delivers_and_says_what_the_app_refused(store, tmp_path):
    store, token = store
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    mine = profile_run(tmp_path / "mine", "vision", "alice")
    foreign = profile_run(tmp_path / "foreign", "nlp", "bob")
    spool = tmp_path / "spool"
    for folder in (mine, foreign):
        cli("upload", str(folder), "--url", url, "--spool", str(spool), stdin=token + "\n", check=False)
    server = AppServer(store, extra=("--port", str(port)))
    try:
        retried = cli("upload", "--retry", "--spool", str(spool), stdin=token + "\n", check=False)
        assert retried.returncode == 1, retried.stderr
        assert re.search(r"delivered: .*mine to .*uploaded as mine", retried.stderr)
        assert re.search(r"not delivered: .*foreign to .*refused \(403: the run's ml.team is 'nlp'", retried.stderr)
        assert "1 upload(s) still wait" in retried.stderr
        assert set(runs_of(url, token)) == {"mine"}
        assert not (store / "foreign").exists()
    finally:
        server.stop()


@pytest.mark.parametrize("args, expected", [
    (("upload", "--retry", "somewhere"), "--retry: takes no FOLDER"),
    (("upload", str(REPO)), "give FOLDER and --url URL, or --retry"),
    (("upload", str(REPO), "--url", "ftp://x"), "ftp://x: not an http(s) address"),
    (("upload", str(REPO), "--url", "http://127.0.0.1:1"), "not a profile folder (no rank-N.json)"),
])
def test_bad_upload_input_is_one_line_and_exit_2(args, expected):
    done = cli(*args, check=False)
    assert done.returncode == 2 and expected in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("upload, expected", [
    ({"OTEL_PROFILER_UPLOAD": "ftp://127.0.0.1/runs", "OTEL_PROFILER_UPLOAD_TOKEN": "t"}, "not an http(s) address"),
    ({"OTEL_PROFILER_UPLOAD": "http://127.0.0.1:9/"}, "OTEL_PROFILER_UPLOAD_TOKEN is not set"),
])
def test_a_zero_code_job_that_cannot_upload_says_so_in_one_line_and_runs_on(tmp_path, upload, expected):
    out = tmp_path / "out"
    out.mkdir()
    job = live_job(out, "vision", "alice", upload)
    assert job.returncode == 0, job.stderr[-3000:]
    lines = [line for line in job.stderr.splitlines() if "OTEL_PROFILER_UPLOAD" in line]
    assert len(lines) == 1 and expected in lines[0] and "will not be uploaded" in lines[0], job.stderr[-3000:]
    assert profile_folders(out) and not (out / "upload-spool").exists()


@pytest.mark.parametrize("case", ["others-can-write", pytest.param("link-of-another-user", marks=pytest.mark.skipif(
    os.geteuid() != 0, reason="a link of another uid needs root"))])
def test_a_zero_code_job_whose_upload_spool_is_unsafe_says_so_in_one_line(tmp_path, case):
    """The upload spool (``OTEL_PROFILER_OUTPUT_DIR/upload-spool``) is a folder others can write, or
    another user's link: the job says in one line that the profile will not be uploaded (as ``run``
    does), and nothing is written into the spool or through the link."""
    out = tmp_path / "out"
    out.mkdir()
    spool, target = out / "upload-spool", tmp_path / "target"
    target.mkdir(mode=0o700)
    if case == "others-can-write":
        spool.mkdir()
        os.chmod(spool, 0o777)
        why = "it can be written by other users (mode 0777)"
    else:
        spool.symlink_to(target, target_is_directory=True)
        os.lchown(spool, 4242, 4242)
        why = "it is a symbolic link of another user (uid 4242)"
    job = live_job(out, "vision", "alice", {"OTEL_PROFILER_UPLOAD": "http://127.0.0.1:9/",
                                            "OTEL_PROFILER_UPLOAD_TOKEN": "t"})
    assert job.returncode == 0, job.stderr[-3000:]
    lines = [line for line in job.stderr.splitlines() if "OTEL_PROFILER_UPLOAD" in line]
    assert lines == [f"otel-profiler: warning: OTEL_PROFILER_UPLOAD: cannot use the upload spool {spool} ({why}); "
                     "the profile will not be uploaded"], job.stderr[-3000:]
    assert profile_folders(out)
    assert not any(spool.iterdir()) and not any(target.iterdir())
