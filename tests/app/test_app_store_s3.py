"""``otel-profiler serve --store s3://bucket/prefix``: the Profiler app over a store in S3 (moto's S3
server on 127.0.0.1 as the stand-in, started and stopped here). Real runs put in the bucket are listed
with the access rules of a local store, open on their report (event files copied on first open) and
in the JSON API; runs added to or removed from the bucket follow; an upload lands in the bucket; a
bucket that does not exist is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app_support import AppServer, cli, profile_run, wait_until

requests = pytest.importorskip("requests")
pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

BUCKET = "profiles"
STORE = f"s3://{BUCKET}/team-store"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two real runs (teams vision and nlp) and a corrupt one, as local folders."""
    root = tmp_path_factory.mktemp("s3-runs")
    vision = profile_run(root / "vision-run", "vision", "alice", "resnet")
    nlp = profile_run(root / "nlp-run", "nlp", "bob", "bert")
    broken = root / "broken-run"
    broken.mkdir()
    (broken / "rank-0.json").write_text("{not json")
    return {"vision-run": vision, "nlp-run": nlp, "broken-run": broken}


@pytest.fixture()
def s3(monkeypatch, tmp_path):
    """moto's S3 server on a free port of 127.0.0.1 with an empty bucket; the variables that point
    fsspec (in this process and in the commands it starts) at it; an S3 filesystem on it."""
    import s3fs

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        requests.post(endpoint + "/moto-api/reset", timeout=60).raise_for_status()  # moto's state is per process
        for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                            ("AWS_DEFAULT_REGION", "us-east-1"), ("FSSPEC_S3_ENDPOINT_URL", endpoint),
                            ("XDG_CACHE_HOME", str(tmp_path / "cache"))):
            monkeypatch.setenv(name, value)
        fs = s3fs.S3FileSystem(key="testing", secret="testing", endpoint_url=endpoint, skip_instance_cache=True)
        fs.mkdir(BUCKET)
        yield fs
    finally:
        server.stop()


def put_run(fs, folder: Path, run_id: str) -> None:
    for path in sorted(folder.iterdir()):
        if path.is_file() and not path.name.endswith(".lock"):
            fs.put_file(str(path), f"{BUCKET}/team-store/{run_id}/{path.name}")
    fs.invalidate_cache()


def listed(url: str, token: str) -> dict[str, dict]:
    reply = requests.get(url + "/api/runs", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return {r["run_id"]: r for r in reply.json()["runs"]}


def test_a_store_in_s3_is_served_with_the_access_rules(s3, runs, tmp_path):
    for run_id, folder in runs.items():
        put_run(s3, folder, run_id)
    for team in ("vision", "nlp", "ops"):
        cli("teams", "add", team, "--store", STORE)
    cli("users", "add", "root", "--team", "ops", "--role", "admin", "--no-password", "--store", STORE)
    cli("users", "add", "alice", "--team", "vision", "--role", "member", "--no-password", "--store", STORE)
    tokens = {name: cli("users", "token", name, "--store", STORE).stdout.strip() for name in ("root", "alice")}
    server = AppServer(STORE, log_folder=tmp_path, extra=("--sso-header", "X-Test-User"))
    try:
        assert f"serving {STORE} on" in server.log.read_text()
        every = wait_until(lambda: (r := listed(server.url, tokens["root"])) and len(r) == 3 and r, "the bucket's runs")
        assert every["broken-run"]["status"] == "corrupt" and "rank-0.json" in every["broken-run"]["reason"]
        assert (every["vision-run"]["team"], every["vision-run"]["user"]) == ("vision", "alice")
        assert set(listed(server.url, tokens["alice"])) == {"vision-run"}

        def get(path: str, who: str):
            return requests.get(server.url + path, headers={"Authorization": f"Bearer {tokens[who]}"}, timeout=120)

        assert get("/api/runs/vision-run", "alice").json() == json.loads((runs["vision-run"] / "summary.json").read_text())
        assert get("/api/runs/nlp-run", "alice").status_code == 404
        report = requests.get(server.url + "/runs/vision-run", headers={"X-Test-User": "alice"}, timeout=300)
        assert report.status_code == 200 and 'id="tl-canvas"' in report.text  # built from the copied event files

        s3.rm(f"{BUCKET}/team-store/nlp-run", recursive=True)
        put_run(s3, runs["vision-run"], "vision-again")
        wait_until(lambda: set(listed(server.url, tokens["root"])) == {"vision-run", "vision-again", "broken-run"},
                   "the bucket's changes")

        uploaded = cli("upload", str(runs["vision-run"]), "--url", server.url, "--run-id", "vision-uploaded",
                       "--spool", str(tmp_path / "spool"), stdin=tokens["alice"] + "\n")
        assert "uploaded as vision-uploaded" in uploaded.stderr
        s3.invalidate_cache()
        assert s3.exists(f"{BUCKET}/team-store/vision-uploaded/summary.json")
        assert "vision-uploaded" in wait_until(lambda: (r := listed(server.url, tokens["alice"])) and
                                               "vision-uploaded" in r and r, "the uploaded run")
        again = cli("upload", str(runs["vision-run"]), "--url", server.url, "--run-id", "vision-uploaded",
                    "--spool", str(tmp_path / "spool"), stdin=tokens["alice"] + "\n", check=False)
        assert again.returncode == 2 and "409" in again.stderr
    finally:
        server.stop()


def test_a_missing_bucket_is_one_line_and_exit_2(s3):
    done = cli("serve", "--store", "s3://no-such-bucket/prefix", "--port", "0", check=False)
    assert done.returncode == 2, done.stderr
    assert "s3://no-such-bucket/prefix" in done.stderr and len(done.stderr.strip().splitlines()) == 1
