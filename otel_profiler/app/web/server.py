"""The app put together: a Flask application over a store and a database (pages, JSON API, sign-in
sessions in a signed cookie backed by the sessions table, CSRF protection on every form, a limit on
failed sign-ins, secure cookie flags behind TLS), and serving it with waitress."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from flask import Flask, g, jsonify, request, session
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from flask_wtf.csrf import CSRFProtect
from jinja2 import DictLoader
from sqlalchemy.orm import Session, sessionmaker
from werkzeug.exceptions import HTTPException
from werkzeug.middleware.proxy_fix import ProxyFix

from ..auth import accounts
from ..auth.models import Setting
from ..storage.locations import app_folder
from ..storage.live_capture import RankReports
from ..storage.runs_index import Refresher
from .reports import ReportCache
from .templates import PAGES


@dataclass(frozen=True)
class AppSettings:
    store: str
    secure_cookies: bool = False  # users reach the app through HTTPS (a TLS-terminating proxy)
    trusted_proxies: int = 0  # X-Forwarded-* hops to believe (a reverse proxy in front)
    login_limit: str = "10 per minute"  # failed sign-ins from one address
    scan_interval_s: float = 5.0
    max_upload_bytes: int = 2 << 30  # one uploaded run, compressed
    jaeger_url: str = ""  # links to the run's traces
    grafana_url: str = ""  # links to the run's dashboard
    sso_header: str = ""  # a trusted reverse proxy names the signed-in user in this header
    remote: Any = None  # remote_store.RemoteStore when the store is an fsspec URL (``store``: its mirror)


def secret_key(sessions: sessionmaker[Session]) -> str:
    """The key that signs session cookies: made once, kept in the database (shared by every server
    on the same database, unchanged across restarts)."""
    with sessions() as db:
        row = db.get(Setting, "secret_key")
        if row is None:
            row = Setting(name="secret_key", value=secrets.token_hex(32))
            db.add(row)
            db.commit()
        return row.value


def create_app(settings: AppSettings, sessions: sessionmaker[Session]) -> Flask:
    from .json_api import api
    from .pages import make_pages

    app = Flask(__name__)
    app.jinja_loader = DictLoader(PAGES)
    app.config.update(SECRET_KEY=secret_key(sessions), SESSION_COOKIE_HTTPONLY=True,
                      SESSION_COOKIE_SAMESITE="Lax", SESSION_COOKIE_SECURE=settings.secure_cookies,
                      SESSION_COOKIE_NAME="otel_profiler_session", MAX_CONTENT_LENGTH=1 << 20,
                      WTF_CSRF_TIME_LIMIT=None)
    if settings.trusted_proxies:
        # Flask's documented way to add WSGI middleware, which mypy reads as replacing a method
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=settings.trusted_proxies,  # type: ignore[method-assign]
                                x_proto=settings.trusted_proxies, x_host=settings.trusted_proxies)
    remote = settings.remote
    app.extensions["otel_profiler"] = {
        "settings": settings, "sessions": sessions,
        "reports": ReportCache(settings.store, app_folder(settings.store) / "reports",
                               prepare=remote.fetch_events if remote else None),
        "rank_reports": RankReports(),  # running jobs' reports, written in batches
        "refresher": Refresher(sessions, settings.store, settings.scan_interval_s,
                               before_scan=remote.sync if remote else None),
    }
    csrf = CSRFProtect(app)
    limiter = Limiter(get_remote_address, app=app, storage_uri="memory://", headers_enabled=True)
    app.register_blueprint(make_pages(limiter, settings.login_limit))
    csrf.exempt(api)  # read-only routes; a script signs with its bearer token, not a cookie
    app.register_blueprint(api)

    @app.before_request
    def open_db() -> None:
        g.db = sessions()
        g.caller = accounts.session_caller(g.db, session.get("key"))
        if g.caller is None and settings.sso_header and request.headers.get(settings.sso_header):
            g.caller = accounts.named_caller(g.db, request.headers[settings.sso_header])

    @app.teardown_request
    def close_db(_exc) -> None:
        db = g.pop("db", None)
        if db is not None:
            db.close()

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException):
        if request.path.startswith("/api/"):
            return jsonify({"error": exc.description or exc.name}), exc.code
        return exc

    @app.after_request
    def safety_headers(response):
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        if settings.secure_cookies:
            response.headers.setdefault("Strict-Transport-Security", "max-age=31536000")
        return response

    return app


def state(app: Flask) -> dict:
    return app.extensions["otel_profiler"]


def serve(app: Flask, host: str, port: int, threads: int = 16) -> None:
    """Serve ``app`` with waitress until interrupted; the store is scanned in the background (the
    first scan of a large store lists runs as it goes)."""
    from waitress import create_server

    refresher: Refresher = state(app)["refresher"]
    refresher.start()
    server = create_server(app, host=host, port=port, threads=threads, ident="otel-profiler")
    settings = state(app)["settings"]
    shown = settings.remote.shown if settings.remote else settings.store
    print(f"otel-profiler: serving {shown} on http://{_url_host(host)}:{server.effective_port}/", flush=True)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        refresher.stop()
        server.close()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host

