"""The JSON API, with the pages' access rules: ``GET /api/runs`` (the runs the caller may see, with
the landing page's filters), ``GET /api/runs/RUN_ID`` (that run's ``summary.json`` document) and
``PUT /api/runs/RUN_ID`` (an uploaded run, ``uploads``).
A script signs with ``Authorization: Bearer TOKEN``; a signed-in browser with its session."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, g, jsonify, request

from ..auth import accounts
from ..auth.access import may_see
from ..auth.models import Run
from ..storage.runs_index import RunQuery, query_runs, run_document
from ..storage.store import read_summary, valid_run_id
from ..storage.uploads import UploadError, store_upload

api = Blueprint("api", __name__, url_prefix="/api")


def _error(status: int, message: str) -> Response:
    response = jsonify({"error": message})
    response.status_code = status
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="otel-profiler"'
    return response


@api.before_request
def authenticate():
    header = request.headers.get("Authorization", "")
    if header:
        scheme, _, token = header.partition(" ")
        g.caller = accounts.token_caller(g.db, token.strip()) if scheme.lower() == "bearer" and token else None
    if g.caller is None:
        return _error(401, "sign in, or send Authorization: Bearer TOKEN with a live token")
    return None


@api.get("/runs")
def runs():
    try:
        query = RunQuery.from_args(request.args)
    except ValueError as exc:
        return _error(400, str(exc))
    rows, total = query_runs(g.db, g.caller, query)
    return jsonify({"runs": [run_document(r) for r in rows], "total": total, "page": query.page,
                    "per_page": query.per_page})


@api.get("/runs/<run_id>")
def run_summary(run_id: str):
    if not valid_run_id(run_id):
        return _error(400, "not a run id (letters, digits and ._- only)")
    run = g.db.get(Run, run_id)
    if run is None or not may_see(g.caller, run):
        return _error(404, f"no run {run_id!r} that you may see")
    try:
        return jsonify(read_summary(current_app.extensions["otel_profiler"]["settings"].store, run_id))
    except ValueError as exc:
        return _error(409 if run.status == "incomplete" else 422, f"run {run_id!r}: {exc}")


@api.put("/runs/<run_id>")
def upload(run_id: str):
    """An uploaded run: the body is a gzip tar of its profile folder (``otel-profiler upload``)."""
    settings = current_app.extensions["otel_profiler"]["settings"]
    request.max_content_length = settings.max_upload_bytes
    try:
        store_upload(settings.store, run_id, request.stream, g.caller, settings.max_upload_bytes * 4,
                     publish=settings.remote.publish if settings.remote else None)
    except UploadError as exc:
        return _error(exc.status, str(exc))
    current_app.extensions["otel_profiler"]["refresher"].scan_now()
    return jsonify({"run_id": run_id}), 201
