"""A store that jobs of several users write into is hostile ground for the app: a run folder whose
``summary.json`` is a link to a file the run's owner could not read, a FIFO, or a document with
absurd values (a count of 10**30, a lone surrogate in a name). Each such run is listed as unreadable
with its reason, on its own: the app reads nothing through the link, never blocks on the FIFO, and
keeps indexing every other run (a run added later is listed, a run removed later goes)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from app_support import AppServer, cli, copy_store, shared_runs, wait_until  # noqa: F401 (a fixture)

requests = pytest.importorskip("requests")
SECRET = "root-only-secret-value"


@pytest.fixture(scope="module")
def base_store(shared_runs, tmp_path_factory):
    return copy_store(shared_runs[0], tmp_path_factory.mktemp("hostile"))


def _listed(server: AppServer, token: str) -> dict[str, dict]:
    answer = requests.get(server.url + "/api/runs?page_size=500", headers={"Authorization": f"Bearer {token}"},
                          timeout=60)
    assert answer.status_code == 200, answer.text[:300]
    return {r["run_id"]: r for r in answer.json()["runs"]}


def test_links_fifos_and_absurd_values_make_only_their_own_run_unreadable(base_store, tmp_path):
    store = copy_store(base_store, tmp_path)
    outside = tmp_path / "private.json"
    outside.write_text(json.dumps({"secret": SECRET, "steps": {"count": 1}}))

    linked = store / "linked-run"
    shutil.copytree(store / "vision-run", linked)
    (linked / "summary.json").unlink()
    os.symlink(outside, linked / "summary.json")

    absurd = store / "absurd-run"
    shutil.copytree(store / "vision-run", absurd)
    summary = json.loads((absurd / "summary.json").read_text())
    summary["steps"]["count"] = 10 ** 30
    (absurd / "summary.json").write_text(json.dumps(summary))
    meta = json.loads((absurd / "rank-0.json").read_text())
    meta["host_name"] = "host\ud800"
    (absurd / "rank-0.json").write_text(json.dumps(meta))  # json escapes the lone surrogate as \ud800

    fifo = store / "fifo-run"
    shutil.copytree(store / "vision-run", fifo)
    (fifo / "summary.json").unlink()
    os.mkfifo(fifo / "summary.json")

    cli("teams", "add", "vision", "--store", str(store))
    cli("users", "add", "alice", "--team", "vision", "--role", "member", "--no-password", "--store", str(store))
    token = cli("users", "token", "alice", "--store", str(store)).stdout.strip()
    server = AppServer(store)
    try:
        runs = wait_until(lambda: (r := _listed(server, token)) and {"linked-run", "absurd-run", "fifo-run"} <= set(r)
                          and r, "the hostile runs to be listed")
        assert runs["vision-run"]["status"] == "ok"
        assert runs["linked-run"]["status"] == "corrupt" and "link" in runs["linked-run"]["reason"]
        assert runs["fifo-run"]["status"] == "corrupt" and "not a regular file" in runs["fifo-run"]["reason"]
        assert runs["absurd-run"]["status"] == "corrupt" and "out of range" in runs["absurd-run"]["reason"]
        assert "not valid text" in runs["absurd-run"]["reason"]

        headers = {"Authorization": f"Bearer {token}"}
        for run in ("linked-run", "fifo-run"):
            answer = requests.get(f"{server.url}/api/runs/{run}", headers=headers, timeout=60)
            assert SECRET not in answer.text and answer.status_code >= 400, (run, answer.status_code)
            page = requests.get(f"{server.url}/runs/{run}", headers=headers, timeout=60)
            assert SECRET not in page.text

        shutil.copytree(store / "vision-run", store / "later-run")  # the index goes on
        shutil.rmtree(store / "vision-run")
        wait_until(lambda: "later-run" in (r := _listed(server, token)) and "vision-run" not in r,
                   "a later run listed and a removed one gone")
    finally:
        server.stop()
