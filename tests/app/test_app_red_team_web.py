"""Red-team findings on the Profiler app's web side, each reproduced through the app itself (Flask's
test client over a store of real runs): the sign-in's ``next`` sends a browser only to a path on this
app; an upload to another team's run id is answered as one to a free id (no probing of other teams'
run names); an upload's refusals name archive members, never the server's folders; page numbers out
of range (huge, negative, zero) give a normal page and non-numbers a clear 400 line, on the landing
page and in the JSON API alike."""

from __future__ import annotations

import io
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from app_support import copy_store, shared_runs  # noqa: F401 (a fixture)

SSO = "X-Test-User"
PASSWORD = "correct horse 1"


@pytest.fixture(scope="module")
def base_store(shared_runs, tmp_path_factory) -> Path:
    return copy_store(shared_runs[0], tmp_path_factory.mktemp("red-team-web"))


@pytest.fixture()
def app(base_store, tmp_path):
    """The app over a copy of the store (vision-run, nlp-run, broken-run), indexed, with root (admin of
    ops, a password), alice (member of vision) and bob (member of nlp); ``X-Test-User`` signs in."""
    from otel_profiler.app.auth import accounts
    from otel_profiler.app.storage.database import open_database
    from otel_profiler.app.web.server import AppSettings, create_app

    store = copy_store(base_store, tmp_path)
    sessions = open_database(str(store))
    with sessions() as db:
        for team in ("ops", "vision", "nlp"):
            accounts.add_team(db, team, actor="test")
        accounts.add_user(db, "root", "ops", "admin", PASSWORD, actor="test")
        accounts.add_user(db, "alice", "vision", "member", None, actor="test")
        accounts.add_user(db, "bob", "nlp", "member", None, actor="test")
    flask_app = create_app(AppSettings(store=str(store), sso_header=SSO), sessions)
    flask_app.config["WTF_CSRF_ENABLED"] = False  # the CSRF check has its own test (test_app_api)
    flask_app.extensions["otel_profiler"]["refresher"].scan_now()
    return {"client": flask_app.test_client(), "store": store}


def _as(name: str) -> dict[str, str]:
    return {SSO: name}


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    """A gzip tar of plain files, in order (a name may come twice)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


# 1. the sign-in's `next`

@pytest.mark.parametrize("target", ["/\t/evil.example/phish", "/\\evil.example", "//evil.example",
                                    "https://evil.example", "/\n/evil", " /x", "/\r/evil", "\\\\evil.example",
                                    "/x\t", "http:/evil.example", "evil.example"])
def test_sign_in_never_sends_the_browser_off_this_app(app, target):
    answer = app["client"].post("/login", query_string={"next": target}, data={"name": "root", "password": PASSWORD})
    assert answer.status_code == 303 and answer.headers["Location"] == "/", (target, answer.headers.get("Location"))


def test_sign_in_refuses_the_reported_next_target_as_sent(app):
    answer = app["client"].post("/login?next=/%09/evil.example/phish", data={"name": "root", "password": PASSWORD})
    assert answer.status_code == 303 and answer.headers["Location"] == "/"


@pytest.mark.parametrize("target", ["/runs/abc?page=2", "/admin", "/?team=nlp&sort=user"])
def test_sign_in_keeps_a_path_on_this_app(app, target):
    answer = app["client"].post("/login", query_string={"next": target}, data={"name": "root", "password": PASSWORD})
    assert answer.status_code == 303 and answer.headers["Location"] == target


# 2. another team's run id cannot be probed by upload

@pytest.mark.parametrize("body", [b"", b"not a tar at all", "garbage-tar"])
def test_an_upload_to_another_teams_run_is_answered_as_to_a_free_id(app, body):
    body = _tar([("notes.txt", b"x")]) if body == "garbage-tar" else body
    client = app["client"]
    other = client.put("/api/runs/nlp-run", data=body, headers=_as("alice"))
    free = client.put("/api/runs/no-such-run", data=body, headers=_as("alice"))
    assert (other.status_code, other.get_json()) == (free.status_code, free.get_json())
    assert other.status_code == 400, other.get_json()
    mine = client.put("/api/runs/vision-run", data=body, headers=_as("alice"))
    assert (mine.status_code, mine.get_json()) == (409, {"error": "run 'vision-run' already exists"})


def test_an_upload_of_a_foreign_team_to_another_teams_run_is_answered_as_to_a_free_id(app):
    nlp_meta = (app["store"] / "nlp-run" / "rank-0.json").read_bytes()
    body = _tar([("rank-0.json", nlp_meta)])
    other = app["client"].put("/api/runs/nlp-run", data=body, headers=_as("alice"))
    free = app["client"].put("/api/runs/no-such-run", data=body, headers=_as("alice"))
    assert (other.status_code, other.get_json()) == (free.status_code, free.get_json())
    assert other.status_code == 403
    assert not (app["store"] / "no-such-run").exists()


def test_an_upload_over_another_teams_run_still_changes_nothing(app):
    before = sorted(p.name for p in (app["store"] / "nlp-run").iterdir())
    vision_meta = (app["store"] / "vision-run" / "rank-0.json").read_bytes()
    answer = app["client"].put("/api/runs/nlp-run", data=_tar([("rank-0.json", vision_meta)]), headers=_as("alice"))
    assert answer.status_code == 409
    assert sorted(p.name for p in (app["store"] / "nlp-run").iterdir()) == before


# 3. an upload's refusals name the archive's members, never the server's folders

def test_upload_refusals_never_show_a_server_path(app):
    meta = (app["store"] / "vision-run" / "rank-0.json").read_bytes()
    cases = {"duplicate": _tar([("rank-0.json", meta), ("rank-0.json", meta)]),
             "duplicate-dot": _tar([("rank-0.json", meta), ("./rank-0.json", meta)]),
             "escape": _tar([("../rank-0.json", meta)]),
             "stray": _tar([("rank-0.json", meta), ("notes.txt", b"x")]),
             "broken-json": _tar([("rank-0.json", b"{")]),
             "truncated": _tar([("rank-0.json", meta)])[:-40],
             "not-gzip": b"plain bytes"}
    server_paths = (str(app["store"]), str(app["store"].resolve()), ".otel-profiler-app", "incoming", "/tmp")
    messages = {}
    for run_id, body in cases.items():
        answer = app["client"].put(f"/api/runs/{run_id}", data=body, headers=_as("alice"))
        message = answer.get_json()["error"]
        messages[run_id] = message
        assert answer.status_code in (400, 422), (run_id, answer.status_code, message)
        assert not any(p in message for p in server_paths), (run_id, message)
        assert "\n" not in message
    assert messages["duplicate"] == "'rank-0.json': in the archive twice"
    assert messages["duplicate-dot"] == "'./rank-0.json': in the archive twice"
    assert not list((app["store"] / ".otel-profiler-app" / "incoming").iterdir())


# 4. page numbers out of range

@pytest.mark.parametrize("page", ["99999999999999999999999", "9" * 5000, "-3", "0", "+2", " 7 "])
def test_a_page_number_out_of_range_gives_the_nearest_page(app, page):
    answer = app["client"].get("/api/runs", query_string={"page": page, "per_page": 25}, headers=_as("root"))
    assert answer.status_code == 200, answer.get_data(as_text=True)[:300]
    document = answer.get_json()
    assert document["page"] == 1 and len(document["runs"]) == document["total"] == 3
    landing = app["client"].get("/", query_string={"page": page}, headers=_as("root"))
    assert landing.status_code == 200
    text = landing.get_data(as_text=True)
    assert "page 1 of 1" in text and text.count("data-run=") == 3


@pytest.mark.parametrize("page", ["x", "1.5", "1e3", "--1"])
def test_a_page_that_is_not_a_number_is_one_clear_line(app, page):
    answer = app["client"].get("/api/runs", query_string={"page": page}, headers=_as("root"))
    assert (answer.status_code, answer.get_json()) == (400, {"error": "page: a whole number (1 is the first page)"})
    landing = app["client"].get("/", query_string={"page": page}, headers=_as("root"))
    text = landing.get_data(as_text=True)
    assert landing.status_code == 200 and "Filters ignored: page: a whole number (1 is the first page)" in text
    assert "page 1 of 1" in text


def test_the_last_page_is_served_for_a_page_past_it(app):
    for n in range(30):
        shutil.copytree(app["store"] / "vision-run", app["store"] / f"vision-copy-{n:02d}")
    app["client"].application.extensions["otel_profiler"]["refresher"].scan_now()
    answer = app["client"].get("/api/runs?per_page=25&page=99999999999999999999999&sort=run_id&order=asc",
                               headers=_as("root"))
    document = answer.get_json()
    assert answer.status_code == 200 and document["total"] == 33 and document["page"] == 2
    assert [r["run_id"] for r in document["runs"]] == [f"vision-copy-{n:02d}" for n in range(23, 30)] + ["vision-run"]
    landing = app["client"].get("/?per_page=25&page=99999999999999999999999", headers=_as("root"))
    text = landing.get_data(as_text=True)
    assert landing.status_code == 200 and "page 2 of 2" in text and text.count("data-run=") == 8
    assert re.search(r'href="[^"]*page=1[^"]*">previous</a>', text)
