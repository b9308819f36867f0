"""Regenerates the report screenshots in docs/ (report-dashboard.png, report-timeline.png,
report-insights.png) from a trace in the repository, in headless Chromium:

    python tests/report_screenshots.py [TRACE] [--out docs] [--prefix report]

``--tabs flame`` shoots the flame graph tab twice: PREFIX-flame.png (every stack) and
PREFIX-flame-zoom.png (zoomed into the nn.Module call with the most GPU time below half of it, its
kernels listed under the graph). The docs' flame graph shots come from the trace with Python stacks:

    python tests/report_screenshots.py tests/data/traces/tracelens/b200/eager_trace.json.gz --tabs flame

TRACE defaults to the ResNet-50 Kineto trace (one GPU, Python-level DataLoader, steps); a profile
folder written by a live run works too (``--prefix report-cpu`` names its shots apart).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import REPO, trace  # noqa: E402

DEFAULT = "kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
FLAGS = ("--headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
         "--disable-background-networking --disable-component-update --disable-sync "
         "--hide-scrollbars --window-size=1400,1000").split()


ZOOM_TO_A_KERNEL = """
const T = otelReport.Timeline, e = T.events;
let best = -1;
for (let k = 0; k < e.flowDst.length; k++) {
  const i = e.flowDst[k], soon = e.start[i] - e.start[e.flowSrc[k]] < 50e3;  // launched < 50 µs before
  if (e.kind[i] === 1 && soon && (best < 0 || e.dur[i] > e.dur[best])) best = i;  // 1: kernel
}
const first = otelReport.data.timeline.tracks.findIndex(t => t.kind === "cpu");
if (first >= 0) T.toggle(first, true);  // one CPU thread opened, to show the launching ops
if (best >= 0) {
  const span = Math.max(e.dur[best] * 12, 2e6);
  T.view.t0 = e.start[best] - span / 3; T.view.t1 = T.view.t0 + span;
  T.select(best); T.view.scrollY = 0; T.draw();
}
"""

ZOOM_TO_A_MODULE = """
const F = otelReport.Flame, D = F.F, half = D.gpu_ns[0] / 2;
let best = -1;
for (let i = 1; i < D.parent.length; i++)
  if (F.kind(i) === "module" && D.gpu_ns[i] < half && (best < 0 || D.gpu_ns[i] > D.gpu_ns[best])) best = i;
if (best >= 0) F.zoomTo(best);
window.scrollTo(0, 0);
"""


def chromium(profile_dir: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile_dir}")
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    return webdriver.Chrome(options=options,
                            service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", nargs="?", default=str(trace(DEFAULT)))
    parser.add_argument("--out", default=str(REPO / "docs"))
    parser.add_argument("--prefix", default="report", help="file names: PREFIX-TAB.png")
    parser.add_argument("--tabs", default="dashboard,timeline,insights",
                        help="tabs to capture, comma-separated (also: statistics)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="otel-report-shots-")
    try:
        html = os.path.join(work, "report.html")
        name = os.path.basename(args.trace)  # the report names its input as given: no folders
        if os.path.isdir(args.trace):
            shutil.copytree(args.trace, os.path.join(work, name))
        else:
            shutil.copy(args.trace, os.path.join(work, name))
        subprocess.run([sys.executable, "-m", "otel_profiler", "report", name, "-o", html],
                       check=True, cwd=work, env=dict(os.environ, PYTHONPATH=str(REPO)))
        driver = chromium(os.path.join(work, "chromium"))
        try:
            driver.get("file://" + html)
            for tab in args.tabs.split(","):
                driver.execute_script("window.otelReport.showTab(arguments[0]); window.scrollTo(0, 0);", tab)
                if tab == "timeline" and not os.path.isdir(args.trace):  # zoomed into a step: the longest kernel the GPU ran right after its launch
                    driver.execute_script(ZOOM_TO_A_KERNEL)
                time.sleep(1.0)  # let the canvas and the SVG charts lay out
                driver.save_screenshot(os.path.join(args.out, f"{args.prefix}-{tab}.png"))
                if tab == "flame":
                    driver.execute_script(ZOOM_TO_A_MODULE)
                    time.sleep(1.0)
                    driver.save_screenshot(os.path.join(args.out, f"{args.prefix}-flame-zoom.png"))
        finally:
            driver.quit()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {', '.join(f'{args.prefix}-{t}.png' for t in args.tabs.split(','))} in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
