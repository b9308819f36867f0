"""Links from a run to the observability stack, when their addresses are configured: Jaeger's search
for the run's ``train.step`` traces, and the Grafana overview dashboard narrowed to the run's team,
user, job (service) and host over the run's time range."""

from __future__ import annotations

from urllib.parse import urlencode

from ..auth.models import Run

STEP_SPAN = "train.step"
OVERVIEW = "d/otel-profiler-overview/otel-profiler-overview"
MARGIN_S = 60  # around the profiled span: spans and scrapes land a little before and after


def _range_s(run: Run) -> tuple[float, float] | None:
    if not run.start_ns:
        return None
    start = run.start_ns / 1e9
    return start - MARGIN_S, start + (run.duration_s or 0) + MARGIN_S


def run_links(run: Run, jaeger_url: str, grafana_url: str) -> dict[str, str]:
    """{"traces": Jaeger URL, "dashboard": Grafana URL} for the configured ones."""
    links: dict[str, str] = {}
    span = _range_s(run)
    if jaeger_url and run.service:
        query = {"service": run.service, "operation": STEP_SPAN, "limit": 20}
        if span:
            query.update(start=int(span[0] * 1e6), end=int(span[1] * 1e6))
        links["traces"] = f"{jaeger_url.rstrip('/')}/search?{urlencode(query)}"
    if grafana_url:
        query = {f"var-{k}": v for k, v in (("team", run.team), ("user", run.user), ("job", run.service),
                                            ("host", run.host)) if v}
        if span:
            query.update({"from": int(span[0] * 1000), "to": int(span[1] * 1000)})
        links["dashboard"] = f"{grafana_url.rstrip('/')}/{OVERVIEW}?{urlencode(query)}"
    return links
