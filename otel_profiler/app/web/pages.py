"""The web pages: sign-in and sign-out, the landing page of runs (filters, sort, paging, the jobs
running now), a run's report, a running job's page (``live_pages``), and the admin page where an admin grants and removes access (every change audited)."""

from __future__ import annotations

import math
from functools import wraps
from typing import Any

from flask import (Blueprint, Response, abort, current_app, flash, g, redirect,
                   render_template, request, send_file, session, url_for)
from flask_limiter import Limiter

from ..auth import accounts
from ..auth.access import may_manage, may_see
from ..auth.models import Run
from ..auth.roles import ROLES
from ..storage.live_capture import running_runs
from ..storage.runs_index import RunQuery, query_runs, run_document
from ..storage.store import read_summary, valid_run_id
from .links import run_links
from .live_pages import add_live_pages, rank_reports
from .reports import ReportError

COLUMNS = (("run_id", "Run"), ("user", "User"), ("team", "Team"), ("host", "Host"), ("start", "Start (UTC)"),
           ("duration", "Duration"), ("steps", "Steps"), ("gpus", "GPUs"), ("", "Top insight"))


def local_target(target: str) -> str | None:
    """``target`` when it is a path on this app (the sign-in's ``next``), else None: it starts with one
    ``/`` and holds no backslash, whitespace or control character. Browsers drop tabs and newlines,
    strip spaces and read ``\\`` as ``/`` before resolving a Location, so ``/<TAB>/evil.example`` or
    ``/\\evil.example`` would leave the app as ``//evil.example``; such a target is refused whole."""
    if not target.startswith("/") or target.startswith("//"):
        return None
    if any(c == "\\" or c.isspace() or not c.isprintable() for c in target):
        return None
    return target


def page(title: str, template: str, status: int = 200, **context) -> tuple[str, int]:
    """``template`` (a name of ``templates.PAGES``) inside the frame; templates compile once."""
    body = render_template(template, caller=g.caller, **context)
    return render_template("frame.html", title=title, body=body, caller=g.caller), status


def signed_in(view):
    @wraps(view)
    def wrapper(*args, **kwargs):
        if g.caller is None:
            return redirect(url_for("pages.login", next=request.path))
        return view(*args, **kwargs)
    return wrapper


def admin_only(view):
    @wraps(view)
    @signed_in
    def wrapper(*args, **kwargs):
        if not may_manage(g.caller):
            abort(403)
        return view(*args, **kwargs)
    return wrapper


def make_pages(limiter: Limiter, login_limit: str) -> Blueprint:
    pages = Blueprint("pages", __name__)

    @pages.route("/login", methods=["GET", "POST"])
    @limiter.limit(login_limit, methods=["POST"], deduct_when=lambda response: response.status_code != 303)
    def login():
        if request.method == "POST":
            caller = accounts.check_password(g.db, request.form.get("name", ""), request.form.get("password", ""))
            if caller is None:
                flash("Unknown user or wrong password.", "error")
                return page("Sign in", "login.html", status=401)
            session.clear()
            session["key"] = accounts.start_session(g.db, caller)
            target = local_target(request.args.get("next", ""))
            return redirect(target or url_for("pages.landing"), code=303)
        return page("Sign in", "login.html")

    @pages.post("/logout")
    def logout():
        accounts.end_session(g.db, session.get("key"))
        session.clear()
        return redirect(url_for("pages.login"), code=303)

    @pages.get("/")
    @signed_in
    def landing():
        try:
            q = RunQuery.from_args(request.args)
        except ValueError as exc:
            flash(f"Filters ignored: {exc}", "error")
            q = RunQuery()
        rows, total = query_runs(g.db, g.caller, q)
        settings = current_app.extensions["otel_profiler"]["settings"]
        documents = [dict(run_document(r), links=run_links(r, settings.jaeger_url, settings.grafana_url))
                     for r in rows]

        def link(**changes) -> str:
            args: dict[str, Any] = {k: v for k, v in request.args.items() if k in ("user", "team", "service", "text", "since",
                                                                    "until", "status", "sort", "order", "per_page")}
            args.update({k: str(v) for k, v in changes.items()})
            return url_for("pages.landing", **{k: v for k, v in args.items() if v})

        return page("Runs", "landing.html", q=q, runs=documents, total=total, running=running_runs(g.db, g.caller, rank_reports()),
                    pages=max(1, math.ceil(total / q.per_page)), columns=COLUMNS, link=link,
                    filtered=any((q.user, q.team, q.service, q.text, q.since, q.until, q.status)))

    @pages.get("/runs/<run_id>")
    @signed_in
    def run_report(run_id: str):
        if not valid_run_id(run_id):
            abort(400, "not a run id (letters, digits and ._- only)")
        run = g.db.get(Run, run_id)
        if run is None or not may_see(g.caller, run):
            abort(404, f"no run {run_id!r} that you may see")
        try:
            path = current_app.extensions["otel_profiler"]["reports"].report(run.run_id, run.signature)
        except ReportError as exc:
            return page(run_id, "run_problem.html", status=422, run_id=run_id, reason=str(exc))
        response: Response = send_file(path, mimetype="text/html", max_age=0)
        response.headers["Cache-Control"] = "private, no-store"
        return response

    add_live_pages(pages, page, signed_in)

    @pages.get("/diff")
    @signed_in
    def diff_page():
        """Two runs side by side (``otel-profiler diff``'s comparison page): ``?base=RUN&new=RUN``."""
        from ...analysis.diff import diff
        from ...report.diff_html import render_diff_html

        summaries = []
        for key in ("base", "new"):
            run_id = request.args.get(key, "")
            if not valid_run_id(run_id):
                abort(400, f"{key}: not a run id (letters, digits and ._- only)")
            run = g.db.get(Run, run_id)
            if run is None or not may_see(g.caller, run):
                abort(404, f"no run {run_id!r} that you may see")
            try:
                summary = read_summary(current_app.extensions["otel_profiler"]["settings"].store, run_id)
                summary["sources"] = [run_id]  # the run, not where the server keeps it
                summaries.append(summary)
            except ValueError as exc:
                return page(run_id, "run_problem.html", status=422, run_id=run_id, reason=str(exc))
        try:
            return render_diff_html(diff(*summaries))
        except (KeyError, TypeError, ValueError) as exc:
            return page("Compare", "run_problem.html", status=422, run_id=" vs ".join(request.args.values()),
                        reason=f"the summaries cannot be compared ({type(exc).__name__}: {exc})")

    @pages.get("/admin")
    @admin_only
    def admin():
        return page("Admin", "admin.html", teams=accounts.list_teams(g.db), users=accounts.list_users(g.db),
                    roles=ROLES, audit=accounts.audit_log(g.db))

    def admin_action(view):
        """A form post of the admin page: run it, report the outcome, come back to the page."""
        @wraps(view)
        @admin_only
        def wrapper():
            try:
                flash(view(request.form), "done")
            except accounts.AccountError as exc:
                g.db.rollback()
                flash(str(exc), "error")
            return redirect(url_for("pages.admin"), code=303)
        return wrapper

    @pages.post("/admin/teams/add", endpoint="team_add")
    @admin_action
    def team_add(form):
        accounts.add_team(g.db, form.get("name", ""), actor=g.caller.name)
        return f"Team {form.get('name')} added."

    @pages.post("/admin/teams/remove", endpoint="team_remove")
    @admin_action
    def team_remove(form):
        accounts.remove_team(g.db, form.get("name", ""), actor=g.caller.name)
        return f"Team {form.get('name')} removed."

    @pages.post("/admin/users/add", endpoint="user_add")
    @admin_action
    def user_add(form):
        accounts.add_user(g.db, form.get("name", ""), form.get("team", ""), form.get("role", ""),
                          form.get("password") or None, actor=g.caller.name)
        return f"User {form.get('name')} added."

    @pages.post("/admin/users/role", endpoint="user_role")
    @admin_action
    def user_role(form):
        accounts.set_role(g.db, form.get("name", ""), form.get("role", ""), actor=g.caller.name)
        return f"User {form.get('name')} is now {form.get('role')}."

    @pages.post("/admin/users/revoke", endpoint="user_revoke")
    @admin_action
    def user_revoke(form):
        count = accounts.revoke_tokens(g.db, form.get("name", ""), actor=g.caller.name)
        return f"{count} token(s) of {form.get('name')} revoked."

    @pages.post("/admin/users/remove", endpoint="user_remove")
    @admin_action
    def user_remove(form):
        if form.get("name") == g.caller.name:
            raise accounts.AccountError("you cannot remove yourself")
        accounts.remove_user(g.db, form.get("name", ""), actor=g.caller.name)
        return f"User {form.get('name')} removed."

    return pages
