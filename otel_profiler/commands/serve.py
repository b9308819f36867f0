"""``otel-profiler serve --store STORE``: the Profiler app, a web application over a profile store
(landing page of runs, reports on demand, users and teams, a JSON API). Binds 127.0.0.1 by default."""

from __future__ import annotations

import argparse
import errno
import os

from cuda_tracer.profile import TraceError

from ..app.storage.locations import is_remote, local_path
from .users import open_accounts


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="the Profiler app: a web application over a profile store",
                              description="Serve a landing page of the store's runs, each run's report on "
                                          "demand, users and teams (`otel-profiler users`, `teams`) and a "
                                          "JSON API (/api/runs). Add the first admin with `otel-profiler "
                                          "teams add` and `otel-profiler users add` before signing in.")
    p.add_argument("--store", required=True,
                   help="the profile store: a folder of profile folders, or an fsspec URL such as "
                        "s3://bucket/prefix (needs the remote extra)")
    p.add_argument("--database", metavar="URL", help="a database URL instead of the store's SQLite database")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8470, help="port to listen on (0: any free port)")
    p.add_argument("--secure-cookies", action="store_true",
                   help="users reach the app through HTTPS (a TLS-terminating proxy): cookies are sent "
                        "over HTTPS only")
    p.add_argument("--trusted-proxies", type=int, default=0, metavar="N",
                   help="reverse proxies in front whose X-Forwarded-For/-Proto headers are believed")
    p.add_argument("--scan-interval", type=float, default=5.0, metavar="SECONDS",
                   help="how often the store is scanned for new and changed runs")
    p.add_argument("--jaeger-url", default="", metavar="URL",
                   help="Jaeger's address: each run links to its train.step traces there")
    p.add_argument("--grafana-url", default="", metavar="URL",
                   help="Grafana's address: each run links to the overview dashboard of its team, user, job "
                        "and host over its time range")
    p.add_argument("--sso-header", default="", metavar="HEADER",
                   help="single sign-on: the request header (e.g. X-Forwarded-User) in which a trusted "
                        "reverse proxy names the signed-in user; only behind a proxy that sets it on every "
                        "request and strips it from clients")
    p.add_argument("--max-upload-mb", type=int, default=2048, metavar="MB",
                   help="the largest upload accepted (compressed); it may unpack to 4 times that")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    remote = _remote_store(args.store)
    if remote is None and not os.path.isdir(local_path(args.store)):
        raise TraceError(args.store, "not a folder (the profile store)")
    if not 0 <= args.port <= 65535:
        raise TraceError("--port", f"{args.port}: not a port number")
    for name in ("jaeger_url", "grafana_url"):
        if getattr(args, name) and not getattr(args, name).startswith(("http://", "https://")):
            raise TraceError(f"--{name.replace('_', '-')}", f"{getattr(args, name)}: not an http(s) address")
    if args.max_upload_mb < 1:
        raise TraceError("--max-upload-mb", "must be at least 1")
    if args.scan_interval <= 0:
        raise TraceError("--scan-interval", "must be above 0")
    open_accounts(args).close()  # a clear line when the extra or the database is missing
    from ..app.storage.database import open_database
    from ..app.web.server import AppSettings, create_app, serve

    store = remote.mirror if remote else os.path.abspath(args.store.removeprefix("file://"))
    settings = AppSettings(store=store, remote=remote, secure_cookies=args.secure_cookies,
                           trusted_proxies=args.trusted_proxies, scan_interval_s=args.scan_interval,
                           max_upload_bytes=args.max_upload_mb << 20, sso_header=args.sso_header,
                           jaeger_url=args.jaeger_url, grafana_url=args.grafana_url)
    try:
        serve(create_app(settings, open_database(store, args.database)), args.host, args.port)
    except OSError as exc:
        busy = exc.errno == errno.EADDRINUSE
        hint = f"; another port: --port {args.port + 1}, or --port 0 for any free one" if busy else ""
        raise TraceError(f"{args.host}:{args.port}", f"cannot listen ({exc.strerror or exc}){hint}") from None
    return 0


def _remote_store(store: str):
    """The store behind an fsspec URL, reachable now (one clear line when it is not); None for a folder."""
    if not is_remote(store):
        return None
    try:
        from ..app.storage.remote_store import RemoteStore, RemoteStoreError
    except ImportError as exc:
        raise TraceError("otel-profiler[app]",
                         f"not installed ({exc}): pip install -e '.[app]' in the otel-profiler clone") from None
    try:
        remote = RemoteStore(store)
        remote.check()
    except RemoteStoreError as exc:
        raise TraceError("--store", str(exc)) from None
    except OSError as exc:
        raise TraceError("--store", f"cannot make the store's local mirror ({exc.strerror or exc})") from None
    return remote
