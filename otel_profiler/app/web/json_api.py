"""The JSON API, with the pages' access rules: ``GET /api/runs`` (the runs the caller may see, with
the landing page's filters), ``GET /api/runs/RUN_ID`` (that run's ``summary.json`` document),
``PUT /api/runs/RUN_ID`` (an uploaded run, ``uploads``), and capture on demand across a running job
(``live_capture``): ``POST /api/runs/RUN_ID/ranks/RANK`` (a rank reports its step and hears of the
capture requests), ``GET /api/runs/RUN_ID/ranks`` (the ranks and requests of a running job) and
``POST /api/runs/RUN_ID/captures`` (capture N steps on every rank).
A script signs with ``Authorization: Bearer TOKEN``; a signed-in browser with its session."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, g, jsonify, request

from ..auth import accounts
from ..auth.access import may_see
from ..auth.models import Run
from ..storage.live_capture import CaptureError, RankReports, live_run, request_capture
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


def _reports() -> RankReports:
    return current_app.extensions["otel_profiler"]["rank_reports"]


def _json_body() -> dict:
    body = request.get_json(silent=True)
    return body if isinstance(body, dict) else {}


def _number(body: dict, key: str, kind: type, default=None):
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise CaptureError(400, f"{key} must be a number")
    return kind(value)


@api.post("/runs/<run_id>/ranks/<int:rank>")
def rank_report(run_id: str, rank: int):
    """A rank of a running job reports ``{"step", "step_s", "poll_s", "host"}``; the answer lists
    the capture requests it has not finished: ``{"captures": [{"id", "first_step", "steps"}]}``."""
    if not valid_run_id(run_id):
        return _error(400, "not a run id (letters, digits and ._- only)")
    body = _json_body()
    try:
        step_s = body.get("step_s")
        found = _reports().report(g.db, g.caller, run_id, rank, _number(body, "step", int),
                       None if step_s is None else _number(body, "step_s", float),
                       _number(body, "poll_s", float, 5.0), str(body.get("host", ""))[:200])
    except CaptureError as exc:
        return _error(exc.status, str(exc))
    return jsonify({"captures": [c.as_json() for c in found]})


@api.post("/runs/<run_id>/captures")
def capture(run_id: str):
    """Capture ``{"steps": N}`` steps on every rank of the running job ``run_id``; the answer names
    the steps: ``{"id", "first_step", "steps"}`` (201)."""
    if not valid_run_id(run_id):
        return _error(400, "not a run id (letters, digits and ._- only)")
    try:
        made = request_capture(g.db, g.caller, run_id, _number(_json_body(), "steps", int), _reports())
    except CaptureError as exc:
        return _error(exc.status, str(exc))
    return jsonify(made.as_json()), 201


@api.get("/runs/<run_id>/ranks")
def running_job(run_id: str):
    """A running job's ranks as they last reported, and its capture requests."""
    if not valid_run_id(run_id):
        return _error(400, "not a run id (letters, digits and ._- only)")
    try:
        job = live_run(g.db, g.caller, run_id, _reports())
    except CaptureError as exc:
        return _error(exc.status, str(exc))
    return jsonify({"run_id": run_id, "team": job.team, "running": job.running,
                    "ranks": [{"rank": r.rank, "host": r.host, "step": r.step, "step_s": r.step_s,
                               "seen_s": round(_age(r.seen_at), 3)} for r in job.ranks],
                    "captures": [{"id": c.id, "first_step": c.first_step, "steps": c.steps,
                                  "requested_by": c.requested_by,
                                  "requested_at": c.requested_at.isoformat(timespec="seconds")} for c in job.captures]})


def _age(at) -> float:
    return (accounts.now() - at).total_seconds()
