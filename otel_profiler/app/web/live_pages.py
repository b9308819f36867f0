"""The pages of running jobs (``storage.live_capture``): ``/live/RUN_ID`` lists a job's ranks as
they last reported and its capture requests, with a form that asks every rank to capture the same
steps (members and admins of the run's team; CSRF-protected like every form); the landing page
lists the jobs running now."""

from __future__ import annotations

from flask import Blueprint, abort, current_app, flash, g, redirect, request, url_for

from ..storage.live_capture import MAX_STEPS, CaptureError, RankReports, live_run, request_capture
from ..storage.store import valid_run_id


def rank_reports() -> RankReports:
    return current_app.extensions["otel_profiler"]["rank_reports"]


def add_live_pages(pages: Blueprint, page, signed_in) -> None:
    """Register the running-job routes on ``pages`` (``page`` renders, ``signed_in`` guards)."""

    def job_or_abort(run_id: str):
        if not valid_run_id(run_id):
            abort(400, "not a run id (letters, digits and ._- only)")
        try:
            return live_run(g.db, g.caller, run_id, rank_reports())
        except CaptureError as exc:
            abort(exc.status, str(exc))

    @pages.get("/live/<run_id>")
    @signed_in
    def live_job(run_id: str):
        job = job_or_abort(run_id)
        return page(f"{run_id} (running)", "live.html", job=job, max_steps=MAX_STEPS,
                    may_capture=g.caller.role != "viewer")

    @pages.post("/live/<run_id>/capture")
    @signed_in
    def live_capture(run_id: str):
        job_or_abort(run_id)
        try:
            steps = int(request.form.get("steps", ""))
        except ValueError:
            steps = 0
        try:
            made = request_capture(g.db, g.caller, run_id, steps, rank_reports())
            flash(f"Every rank captures steps {made.first_step}-{made.first_step + made.steps - 1} "
                  f"(request {made.id}).", "done")
        except CaptureError as exc:
            g.db.rollback()
            if exc.status in (403, 404):
                abort(exc.status, str(exc))
            flash(str(exc), "error")
        return redirect(url_for("pages.live_job", run_id=run_id), code=303)
