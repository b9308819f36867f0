"""The HTML report's flame graph tab in real headless Chromium: it draws, its totals equal a plain
recount of the trace's GPU operations and outermost operators (a CPU run opens on CPU time), a click zooms into a frame and lists the kernels under it
(their GPU time adding up to the frame's), the search total equals a recount of the matching
kernels, hovering shows a frame's numbers; and the node budget keeps the totals and the tree whole.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from conftest import trace
from cuda_tracer.model.events import Kind
from cuda_tracer.loading import load_profile
from otel_profiler.names import demangle
from otel_profiler.report.flame import flame_data

webdriver = pytest.importorskip("selenium.webdriver")
from chromium import chromium  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

PYTHON_STACKS = "tracelens/b200/eager_trace.json.gz"  # python_function and nn.Module events
GPU_KINDS = [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """(the browser on the flame graph tab of the report, the trace's events)."""
    path = str(trace(PYTHON_STACKS))
    html = tmp_path_factory.mktemp("flame") / "report.html"
    subprocess.run([sys.executable, "-m", "otel_profiler", "report", path, "-o", str(html)], check=True,
                   capture_output=True, timeout=600)
    with chromium("otel-flame-chromium-", console_logs=True) as driver:
        driver.get(html.as_uri())
        driver.execute_script("otelReport.showTab('flame')")
        yield driver, load_profile([path]).batch()
        assert not [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _ink(driver) -> int:
    return driver.execute_script("""
        const c = document.getElementById('fg-canvas'), d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let ink = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i] < 240 || d[i + 1] < 240 || d[i + 2] < 240) ink++;
        return ink;""")


def _click(driver, node: int) -> None:
    """Click the middle of ``node``'s bar on the canvas, as a person does."""
    canvas = driver.find_element(By.ID, "fg-canvas")
    r = driver.execute_script("return otelReport.Flame.rectOf(arguments[0])", node)
    size = canvas.size
    ActionChains(driver).move_to_element_with_offset(
        canvas, int(r["x"] + r["w"] / 2 - size["width"] / 2),
        int(r["row"] * 18 + 9 - size["height"] / 2)).click().perform()


def test_the_tab_draws_and_its_totals_equal_a_recount(page):
    driver, batch = page
    assert _ink(driver) > 10_000
    total = driver.find_element(By.ID, "fg-total")
    gpu = np.isin(batch.kind, GPU_KINDS)
    assert int(total.get_attribute("data-gpu-ns")) == int(batch.duration_ns[gpu].sum())
    assert int(total.get_attribute("data-launches")) == int(gpu.sum())
    assert int(total.get_attribute("data-cpu-ns")) == outermost_operator_time(batch)
    shown = driver.execute_script("return fmtUs(arguments[0] / 1e3)", int(batch.duration_ns[gpu].sum()))
    assert f"GPU time {shown} of" in total.text


def test_click_zooms_and_lists_the_kernels_under_the_frame(page):
    driver, _ = page
    width = driver.execute_script("return document.getElementById('fg-canvas').clientWidth")
    node = driver.execute_script("""
        const F = otelReport.Flame, w = arguments[0];
        const r = F.rects.find(r => r.row >= 8 && r.w > w * 0.02 && r.w < w * 0.5 && F.F.gpu_ns[r.i] > 0);
        return r ? r.i : -1;""", width)
    assert node > 0
    _click(driver, node)
    flame = driver.execute_script("const F = otelReport.Flame; return {zoom: F.zoom, gpu: F.F.gpu_ns[F.zoom], "
                                  "rect: F.rectOf(F.zoom), name: F.name(F.zoom)}")
    assert flame["zoom"] == node
    assert flame["rect"]["x"] == 0 and flame["rect"]["w"] == width  # the zoomed frame spans the width
    details = driver.find_element(By.ID, "fg-details")
    assert details.get_attribute("data-node") == str(node)
    assert details.find_element(By.TAG_NAME, "h2").text.endswith(flame["name"])
    cells = details.find_elements(By.CSS_SELECTOR, "tbody tr td:nth-child(3)")
    listed = sum(float(c.get_attribute("data-value")) for c in cells)
    shown = len(cells) < 25  # every kernel name is listed: their GPU time is the frame's
    if shown:
        assert listed * 1e3 == pytest.approx(flame["gpu"], abs=len(cells))
    driver.find_element(By.ID, "fg-reset").click()
    assert driver.execute_script("return otelReport.Flame.zoom") == 0


def test_search_total_equals_a_recount_of_the_matching_kernels(page):
    driver, batch = page
    gpu = np.flatnonzero(np.isin(batch.kind, GPU_KINDS))
    names = np.array([demangle(batch.strings[i]).lower() for i in batch.name[gpu].tolist()])
    kinds, inverse = np.unique(names, return_inverse=True)
    heaviest = kinds[np.argmax(np.bincount(inverse.reshape(-1), weights=batch.duration_ns[gpu]))]
    query = str(heaviest)[:60]  # the kernel that took the most GPU time, its name's start
    expected = int(batch.duration_ns[gpu[np.char.find(names, query) >= 0]].sum())
    assert expected > 0
    box = driver.find_element(By.ID, "fg-search")
    box.clear()
    box.send_keys(query.upper())  # the search ignores case
    match = driver.find_element(By.ID, "fg-match")
    assert int(match.get_attribute("data-total")) == expected
    assert "frames match" in match.text
    box.clear()
    box.send_keys(" ")


def test_hover_shows_the_numbers(page):
    driver, _ = page
    canvas = driver.find_element(By.ID, "fg-canvas")
    size = canvas.size
    ActionChains(driver).move_to_element_with_offset(canvas, 0, int(2 * 18 + 9 - size["height"] / 2)).perform()
    tip = driver.find_element(By.ID, "fg-tip")
    assert tip.is_displayed()
    name, figures = driver.execute_script("const F = otelReport.Flame; return [F.name(F.hover), F.figures(F.hover)]")
    assert name in tip.text and figures in tip.text and "GPU time" in tip.text


def test_the_node_budget_keeps_totals_and_callers():
    profile = load_profile([str(trace(PYTHON_STACKS))])
    whole = flame_data(profile)
    cut = flame_data(profile, limit=300)
    assert cut["count"] <= 300 + cut["depth"] and cut["left_out"] == whole["count"] - cut["count"] > 0
    parent = np.array(cut["parent"])
    assert (parent[1:] < np.arange(1, len(parent))).all()  # callers first: every kept node's caller kept
    for key in ("gpu_ns", "cpu_ns", "launches"):
        values = np.array(cut[key])
        assert values[0] == whole[key][0]  # nothing is lost from the totals
        children = np.zeros(len(values), np.int64)
        np.add.at(children, parent[1:], values[1:])
        assert (children <= values).all()  # what is left out stays in the callers


def test_a_flame_graph_past_the_budget_says_what_it_leaves_out(page, tmp_path):
    from otel_profiler.analysis.document import SummaryDocument
    from otel_profiler.report.html import render_html, report_data

    driver, batch = page
    data = report_data(SummaryDocument(load_profile([str(trace(PYTHON_STACKS))])))
    data["flame"] = flame_data(load_profile([str(trace(PYTHON_STACKS))]), limit=300)
    html = tmp_path / "cut.html"
    html.write_text(render_html(data), encoding="utf-8")
    driver.get(html.as_uri())
    driver.execute_script("otelReport.showTab('flame')")
    note = driver.find_element(By.ID, "fg-note").text
    assert f"shows {data['flame']['count']:,} of {data['flame']['count'] + data['flame']['left_out']:,} call stacks" in note
    gpu = np.isin(batch.kind, GPU_KINDS)
    assert int(driver.find_element(By.ID, "fg-total").get_attribute("data-gpu-ns")) == int(batch.duration_ns[gpu].sum())
    assert _ink(driver) > 10_000


def outermost_operator_time(batch) -> int:
    """Operators' CPU time recounted plainly: per thread, the durations of the operators that no
    other operator holds from start to end (self times add up to these). Steps are left out: their
    time outside their operators is no operator's work (a step whose operators were not captured
    would otherwise be all CPU time)."""
    from otel_profiler.analysis.attribution.operators import operator_rows

    ops = operator_rows(batch)
    ops = ops[batch.kind[ops] != Kind.STEP]
    total = 0
    threads = np.stack([batch.rank[ops], batch.pid[ops], batch.tid[ops]], 1)
    for thread in np.unique(threads, axis=0):
        mine = ops[(threads == thread).all(axis=1)]
        mine = mine[np.lexsort((-batch.end_ns[mine], batch.start_ns[mine]))]  # holders before the held
        reach = None  # the latest end of the operators begun so far
        for r in mine.tolist():
            if reach is None or batch.end_ns[r] > reach:
                total += int(batch.duration_ns[r])
                reach = int(batch.end_ns[r])
    return total


def test_a_cpu_run_opens_on_cpu_time_equal_to_its_recount(page, tmp_path):
    from otel_profiler.report.html import write_report
    from test_compute_resources import train_for

    driver, _ = page
    train_for(tmp_path / "run", 1.0)
    profile = load_profile([str(tmp_path / "run")])
    write_report(profile, str(tmp_path / "r.html"))
    driver.get((tmp_path / "r.html").as_uri())
    driver.execute_script("otelReport.showTab('flame')")
    assert driver.execute_script("return otelReport.Flame.metric") == "cpu_ns"  # no GPU work
    assert driver.find_element(By.ID, "fg-metric").get_attribute("value") == "cpu_ns"
    total = driver.find_element(By.ID, "fg-total")
    assert int(total.get_attribute("data-cpu-ns")) == outermost_operator_time(profile.batch()) > 0
    assert int(total.get_attribute("data-gpu-ns")) == 0 and _ink(driver) > 1000
