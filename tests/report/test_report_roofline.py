"""The Roofline tab of the HTML report in real headless Chromium: one point per operator shape the
summary's ``flops`` section gives a rate and an intensity for, at the place its numbers say, the
device's two roofs, and the figures of a point when the pointer rests on it; a trace without input
shapes says why there is no roofline."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from conftest import trace

webdriver = pytest.importorskip("selenium.webdriver")
from chromium import chromium  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

SHAPED = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"  # H100, bf16, 974 costed operators
UNSHAPED = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


@pytest.fixture(scope="module")
def browser():
    with chromium("otel-roofline-chromium-", console_logs=True) as driver:
        yield driver


def _report(tmp_path, relative: str) -> tuple[str, dict]:
    path, html = str(trace(relative)), tmp_path / "report.html"
    subprocess.run([sys.executable, "-m", "otel_profiler", "report", path, "-o", str(html)],
                   check=True, capture_output=True)
    summary = json.loads(subprocess.run([sys.executable, "-m", "otel_profiler", "summary", path, "--format", "json"],
                                        check=True, capture_output=True, text=True).stdout)
    return html.as_uri(), summary


def _open_tab(browser, url: str) -> None:
    browser.get(url + "#roofline")
    browser.find_element(By.CSS_SELECTOR, '#tabs button[data-tab="roofline"]').click()


def test_points_and_roofs_follow_the_summary(browser, tmp_path):
    url, summary = _report(tmp_path, SHAPED)
    flops = summary["flops"]
    drawable = [r for r in flops["by_operator"] if (r["intensity"] or 0) > 0 and (r["tflops_per_s"] or 0) > 0]
    assert drawable and flops["peak"] and flops["mfu"] is not None
    _open_tab(browser, url)
    points = browser.find_elements(By.CSS_SELECTOR, "#roofline-chart circle.roof-point")
    assert len(points) == len(drawable)
    roofs = browser.find_elements(By.CSS_SELECTOR, "#roofline-chart line.roof")
    assert {r.get_attribute("class") for r in roofs} == {"roof roof-memory", "roof roof-compute"}

    # On log scales, the point of more TFLOP/s is higher (smaller y), the one of more intensity further right.
    placed = [(float(p.get_attribute("cx")), float(p.get_attribute("cy")), drawable[int(p.get_attribute("data-index"))])
              for p in points]
    for (x1, y1, a), (x2, y2, b) in zip(placed, placed[1:]):
        if not math.isclose(a["tflops_per_s"], b["tflops_per_s"], rel_tol=1e-9):
            assert (y1 < y2) == (a["tflops_per_s"] > b["tflops_per_s"])
        if not math.isclose(a["intensity"], b["intensity"], rel_tol=1e-9):
            assert (x1 > x2) == (a["intensity"] > b["intensity"])
    # The memory roof rises to the compute roof at the ridge point, intensity = peak TFLOP/s / TB/s.
    memory, compute = (next(r for r in roofs if kind in r.get_attribute("class")) for kind in ("memory", "compute"))
    assert math.isclose(float(memory.get_attribute("y2")), float(compute.get_attribute("y1")), abs_tol=0.01)

    # Hover the points no other point covers at their centre, each in turn.
    uncovered = browser.execute_script("""
        return [...document.querySelectorAll('#roofline-chart circle.roof-point')].filter(c => {
          const r = c.getBoundingClientRect();
          return document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2) === c;
        });""")
    assert uncovered
    tip = browser.find_element(By.ID, "roofline-tip")
    for dot in uncovered[:5]:
        row = drawable[int(dot.get_attribute("data-index"))]
        ActionChains(browser).move_to_element(dot).perform()
        assert tip.is_displayed()
        text = tip.text
        assert text.startswith(f"{row['name']} {row['shapes']} · ") and f" in {row['calls']:,} calls" in text
        rate = float(text.split(" TFLOP/s")[0].rsplit("· ", 1)[1].replace(",", ""))
        assert math.isclose(rate, row["tflops_per_s"], rel_tol=1e-3)
    head = browser.find_element(By.ID, "roofline-head").text
    assert f"MFU {100 * flops['mfu']:.3f}".rstrip("0").rstrip(".") in head.replace(",", "")
    rows = browser.find_elements(By.CSS_SELECTOR, "#roofline-operators tbody tr")
    assert len(rows) == len(flops["by_operator"])


def test_a_trace_without_shapes_says_why(browser, tmp_path):
    url, summary = _report(tmp_path, UNSHAPED)
    assert summary["flops"]["operators"] == 0
    _open_tab(browser, url)
    assert "record_shapes" in browser.find_element(By.ID, "no-flops").text
    assert not browser.find_elements(By.CSS_SELECTOR, "#roofline-chart")
