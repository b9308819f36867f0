"""The HTML report's timeline budget (``otel_profiler.report.timeline_budget``): the per-slice rule
holds on a real trace's timeline, the page's data counts what it leaves out, and a report of a
generated trace past the budget builds through the command line and opens in headless Chromium,
saying what its timeline leaves out."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuda_tracer.model.events import Kind
from cuda_tracer.loading import load_profile
from otel_profiler.report import html as report_html
from otel_profiler.report.timeline_budget import MAX_TIMELINE_EVENTS, thin
from otel_profiler.report.tracks import assign_tracks

from conftest import trace

try:  # the browser fixture and helpers of the report's browser tests
    from test_report_browser import _canvas_ink, _collect_logs, _open, browser  # noqa: F401
except pytest.skip.Exception:  # selenium is not installed: only the browser test skips

    @pytest.fixture
    def browser():
        pytest.skip("selenium is not installed")

LARGEST = "hta/df_index_resolver/df_index_resolver.json.gz"
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def timeline():
    t = assign_tracks(load_profile([str(trace(LARGEST))]))
    b = t.batch
    return t, b.start_ns[t.rows], b.end_ns[t.rows] - b.start_ns[t.rows]


def test_under_the_budget_every_event_is_kept(timeline):
    t, start, dur = timeline
    budget = thin(t.track, start, dur, limit=len(t.rows))
    assert budget.keep.all() and budget.slice_ns == 0


@pytest.mark.parametrize("limit", [60_000, 20_000, 3_000])
def test_past_the_budget_the_slice_rule_holds(timeline, limit):
    t, start, dur = timeline
    budget = thin(t.track, start, dur, limit=limit)
    kept = int(budget.keep.sum())
    assert 0 < kept <= limit < len(t.rows)
    assert not budget.longest_only
    width = budget.slice_ns
    assert (dur >= width)[~budget.keep].sum() == 0  # every event a slice long or more is kept
    short = np.flatnonzero(dur < width)
    key = t.track[short].astype(np.int64) * (1 << 40) + (start[short] - start.min()) // width
    for k in np.unique(key)[:: max(1, len(np.unique(key)) // 500)].tolist():  # ~500 slices checked
        members = short[key == k]
        chosen = members[budget.keep[members]]
        assert len(chosen) == 1  # one event stands for the slice's short events
        assert dur[chosen[0]] == dur[members].max()  # and it is the longest of them
    # a budget twice as large cuts slices no wider
    assert thin(t.track, start, dur, limit=2 * limit).slice_ns <= width


def test_a_budget_below_the_long_events_keeps_the_longest(timeline):
    t, start, dur = timeline
    limit = len(t.tracks) - 1  # fewer than one event per track: no slicing fits
    budget = thin(t.track, start, dur, limit=limit)
    assert budget.longest_only and budget.keep.sum() == limit
    assert dur[budget.keep].min() >= np.sort(dur)[-limit]


def test_page_data_counts_what_the_timeline_leaves_out(timeline, monkeypatch):
    monkeypatch.setattr(report_html, "thin", lambda *a: thin(*a, limit=20_000))
    profile = load_profile([str(trace(LARGEST))])
    data = report_html.timeline_data(profile)
    t = timeline[0]
    assert data["total"] == len(t.rows) and data["count"] <= 20_000
    left = [tr["left_out"] for tr in data["tracks"]]
    assert sum(left) == data["total"] - data["count"]
    assert f"{data['count']:,} of {data['total']:,} events" in data["left_out_note"]
    track = np.frombuffer(base64.b64decode(data["columns"]["track"]), "<u4")
    per_track = np.bincount(track, minlength=len(t.tracks)) + np.array(left)
    assert (per_track == np.bincount(t.track, minlength=len(t.tracks))).all()
    kind = np.frombuffer(base64.b64decode(data["columns"]["kind"]), "u1")
    src = np.frombuffer(base64.b64decode(data["columns"]["flow_src"]), "<u4")
    dst = np.frombuffer(base64.b64decode(data["columns"]["flow_dst"]), "<u4")
    assert 0 < len(src) < len(t.flow_src)  # links between kept events stay, the others go
    assert src.max() < data["count"] and dst.max() < data["count"]
    gpu = np.isin(kind[dst], [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC])
    assert gpu.all() and not np.isin(kind[src], [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET]).any()


@pytest.fixture(scope="module")
def big_report(tmp_path_factory):
    """A generated trace with more timeline events than the budget, reported by the command line."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from large_trace import build
    finally:
        sys.path.remove(str(BENCHMARKS))
    folder = tmp_path_factory.mktemp("big")
    path = build(str(trace("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")),
                 600_000, str(folder / "big.json.gz"))
    html = folder / "big.html"
    subprocess.run([sys.executable, "-m", "otel_profiler", "report", path, "-o", str(html)],
                   check=True, capture_output=True)
    text = html.read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', text, re.S).group(1))
    return html.as_uri(), data["timeline"]


def test_a_report_past_the_budget_opens_and_says_what_it_leaves_out(browser, big_report):
    from selenium.webdriver.common.by import By

    url, timeline = big_report
    assert timeline["total"] > MAX_TIMELINE_EVENTS >= timeline["count"] > 0
    _open(browser, url)
    browser.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=timeline]").click()
    note = browser.find_element(By.ID, "tl-left-out").text
    assert note == timeline["left_out_note"] and "left out" in note
    shown = browser.find_element(By.ID, "tl-range").text
    assert f"{timeline['count']:,} events of {timeline['total']:,}" in shown
    assert _canvas_ink(browser) > 5000
    assert browser.execute_script("return Timeline.events.start.length") == timeline["count"]
    assert _collect_logs(browser) == []  # no console errors


@pytest.mark.parametrize("rel", [LARGEST, "hta/trace_filter"])
def test_track_keys_are_made_unique_as_numpy_does(rel):
    from otel_profiler.analysis.stats import unique_rows
    from otel_profiler.report.tracks import HIDDEN_KINDS, _track_keys

    batch = load_profile([str(trace(rel))]).batch()
    keys = _track_keys(batch, np.flatnonzero(~np.isin(batch.kind, np.asarray(HIDDEN_KINDS, np.uint8))))
    rng = np.random.default_rng(7)  # and keys of any size and sign, many distinct per column
    for k in (keys, rng.integers(-2**40, 2**40, (5000, 4)), rng.integers(0, 3, (5000, 4)),
              rng.integers(-2**62, 2**62, (5000, 3)), np.zeros((0, 4), np.int64)):
        expected, inverse = np.unique(k, axis=0, return_inverse=True)
        uniq, track = unique_rows(k)
        assert (uniq == expected).all() and (track == inverse.reshape(-1)).all()
        expected, counts = np.unique(k, axis=0, return_counts=True)
        uniq, found = unique_rows(k, counts=True)
        assert (uniq == expected).all() and (found == counts).all()
