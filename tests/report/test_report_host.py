"""The dashboard's CPU utilization over time and compute resources panels in real headless Chromium:
a live run's samples drawn as two lines with one point per sample and the compute card listing
this machine; a trace file shows its GPUs and says it has no CPU samples."""

from __future__ import annotations

import pytest

from cuda_tracer.loading import load_profile
from otel_profiler.analysis.summary import summarize
from otel_profiler.report.html import write_report

from conftest import trace
from test_compute_resources import QWEN, train_for
from test_report_browser import _collect_logs, _open, browser  # noqa: F401  (fixture)

from selenium.webdriver.common.by import By  # noqa: E402  (test_report_browser skips without it)


def test_cpu_chart_and_compute_card_of_a_live_run(browser, tmp_path):  # noqa: F811
    train_for(tmp_path / "run", 2.0, cpu_sample_s=0.2)
    profile = load_profile([str(tmp_path / "run")])
    samples = profile.ranks[0].meta["cpu_samples"]
    (host,) = summarize(profile)["compute"]
    write_report(profile, str(tmp_path / "r.html"))
    _open(browser, (tmp_path / "r.html").as_uri())
    card = browser.find_element(By.ID, "cpu-util")
    paths = card.find_elements(By.CSS_SELECTOR, "#cpu-chart path")
    assert {p.get_attribute("class") for p in paths} == {"system", "process"}
    for p in paths:
        assert p.get_attribute("d").count("L") == len(samples["t"]) - 1
    assert f"{len(samples['t'])} samples" in card.text and f"{samples['cores']} cores" in card.text
    compute = browser.find_element(By.ID, "compute")
    rows = {tr.find_element(By.TAG_NAME, "th").text: tr.find_element(By.TAG_NAME, "td").text
            for tr in compute.find_elements(By.CSS_SELECTOR, "table.compute-host tr")}
    assert rows["Host"] == f"{host['host']} (rank 0)"
    assert rows["CPU"] == host["cpu_model"]
    assert rows["CPU cores"].startswith(f"{host['cpu_cores']['logical']} logical")
    assert f"torch {host['versions']['torch']}" in rows["Versions"]
    assert "Read by the profiled process" in compute.text
    assert _collect_logs(browser) == []


def test_trace_file_shows_its_gpus_and_no_cpu_samples(browser, tmp_path):  # noqa: F811
    profile = load_profile([str(trace(QWEN))])
    write_report(profile, str(tmp_path / "t.html"))
    _open(browser, (tmp_path / "t.html").as_uri())
    assert browser.find_element(By.ID, "no-cpu-samples").is_displayed()
    rows = {tr.find_element(By.TAG_NAME, "th").text: tr.find_element(By.TAG_NAME, "td").text
            for tr in browser.find_elements(By.CSS_SELECTOR, "#compute table.compute-host tr")}
    assert rows["GPU 0"].startswith("NVIDIA H100 80GB HBM3")
    assert rows["Versions"] == "cuda 12.4" and rows["Driver"] == "CUDA 12.9 capable"
    assert _collect_logs(browser) == []
