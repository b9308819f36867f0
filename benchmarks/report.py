"""Report generation time and HTML size for the largest test trace and a synthetic 1M-event profile,
plus, when Chromium and selenium are installed, how long the page takes to open and to redraw the
timeline (the responsiveness check).

    python benchmarks/report.py [--copies 7] [--no-browser]
    python benchmarks/report.py --large 2000000 [--no-browser]

``--large N``: the N-event trace file of ``large_trace.py``, reported by ``otel-profiler report`` as a
user runs it (whole process: wall, CPU, peak resident memory of the process tree beside the
trace's decompressed size), then opened in Chromium.

The 1M-event profile tiles the real ``df_index_resolver`` batch: copies shifted in time one after the
other, with correlation and external ids offset so launches link only within their copy.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cuda_tracer.model.events import MISSING, EventBatch  # noqa: E402
from cuda_tracer.loading import load_profile  # noqa: E402
from cuda_tracer.profile import Profile, RankProfile  # noqa: E402
from otel_profiler.analysis.document import SummaryDocument  # noqa: E402
from otel_profiler.report.html import render_html, report_data  # noqa: E402
from otel_profiler.report.perfetto import write_chrome_trace  # noqa: E402

LARGEST = REPO / "tests" / "data" / "traces" / "hta" / "df_index_resolver" / \
    "df_index_resolver.json.gz"


def tile(batch: EventBatch, copies: int) -> EventBatch:
    """``copies`` time-shifted copies of ``batch`` in one batch (ids offset per copy)."""
    span = int(batch.end_ns.max() - batch.start_ns.min()) + 1_000_000
    id_step = int(max(batch.correlation.max(), batch.external_id.max())) + 1
    parts = []
    for k in range(copies):
        cols = {c: a.copy() for c, a in batch.columns.items()}
        cols["start_ns"] += k * span
        cols["end_ns"] += k * span
        for c in ("correlation", "external_id"):
            cols[c] = np.where(cols[c] != MISSING, cols[c] + k * id_step, MISSING)
        parts.append(EventBatch(cols, batch.strings, batch.extra_row, batch.extra_key, batch.extra_value))
    return EventBatch.concat(parts)


def measure(label: str, profile: Profile, out_dir: str, load_s: float) -> dict:
    doc = SummaryDocument(profile)
    t = time.perf_counter()
    doc.summary  # summary and insights, computed once
    t_summary = time.perf_counter() - t
    t = time.perf_counter()
    data = report_data(doc)
    t_data = time.perf_counter() - t
    t = time.perf_counter()
    html = render_html(data)
    path = os.path.join(out_dir, f"{label}.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(html)
    t_html = time.perf_counter() - t
    t = time.perf_counter()
    with open(os.path.join(out_dir, f"{label}.perfetto.json"), "wb") as f:
        write_chrome_trace(profile, f)
    t_perfetto = time.perf_counter() - t
    return {"label": label, "events": len(profile.batch()), "timeline": data["timeline"]["count"],
            "load_s": load_s, "summary+insights_s": t_summary, "data_s": t_data, "html_s": t_html,
            "total_s": load_s + t_summary + t_data + t_html, "size_mb": os.path.getsize(path) / 1e6,
            "perfetto_s": t_perfetto, "path": path}


def browser_timings(path: str) -> dict:
    """Page load, first timeline draw and mean redraw time after zoom steps, in Chromium."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in ("--headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
                 "--disable-background-networking --disable-component-update --disable-sync "
                 "--window-size=1400,1000").split():
        options.add_argument(flag)
    options.add_argument("--user-data-dir=" + tempfile.mkdtemp(prefix="otel-bench-chromium-"))
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    try:
        t = time.perf_counter()
        driver.get(Path(path).as_uri())
        load = time.perf_counter() - t
        first = driver.execute_script(
            "const t = performance.now(); otelReport.showTab('timeline'); return performance.now() - t;")
        redraw = driver.execute_script("""
            const T = otelReport.Timeline, times = [];
            for (let k = 0; k < 10; k++) { const t = performance.now(); T.zoom(k < 5 ? 0.5 : 2);
              times.push(performance.now() - t); }
            for (let k = 0; k < 10; k++) { const t = performance.now(); T.pan(40);
              times.push(performance.now() - t); }
            return times.reduce((a, b) => a + b) / times.length;""")
        return {"page_load_s": load, "timeline_first_draw_ms": first, "redraw_ms": redraw}
    finally:
        driver.quit()


def large_report(events: int, browser: bool) -> None:
    """The whole-process ``otel-profiler report`` of a large trace file, then its page opened."""
    import gzip
    import json
    import re

    sys.path.insert(0, str(REPO / "benchmarks"))
    from large_import import LAST_WAIT, run_measured
    from large_trace import large_trace

    path = large_trace(events)
    with gzip.open(path, "rb") as f:
        text_mib = sum(len(chunk) for chunk in iter(lambda: f.read(1 << 24), b"")) / 2**20
    out = os.path.join(tempfile.mkdtemp(prefix="otel-report-bench-"), "large.html")
    wall, peak, _, cpu = run_measured([sys.executable, "-m", "otel_profiler", "report", path, "-o", out])
    with open(out, encoding="utf-8") as f:
        timeline = json.loads(re.search(r'id="report-data">(.*?)</script>', f.read(), re.S).group(1))["timeline"]
    print(f"{os.path.basename(path)}: {text_mib:.0f} MiB of JSON")
    print(f"otel-profiler report: wall {wall:.1f} s, CPU {cpu:.1f} s (waited for a core {LAST_WAIT[0]:.1f} s), "
          f"peak RSS {peak:.0f} MiB ({peak / text_mib:.2f} of the JSON text), "
          f"HTML {os.path.getsize(out) / 1e6:.1f} MB, timeline {timeline['count']:,} of {timeline['total']:,} events")
    if browser:
        print("Chromium: " + ", ".join(f"{k} {v:.2f}" for k, v in browser_timings(out).items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=7, help="tiles of df_index_resolver (7: ~1.06M events)")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--large", type=int, metavar="EVENTS", help="report a generated trace file instead")
    args = parser.parse_args()
    if args.large:
        return large_report(args.large, not args.no_browser)
    out_dir = tempfile.mkdtemp(prefix="otel-report-bench-")
    t = time.perf_counter()
    real = load_profile([str(LARGEST)])
    load_s = time.perf_counter() - t
    rank = real.ranks[0]
    synthetic = Profile([RankProfile(dict(rank.meta), tile(rank.batch, args.copies))], ["synthetic"])
    rows = [measure("df_index_resolver", real, out_dir, load_s),
            measure(f"tiled_x{args.copies}", synthetic, out_dir, 0.0)]
    if not args.no_browser:
        try:
            for r in rows:
                r.update(browser_timings(r["path"]))
        except Exception as exc:  # no browser here: generation figures still stand
            print(f"(browser timings skipped: {exc.__class__.__name__}: {exc})")
    keys = [k for k in rows[0] if k not in ("label", "path")]
    print(f"{'':22}" + "".join(f"{k:>24}" for k in keys))
    for r in rows:
        print(f"{r['label']:22}" + "".join(
            f"{r[k]:>24,}" if isinstance(r[k], int) else f"{r[k]:>24.2f}" for k in keys))
    print(f"(files in {out_dir})")


if __name__ == "__main__":
    main()
