"""The Profiler app's access rules through its JSON API and command line, on the store's SQLite
database and on a real PostgreSQL server: each token sees only its team's runs, another team's run and
a guessed id answer 404, path tricks a clear 4xx, a removed user's token 401 at once, every grant and
removal is audited; the index follows the store incrementally and lists a corrupt run with its reason."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from app_support import AppServer, PostgresCluster, cli, copy_store, shared_runs, wait_until  # noqa: F401 (a fixture)

requests = pytest.importorskip("requests")


@pytest.fixture(scope="module")
def runs_store(shared_runs, tmp_path_factory):
    store, owners = shared_runs
    return copy_store(store, tmp_path_factory.mktemp("app-runs")), owners


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def backend(request):
    if request.param == "sqlite":
        yield None
        return
    cluster = PostgresCluster()
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def prepared(runs_store, backend, tmp_path_factory):
    """The store with teams vision, nlp and ops, an admin and one user of each team, made once per
    database (nine command-line runs): each test serves a copy of it."""
    store, owners = runs_store
    store = copy_store(store, tmp_path_factory.mktemp("app-prepared"))
    where = ["--database", _fresh_database(backend)] if backend else ["--store", str(store)]
    for team in ("vision", "nlp", "ops"):
        cli("teams", "add", team, *where)
    cli("users", "add", "root", "--team", "ops", "--role", "admin", *where, stdin="correct horse 1\n")
    cli("users", "add", "alice", "--team", "vision", "--role", "member", *where, stdin="alice pass 1\n")
    cli("users", "add", "bob", "--team", "nlp", "--role", "viewer", "--no-password", *where)
    tokens = {name: cli("users", "token", name, *where).stdout.strip() for name in ("root", "alice", "bob")}
    return store, where, tokens, owners


@pytest.fixture()
def app(prepared, backend, tmp_path):
    """A served copy of the prepared store (its app folder, with the SQLite database, copied too), or
    of its PostgreSQL database: each test starts from the same teams and users."""
    store, where, tokens, owners = prepared
    store = copy_store(store, tmp_path, with_app=True)
    where = ["--database", _copied_database(backend, where[1])] if backend else ["--store", str(store)]
    server = AppServer(store, where[1] if backend else None, extra=("--max-upload-mb", "1", "--sso-header", "X-Test-User",
                                                                      "--jaeger-url", "http://jaeger.invalid:16686",
                                                                      "--grafana-url", "http://grafana.invalid:3000"))
    try:
        yield {"url": server.url, "store": store, "where": where, "tokens": tokens, "owners": owners}
    finally:
        server.stop()


def _fresh_database(url: str, template: str = "") -> str:
    """A new database on the cluster at ``url``: empty, or a copy of database ``template``."""
    import uuid

    import sqlalchemy

    name = "app_" + uuid.uuid4().hex[:12]
    engine = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(sqlalchemy.text(f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else "")))
    engine.dispose()
    return url.rsplit("/", 1)[0] + "/" + name


def _copied_database(url: str, prepared_url: str) -> str:
    """A copy of the prepared database (its teams, users and tokens) for one test."""
    return _fresh_database(url, template=prepared_url.rsplit("/", 1)[1])


def get(app, path: str, token: str | None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.get(app["url"] + path, headers=headers, timeout=60)


def listed(app, token: str) -> list[dict]:
    return wait_until(lambda: (runs := get(app, "/api/runs", token).json()["runs"]) and runs, "the store's runs")


def test_each_token_sees_only_its_teams_runs(app):
    for name, team in (("alice", "vision"), ("bob", "nlp")):
        runs = listed(app, app["tokens"][name])
        assert [(r["run_id"], r["team"]) for r in runs] == [(f"{team}-run", team)]
        mine, other = f"{team}-run", next(r for r in app["owners"] if r != f"{team}-run")
        answer = get(app, f"/api/runs/{mine}", app["tokens"][name])
        assert answer.status_code == 200
        assert answer.json() == json.loads((app["store"] / mine / "summary.json").read_text())
        assert get(app, f"/api/runs/{other}", app["tokens"][name]).status_code == 404
        assert get(app, "/api/runs/no-such-run", app["tokens"][name]).status_code == 404


def test_the_admin_sees_every_run_and_a_corrupt_one_with_its_reason(app):
    runs = wait_until(lambda: r if len(r := listed(app, app["tokens"]["root"])) == 3 else None, "three runs")
    by_id = {r["run_id"]: r for r in runs}
    assert by_id["vision-run"]["user"] == "alice" and by_id["nlp-run"]["user"] == "bob"
    assert by_id["vision-run"]["service"] == "resnet" and by_id["vision-run"]["steps"] > 0
    assert by_id["broken-run"]["status"] == "corrupt" and "rank-0.json: not valid JSON" in by_id["broken-run"]["reason"]
    filtered = get(app, "/api/runs?team=nlp", app["tokens"]["root"]).json()
    assert [r["run_id"] for r in filtered["runs"]] == ["nlp-run"] and filtered["total"] == 1


def test_bad_ids_and_paths_get_a_clear_4xx_and_change_nothing(app):
    before = sorted(p.name for p in app["store"].iterdir())
    token = app["tokens"]["root"]
    listed(app, token)
    assert get(app, "/api/runs/x..y", token).status_code == 400
    for path in ("/api/runs/%2E%2E", "/api/runs/..%2F..%2Fetc%2Fpasswd", "/api/runs/../nlp-run/summary.json",
                 "/api/runs/nlp-run/..%2F..%2Fvision-run"):
        assert 400 <= get(app, path, token).status_code < 500, path
    assert get(app, "/api/runs?sort=secret", token).status_code == 400
    assert get(app, "/api/runs?per_page=100000", token).status_code == 400
    assert get(app, "/api/runs", None).status_code == 401
    assert get(app, "/api/runs", "otp_guessed").status_code == 401
    assert sorted(p.name for p in app["store"].iterdir()) == before


def test_a_removed_users_token_gets_401_at_once_and_the_audit_log_has_it(app):
    token = app["tokens"]["alice"]
    assert listed(app, token)
    cli("users", "remove", "alice", *app["where"])
    assert get(app, "/api/runs", token).status_code == 401
    assert get(app, "/api/runs/vision-run", token).status_code == 401
    bob = app["tokens"]["bob"]
    cli("users", "revoke", "bob", *app["where"])
    assert get(app, "/api/runs", bob).status_code == 401
    fresh = cli("users", "token", "bob", *app["where"]).stdout.strip()
    assert get(app, "/api/runs", fresh).status_code == 200
    log = _audit(app["where"])
    assert ("user.grant", "alice", "team=vision role=member") in log
    assert ("user.remove", "alice", "") in log and ("token.revoke", "bob", "1 token(s)") in log
    assert sum(1 for action, target, _ in log if action == "token.issue" and target == "bob") == 2


def _audit(where: list[str]) -> list[tuple[str, str, str]]:
    from otel_profiler.app.auth import accounts
    from otel_profiler.app.storage.database import open_database

    store, url = (where[1], None) if where[0] == "--store" else (None, where[1])
    with open_database(store, url)() as db:
        return [(e.action, e.target, e.detail) for e in accounts.audit_log(db)]


def test_the_command_line_refuses_bad_input_with_one_line(runs_store, tmp_path):
    store = copy_store(runs_store[0], tmp_path)
    cases = [(("users", "add", "x", "--team", "nope", "--role", "viewer", "--no-password", "--store", str(store)),
              "team 'nope' does not exist"),
             (("teams", "add", "../etc", "--store", str(store)), "team name '../etc'"),
             (("users", "remove", "ghost", "--store", str(store)), "user 'ghost' does not exist"),
             (("users", "token", "ghost"), "give the profile store"),
             (("teams", "list", "--database", "sqlite:////nonexistent/folder/app.db"), "cannot open the database"),
             (("serve", "--store", str(tmp_path / "missing")), "not a folder")]
    for args, expected in cases:
        done = cli(*args, check=False)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and expected in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    short = cli("users", "add", "x", "--team", "vision", "--role", "viewer", "--store", str(store),
                stdin="short\n", check=False)
    assert short.returncode == 2 and "at least 8 characters" in short.stderr
    import socket

    with socket.socket() as taken:  # a port something else listens on
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        busy = cli("serve", "--store", str(store), "--port", str(port), check=False)
    assert busy.returncode == 2 and busy.stderr.strip().splitlines() == [
        f"otel-profiler: error: 127.0.0.1:{port}: cannot listen (Address already in use); another port: "
        f"--port {port + 1}, or --port 0 for any free one"], busy.stderr


def test_the_index_follows_the_store_incrementally(runs_store, tmp_path):
    from otel_profiler.app.storage.database import open_database
    from otel_profiler.app.storage.runs_index import refresh

    store = copy_store(runs_store[0], tmp_path)
    sessions = open_database(str(store))
    with sessions() as db:
        assert refresh(db, str(store)) == 3
        assert refresh(db, str(store)) == 0  # nothing changed: nothing read again
        shutil.copytree(store / "vision-run", store / "vision-run-2")
        shutil.rmtree(store / "nlp-run")
        (store / "broken-run" / "rank-0.json").unlink()
        assert refresh(db, str(store)) == 3
        from otel_profiler.app.auth.models import Run

        assert sorted(r.run_id for r in db.query(Run)) == ["vision-run", "vision-run-2"]


def _login_form(session, url: str) -> str:
    import re

    page = session.get(url + "/login", timeout=60).text
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


def test_forms_need_their_csrf_token_and_failed_sign_ins_are_limited(app):
    session = requests.Session()
    token = _login_form(session, app["url"])
    no_token = session.post(app["url"] + "/login", data={"name": "root", "password": "correct horse 1"}, timeout=60)
    assert no_token.status_code == 400 and "CSRF" in no_token.text
    signed = session.post(app["url"] + "/login", data={"name": "root", "password": "correct horse 1",
                                                       "csrf_token": token}, allow_redirects=False, timeout=60)
    assert signed.status_code == 303
    cookie = signed.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    forged = session.post(app["url"] + "/admin/users/remove", data={"name": "alice"}, timeout=60)
    assert forged.status_code == 400
    assert "alice" in cli("users", "list", *app["where"]).stdout

    attacker = requests.Session()
    token = _login_form(attacker, app["url"])
    codes = [attacker.post(app["url"] + "/login", data={"name": "root", "password": f"guess {i}", "csrf_token": token},
                           timeout=60).status_code for i in range(12)]
    assert codes[:10] == [401] * 10 and codes[10:] == [429, 429]


def _store_names(store) -> list[str]:
    return sorted(p.name for p in store.iterdir() if p.name != ".otel-profiler-app")


def test_uploads_reach_the_landing_list_and_bad_ones_change_nothing(app, tmp_path):
    import io
    import tarfile

    source = tmp_path / "vision-upload"
    shutil.copytree(app["store"] / "vision-run", source)
    upload = ("upload", str(source), "--url", app["url"])
    done = cli(*upload, stdin=app["tokens"]["alice"] + "\n")
    assert "uploaded" in done.stderr
    runs = wait_until(lambda: [r["run_id"] for r in get(app, "/api/runs", app["tokens"]["alice"]).json()["runs"]
                               if r["run_id"] == "vision-upload"], "the uploaded run")
    assert runs == ["vision-upload"]
    assert get(app, "/api/runs/vision-upload", app["tokens"]["alice"]).json() == \
        json.loads((source / "summary.json").read_text())
    assert sorted(p.name for p in (app["store"] / "vision-upload").iterdir()) == \
        sorted(p.name for p in source.iterdir() if not p.name.endswith(".lock"))

    before = _store_names(app["store"])
    refusals = [(("upload", str(source), "--url", app["url"]), "alice", "409"),
                (("upload", str(source), "--url", app["url"], "--run-id", "bob-upload"), "bob", "403"),
                (("upload", str(app["store"] / "nlp-run"), "--url", app["url"], "--run-id", "planted"), "alice",
                 "403: the run's ml.team is 'nlp'"),
                (("upload", str(source), "--url", app["url"], "--run-id", "x..y"), "alice", "400"),
                (("upload", str(source), "--url", app["url"], "--run-id", "new"), "", "no API token")]
    for args, who, expected in refusals:
        refused = cli(*args, stdin=app["tokens"].get(who, "") + "\n", check=False)
        assert refused.returncode == 2 and expected in refused.stderr, (args, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1

    def put(run_id: str, body: bytes):
        return requests.put(f"{app['url']}/api/runs/{run_id}", data=body, timeout=60,
                            headers={"Authorization": f"Bearer {app['tokens']['alice']}"})

    def tar(members: dict[str, bytes]) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
        return buffer.getvalue()

    meta = (source / "rank-0.json").read_bytes()
    assert put("garbage", b"not a tar at all").status_code == 400
    assert put("escape", tar({"../escape.json": meta})).status_code == 400
    assert put("stray", tar({"rank-0.json": meta, "notes.txt": b"x"})).status_code == 400
    assert put("broken", tar({"rank-0.json": b"{"})).status_code == 400
    assert put("huge", os.urandom(2 << 20)).status_code == 413
    assert _store_names(app["store"]) == before
    assert not list((app["store"] / ".otel-profiler-app" / "incoming").iterdir())


def test_a_trusted_proxy_header_signs_in_a_known_user_only(app):
    def as_user(path: str, name: str):
        return requests.get(app["url"] + path, headers={"X-Test-User": name}, timeout=60, allow_redirects=False)

    runs = wait_until(lambda: as_user("/api/runs", "bob").json()["runs"], "bob's runs")
    assert [r["run_id"] for r in runs] == ["nlp-run"]
    assert as_user("/api/runs/vision-run", "bob").status_code == 404
    assert as_user("/api/runs", "ghost").status_code == 401
    assert as_user("/", "ghost").status_code == 302
    page = as_user("/", "bob").text
    assert 'data-run="nlp-run"' in page
    assert "http://jaeger.invalid:16686/search?service=bert&amp;operation=train.step" in page
    assert "http://grafana.invalid:3000/d/otel-profiler-overview/otel-profiler-overview?var-team=nlp&amp;var-user=bob" in page
    cli("users", "remove", "bob", *app["where"])
    assert as_user("/api/runs", "bob").status_code == 401


def test_behind_tls_the_session_cookie_is_secure_and_strict_headers_are_sent(tmp_path):
    from otel_profiler.app.auth import accounts
    from otel_profiler.app.storage.database import open_database
    from otel_profiler.app.web.server import AppSettings, create_app

    sessions = open_database(str(tmp_path))
    with sessions() as db:
        accounts.add_team(db, "ops", actor="test")
        accounts.add_user(db, "root", "ops", "admin", "correct horse 1", actor="test")
    app = create_app(AppSettings(store=str(tmp_path), secure_cookies=True, trusted_proxies=1), sessions)
    app.config["WTF_CSRF_ENABLED"] = False  # the CSRF check has its own test; this one is about cookies
    client = app.test_client()
    answer = client.post("/login", data={"name": "root", "password": "correct horse 1"},
                         headers={"X-Forwarded-Proto": "https"})
    assert answer.status_code == 303
    cookie = answer.headers["Set-Cookie"]
    assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert answer.headers["Strict-Transport-Security"].startswith("max-age=")
    assert answer.headers["X-Frame-Options"] == "DENY"
    for elsewhere in ("//evil.invalid/", "/\\evil.invalid/", "https://evil.invalid/"):
        answer = client.post("/login", query_string={"next": elsewhere},
                             data={"name": "root", "password": "correct horse 1"})
        assert answer.headers["Location"] == "/", elsewhere
    answer = client.post("/login", query_string={"next": "/admin"}, data={"name": "root", "password": "correct horse 1"})
    assert answer.headers["Location"] == "/admin"
