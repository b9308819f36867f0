"""The Operators and Memory tabs of the HTML report, and the ``diff`` page, in real headless
Chromium: the operator rows equal the summary's operator view, a click shows the operator's kernels,
regions are listed; the memory chart draws and the peak table equals the summary; the diff page
shows the diff; no console errors."""

from __future__ import annotations

import pytest

from cuda_tracer.loading import load_profile
from otel_profiler.analysis.summary import summarize
from otel_profiler.report.html import write_report

from conftest import trace
from test_report_browser import _collect_logs, _open, browser  # noqa: F401  (fixture)

from selenium.webdriver.common.by import By  # noqa: E402  (test_report_browser skips without it)

NEG = "hta/negative_queue_length_values_check/rank0.json.gz"  # CUDA graph and compiled regions
QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"  # [memory] events
CPU_ONLY = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
RESNET = "kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"  # call stacks


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ops")
    out = {}
    for key, rel in (("neg", NEG), ("cpu", CPU_ONLY), ("mem", QWEN), ("res", RESNET)):
        profile = load_profile([str(trace(rel))])
        html = folder / f"{key}.html"
        write_report(profile, str(html))
        out[key] = (html.as_uri(), summarize(profile))
    return out


def _operators_only(summary: dict) -> list[dict]:
    """The operator rows, in the summary's order: torch's own ranges are in a table of their own."""
    return [r for r in summary["operators"]["by_name"] if "range" not in r]


def test_operator_table_and_drill_down(browser, pages):  # noqa: F811
    url, summary = pages["neg"]
    _open(browser, url)
    browser.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=operators]").click()
    table = browser.find_element(By.ID, "stat-operators")
    rows = table.find_elements(By.CSS_SELECTOR, "tbody tr")
    expected = _operators_only(summary)
    assert len(rows) == len(expected)
    ranges = browser.find_elements(By.CSS_SELECTOR, "#stat-torch-ranges tbody tr td:last-child")
    assert sorted(td.get_attribute("data-value") for td in ranges) == \
        sorted(r["name"] for r in summary["operators"]["by_name"] if "range" in r)
    first = rows[0].find_elements(By.TAG_NAME, "td")
    assert first[-1].get_attribute("data-value") == expected[0]["name"]
    assert float(first[1].get_attribute("data-value")) == pytest.approx(expected[0]["self_gpu_us"])
    rows[0].click()
    details = browser.find_element(By.ID, "op-details")
    assert details.find_element(By.TAG_NAME, "h2").text == expected[0]["name"]
    shown = [(td.get_attribute("title").split("\n\n")[0],
              float(tr.find_elements(By.TAG_NAME, "td")[2].get_attribute("data-value")))
             for tr in details.find_elements(By.CSS_SELECTOR, "tbody tr")
             for td in tr.find_elements(By.CSS_SELECTOR, "td.name")]
    assert shown == [(k["name"], pytest.approx(k["gpu_us"])) for k in expected[0]["top_kernels"]]
    regions = browser.find_element(By.ID, "op-regions").find_elements(By.TAG_NAME, "h3")
    assert [h.text.split(" (")[0] for h in regions] == [g["name"] for g in summary["operators"]["regions"]]
    assert _collect_logs(browser) == []


def test_module_hierarchy_table(browser, pages):  # noqa: F811
    url, summary = pages["mem"]
    _open(browser, url)
    browser.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=operators]").click()
    expected = summary["operators"]["modules"]["by_path"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#stat-modules tbody tr")
    assert len(rows) == len(expected) > 1
    for tr, r in zip(rows[:5], expected):
        cells = tr.find_elements(By.TAG_NAME, "td")
        assert cells[-1].get_attribute("data-value") == cells[-1].get_attribute("title") == r["path"]
        assert cells[-1].text.strip() == r["name"]
        assert float(cells[0].get_attribute("data-value")) == pytest.approx(r["total_gpu_us"])
    assert "kernel time launched inside a module" in browser.find_element(By.ID, "module-note").text
    at = next(i for i, r in enumerate(expected[:len(rows)]) if r["top_kernels"])
    rows[at].click()
    details = browser.find_element(By.ID, "module-details")
    assert details.find_element(By.TAG_NAME, "h2").text == expected[at]["path"]
    shown = [float(tr.find_elements(By.TAG_NAME, "td")[2].get_attribute("data-value"))
             for tr in details.find_elements(By.CSS_SELECTOR, "tbody tr")]
    assert shown == [pytest.approx(k["gpu_us"]) for k in expected[at]["top_kernels"]]
    assert _collect_logs(browser) == []


def test_operator_call_stacks_in_drill_down(browser, pages):  # noqa: F811
    url, summary = pages["res"]
    _open(browser, url)
    browser.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=operators]").click()
    assert browser.find_elements(By.ID, "stat-modules") == []
    rows = browser.find_elements(By.CSS_SELECTOR, "#stat-operators tbody tr")
    expected = _operators_only(summary)
    at = next(i for i, r in enumerate(expected) if r.get("call_stacks"))
    rows[at].click()
    shown = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#op-details .call-stack pre")]
    assert shown == ["\n".join(c["stack"]) for c in expected[at]["call_stacks"]]
    assert _collect_logs(browser) == []


def test_cpu_only_profile_lists_operators_without_gpu_time(browser, pages):  # noqa: F811
    url, summary = pages["cpu"]
    _open(browser, url)
    browser.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=operators]").click()
    rows = browser.find_elements(By.CSS_SELECTOR, "#stat-operators tbody tr")
    assert len(rows) == len(_operators_only(summary)) > 0
    rows[0].click()
    assert "launched no kernel" in browser.find_element(By.ID, "op-details").text
    assert _collect_logs(browser) == []


def test_diff_page_shows_the_diff(browser, tmp_path):  # noqa: F811
    import json
    import subprocess
    import sys

    base, new = (str(trace(f"hta/trace_filter/sampled_rank-{i}.json.gz")) for i in (0, 1))
    page, data = tmp_path / "diff.html", tmp_path / "diff.json"
    for fmt, out in (("html", page), ("json", data)):
        subprocess.run([sys.executable, "-m", "otel_profiler", "diff", base, new, "--format", fmt,
                        "-o", str(out)], check=True, capture_output=True, timeout=600)
    d = json.loads(data.read_text())
    _open(browser, page.as_uri())
    titles = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "section h2")]
    assert titles[0] == "Steps" and any(t.startswith("Kernels by time change") for t in titles)
    rows = browser.find_elements(By.XPATH, "//section[h2[text()='GPU time by kernel class (us)']]//tbody/tr")
    first = rows[0].find_elements(By.TAG_NAME, "td")
    assert first[0].text == "kernels total_us"
    assert float(first[3].get_attribute("data-value")) == pytest.approx(d["kernels"]["total_us"]["delta"])
    assert "up" in first[3].get_attribute("class")
    shown = json.loads(browser.find_element(By.ID, "diff-data").get_attribute("textContent"))
    assert shown == d
    assert _collect_logs(browser) == []


def test_memory_tab_chart_and_peak(browser, pages):  # noqa: F811
    url, summary = pages["mem"]
    _open(browser, url)
    browser.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=memory]").click()
    chart = browser.find_element(By.ID, "mem-chart")
    path = chart.find_element(By.CSS_SELECTOR, "path.allocated").get_attribute("d")
    assert path.count("H") > 100 and chart.find_element(By.CSS_SELECTOR, "path.reserved")
    assert chart.size["height"] > 100
    for device, d in summary["memory"]["devices"].items():
        shown = browser.find_element(By.CSS_SELECTOR,
                                     f"[data-metric='memory.devices.{device}.peak.allocated_bytes']")
        assert int(shown.get_attribute("data-value")) == d["peak"]["allocated_bytes"]
        assert "MiB" in shown.text or "GiB" in shown.text
    rows = browser.find_elements(By.CSS_SELECTOR, "#mem-largest tbody tr")
    assert len(rows) == sum(len(d["largest_allocations"]) for d in summary["memory"]["devices"].values())
    assert _collect_logs(browser) == []


def test_memory_tab_says_what_is_missing(browser, pages):  # noqa: F811
    _open(browser, pages["neg"][0])
    browser.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=memory]").click()
    assert "profile_memory=True" in browser.find_element(By.ID, "no-memory").text
    assert not browser.find_elements(By.ID, "mem-chart")
    assert _collect_logs(browser) == []


def test_memory_tab_of_a_live_cpu_run_with_a_snapshot(browser, tmp_path):  # noqa: F811
    import pickle

    from test_live_memory import _snapshot, _train

    _train(tmp_path / "run", "cpu_op,memory")
    with open(tmp_path / "run" / "memory-snapshot.rank-0.oom.pickle", "wb") as f:
        pickle.dump(_snapshot(), f)
    profile = load_profile([str(tmp_path / "run")])
    summary = summarize(profile)
    write_report(profile, str(tmp_path / "live.html"))
    _open(browser, (tmp_path / "live.html").as_uri())
    browser.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=memory]").click()
    assert browser.find_element(By.ID, "no-memory").is_displayed()  # no GPU memory here
    (row,) = browser.find_elements(By.CSS_SELECTOR, "#mem-host tbody tr")
    cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    host = summary["memory"]["host"]["cpu"]
    assert cells[0] == "cpu" and cells[4] == host["peak"]["operator"] and cells[5].replace(",", "") == str(host["allocations"])
    (snap,) = browser.find_elements(By.CSS_SELECTOR, "#mem-snapshots tbody tr")
    cells = [td.text for td in snap.find_elements(By.TAG_NAME, "td")]
    assert cells[1] == "oom" and cells[2] == "2" and cells[-1] == "memory-snapshot.rank-0.oom.pickle"
    assert browser.find_elements(By.ID, "mem-cuda-steps") == []  # no CUDA statistics on the CPU
    assert _collect_logs(browser) == []
