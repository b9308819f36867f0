"""The HTML report in real headless Chromium (selenium): it loads from file:// without console errors,
its dashboard numbers equal ``summary --format json``, the timeline draws, zooms, pans and shows
details on click, tables sort and filter, and hostile names stay text.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from cuda_tracer.loading import load_profile
from otel_profiler.analysis.activity import cpu_active, precision_times
from otel_profiler.report.html import write_report

from conftest import trace

webdriver = pytest.importorskip("selenium.webdriver")
from chromium import chromium  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.actions.wheel_input import ScrollOrigin  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

LARGEST = "hta/df_index_resolver/df_index_resolver.json.gz"
RANKS = "hta/trace_filter"


@pytest.fixture(scope="module")
def browser():
    with chromium("otel-report-chromium-", console_logs=True) as driver:
        driver.severe_logs = []
        yield driver


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Reports and their ``summary --format json`` for the largest shared trace and a 2-rank folder."""
    out = {}
    folder = tmp_path_factory.mktemp("reports")
    for key, rel in (("largest", LARGEST), ("ranks", RANKS)):
        path = str(trace(rel))
        html = folder / f"{key}.html"
        subprocess.run([sys.executable, "-m", "otel_profiler", "report", path, "-o", str(html)],
                       check=True, capture_output=True)
        summary = json.loads(subprocess.run(
            [sys.executable, "-m", "otel_profiler", "summary", path, "--format", "json"],
            check=True, capture_output=True, text=True).stdout)
        out[key] = (html.as_uri(), summary, load_profile([path]))
    return out


def _open(browser, url: str) -> None:
    browser.get(url)
    _collect_logs(browser)


def _collect_logs(browser) -> list[dict]:
    browser.severe_logs += [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    return browser.severe_logs


def _expected(path: str, summary: dict, profile) -> float:
    if path == "memcpy+memset.total_us":
        return sum(m["total_us"] for m in summary["memcpy"].values()) + summary["memset"]["total_us"]
    if path.startswith("precision."):
        return precision_times(summary["kernels"]["by_name"])[path.split(".", 1)[1]]
    if path.startswith("cpu_active."):
        _, rank, field = path.split(".")
        return cpu_active(profile.batch())[rank][field]
    node = summary
    for part in path.split("."):
        node = node[part]
    return node


def _check_dashboard(browser, summary, profile) -> int:
    checked = 0
    for e in browser.find_elements(By.CSS_SELECTOR, "#dashboard [data-metric]"):
        path, value = e.get_attribute("data-metric"), float(e.get_attribute("data-value"))
        if path.startswith("kernels.by_name."):
            continue  # checked as ranked lists in test_top_kernels
        assert value == pytest.approx(_expected(path, summary, profile), rel=1e-12, abs=1e-9), path
        assert e.text.strip(), path
        checked += 1
    return checked


def test_dashboard_numbers_equal_summary_json(browser, reports):
    url, summary, profile = reports["largest"]
    _open(browser, url)
    checked = _check_dashboard(browser, summary, profile)
    assert checked >= 20
    # Precision buckets add up to the kernel total.
    assert sum(precision_times(summary["kernels"]["by_name"]).values()) == \
        pytest.approx(summary["kernels"]["total_us"])
    assert browser.find_element(By.CSS_SELECTOR, "#annotation-hist svg rect")
    assert int(browser.find_element(By.CSS_SELECTOR, "[data-metric='steps.count']")
               .get_attribute("data-value")) == summary["steps"]["count"] == 5


def test_multi_rank_dashboard_numbers(browser, reports):
    url, summary, profile = reports["ranks"]
    _open(browser, url)
    metrics = {e.get_attribute("data-metric") for e in
               browser.find_elements(By.CSS_SELECTOR, "#dashboard [data-metric]")}
    assert {"devices.0:0.busy_us", "devices.1:1.busy_us"} <= metrics
    assert _check_dashboard(browser, summary, profile) >= 20


def test_top_kernels_follow_k(browser, reports):
    url, summary, _ = reports["largest"]
    _open(browser, url)
    k = browser.find_element(By.ID, "topk")
    k.clear()
    k.send_keys("3")
    rows = summary["kernels"]["by_name"]
    for box, key in (("top-by-time", "total_us"), ("top-by-count", "instances")):
        shown = browser.find_elements(By.CSS_SELECTOR, f"#{box} .row")
        assert len(shown) == 3
        want = sorted(rows, key=lambda r: -r[key])[:3]
        got = [(r.find_element(By.CSS_SELECTOR, ".name").get_attribute("textContent"),
                r.find_element(By.CSS_SELECTOR, ".name").get_attribute("title").split("\n\n")[0],
                float(r.find_element(By.CSS_SELECTOR, "[data-value]").get_attribute("data-value")))
               for r in shown]
        # The short form is shown, the full name is the hover text.
        assert got == [(r["short_name"], r["name"], r[key]) for r in want]


def _canvas_ink(browser) -> int:
    return browser.execute_script("""
        const c = document.getElementById('tl-canvas'), g = c.getContext('2d');
        const x0 = Math.round(230 * (window.devicePixelRatio || 1));
        const d = g.getImageData(x0, 30, c.width - x0, c.height - 30).data;
        let ink = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i] < 240 || d[i + 1] < 240 || d[i + 2] < 240) ink++;
        return ink;""")


def _view(browser) -> tuple[float, float]:
    t0, t1 = browser.find_element(By.ID, "tl-canvas").get_attribute("data-view").split(",")
    return float(t0), float(t1)


def test_timeline_draws_zooms_and_pans(browser, reports):
    url, _, _ = reports["largest"]
    _open(browser, url)
    browser.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=timeline]").click()
    canvas = browser.find_element(By.ID, "tl-canvas")
    assert _canvas_ink(browser) > 5000
    t0, t1 = _view(browser)
    ActionChains(browser).scroll_from_origin(ScrollOrigin.from_element(canvas, 100, 0), 0, -400).perform()
    z0, z1 = _view(browser)
    assert z1 - z0 < 0.8 * (t1 - t0)  # wheel zoomed in
    canvas.send_keys("w")
    k0, k1 = _view(browser)
    assert k1 - k0 == pytest.approx(0.8 * (z1 - z0))
    canvas.send_keys("s")
    canvas.send_keys("d")
    d0, d1 = _view(browser)
    assert d0 > k0 and d1 - d0 == pytest.approx(z1 - z0)
    ActionChains(browser).click_and_hold(canvas).move_by_offset(150, 0).release().perform()
    p0, _ = _view(browser)
    assert p0 < d0  # dragging right shows earlier time
    assert _canvas_ink(browser) > 1000


def test_timeline_click_shows_details(browser, reports):
    url, summary, _ = reports["largest"]
    _open(browser, url)
    browser.execute_script("otelReport.showTab('timeline')")
    # The longest kernel that has a launch call: reveal it, then click its centre.
    index = browser.execute_script("""
        const e = otelReport.Timeline.events; let best = -1;
        for (let k = 0; k < e.flowDst.length; k++) { const i = e.flowDst[k];
          if (best < 0 || e.dur[i] > e.dur[best]) best = i; }
        otelReport.Timeline.reveal(best); return best;""")
    pos = browser.execute_script(f"return otelReport.Timeline.screenPos({index})")
    canvas = browser.find_element(By.ID, "tl-canvas")
    ActionChains(browser).move_to_element_with_offset(
        canvas, int(pos["x"] - canvas.size["width"] / 2), int(pos["y"] - canvas.size["height"] / 2)
    ).click().perform()
    details = browser.find_element(By.ID, "tl-selected")
    assert int(details.get_attribute("data-index")) == index
    text = details.text
    assert "launched by" in text and "launch latency" in text and "kernel" in text
    name = details.find_element(By.CSS_SELECTOR, "dd").get_attribute("textContent")
    assert name in {r["name"] for r in summary["kernels"]["by_name"]}
    # Following the link selects the launch call.
    details.find_element(By.TAG_NAME, "a").click()
    assert "launched GPU op" in browser.find_element(By.ID, "tl-selected").text


def test_tables_sort_and_filter(browser, reports):
    url, summary, _ = reports["largest"]
    _open(browser, url)
    browser.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=statistics]").click()
    table = browser.find_element(By.ID, "stat-kernels")
    header = table.find_element(By.CSS_SELECTOR, "th[data-key=instances]")

    def column(i):
        return [float(td.get_attribute("data-value")) for td in
                table.find_elements(By.CSS_SELECTOR, f"tbody tr td:nth-child({i})")]

    header.click()
    values = column(3)
    assert values == sorted(values, reverse=True) and len(values) == len(summary["kernels"]["by_name"])
    header.click()
    assert column(3) == sorted(values)
    box = table.find_element(By.CSS_SELECTOR, "input[type=search]")
    box.send_keys("nccl")
    names = [td.get_attribute("textContent") for td in
             table.find_elements(By.CSS_SELECTOR, "tbody tr td:last-child")]
    assert names and all("nccl" in n.lower() for n in names)
    assert len(names) == sum("nccl" in r["name"].lower() for r in summary["kernels"]["by_name"])


def test_insights_tab_lists_findings(browser, reports):
    url, summary, _ = reports["largest"]
    _open(browser, url)
    browser.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=insights]").click()
    cards = browser.find_elements(By.CSS_SELECTOR, "#insights .insight")
    assert [c.get_attribute("data-rule") for c in cards] == [i["rule"] for i in summary["insights"]]
    assert "Recommendation" in cards[0].text


HOSTILE = ['<img src=x onerror="window.pwned=1">', "</script><script>window.pwned=2</script>",
           "<!--", "/*JS*/ \u2028 & \"quotes\""]


def test_hostile_names_stay_text(browser, tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": 100 + 10 * i, "dur": 5,
               "args": {"device": 0, "stream": 7, "correlation": i + 1}} for i, n in enumerate(HOSTILE)]
    events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                "ts": 95 + 10 * i, "dur": 2, "args": {"correlation": i + 1}} for i in range(len(HOSTILE))]
    events.append({"ph": "X", "cat": "user_annotation", "name": HOSTILE[0], "pid": 1, "tid": 1,
                   "ts": 90, "dur": 60})
    path = tmp_path / "hostile.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    html = tmp_path / "hostile.html"
    write_report(load_profile([str(path)]), str(html))
    _open(browser, html.as_uri())
    assert browser.execute_script("return window.pwned === undefined && !document.querySelector('img')")
    browser.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=statistics]").click()
    cells = {td.get_attribute("textContent") for td in
             browser.find_elements(By.CSS_SELECTOR, "#stat-kernels tbody td.name")}
    assert set(HOSTILE) <= cells
    browser.execute_script("otelReport.showTab('timeline')")
    assert _canvas_ink(browser) > 0


def test_no_console_errors(browser, reports):
    for key in ("largest", "ranks"):
        _open(browser, reports[key][0])
        for tab in ("dashboard", "statistics", "timeline", "insights"):
            browser.find_element(By.CSS_SELECTOR, f"#tabs button[data-tab={tab}]").click()
    assert _collect_logs(browser) == []


# ---------------------------------------------------------------- what a person sees first
B200 = "tracelens/b200/eager_trace.json.gz"  # 15,230 Python function events, no step markers
QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"  # Python function events
NCCL = "hta/nccl_parser_config/nccl_data.json.gz"  # mangled CUTLASS kernel names


@pytest.fixture(scope="module")
def readable(tmp_path_factory):
    folder = tmp_path_factory.mktemp("readable")
    out = {}
    for key, rel in (("b200", B200), ("qwen", QWEN), ("nccl", NCCL), ("ranks", RANKS)):
        html = folder / f"{key}.html"
        write_report(load_profile([str(trace(rel))]), str(html))
        out[key] = html.as_uri()
    return out


def _gpu_rows_inked(browser, track: int) -> int:
    """Painted pixels right of the labels in the first event row of ``track``."""
    return browser.execute_script("""
        const T = otelReport.Timeline, c = document.getElementById('tl-canvas'), g = c.getContext('2d');
        const r = window.devicePixelRatio || 1, y = T.trackTop(arguments[0]) + 18;
        const d = g.getImageData(Math.round(260 * r), Math.round((y + 2) * r), c.width - Math.round(260 * r),
                                 Math.round(10 * r)).data;
        let ink = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i] < 230 || d[i + 1] < 230 || d[i + 2] < 230) ink++;
        return ink;""", track)


@pytest.mark.parametrize("key", ["b200", "qwen", "ranks"])
def test_timeline_first_screen_shows_the_gpu_tracks(browser, readable, key):
    _open(browser, readable[key])
    browser.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=timeline]").click()
    tracks = browser.execute_script("return otelReport.data.timeline.tracks")
    height = browser.find_element(By.ID, "tl-canvas").size["height"]
    gpu = [t for t, tr in enumerate(tracks) if tr["kind"] == "gpu"]
    assert gpu
    for t in gpu:  # every GPU stream's header and first row are on the first screen, and drawn
        top = browser.execute_script("return otelReport.Timeline.trackTop(arguments[0])", t)
        assert 0 < top and top + 18 + 16 <= height, (tracks[t], top, height)
        assert _gpu_rows_inked(browser, t) > 0, tracks[t]
    # Deep Python stacks stay folded until asked: a click on the thread's label shows every level.
    cpu = [t for t, tr in enumerate(tracks) if tr["kind"] == "cpu"]
    layout = browser.execute_script("return otelReport.Timeline.layout")
    deep = max(cpu, key=lambda t: layout[t]["depth"])
    if key != "ranks":
        assert layout[deep]["depth"] > 10 and layout[deep]["rows"] == 1  # Python call stacks
    top = browser.execute_script("return otelReport.Timeline.trackTop(arguments[0])", deep)
    if top + 9 < height:
        canvas = browser.find_element(By.ID, "tl-canvas")
        ActionChains(browser).move_to_element_with_offset(
            canvas, int(40 - canvas.size["width"] / 2), int(top + 9 - height / 2)).click().perform()
        layout = browser.execute_script("return otelReport.Timeline.layout")
        assert layout[deep]["rows"] == layout[deep]["depth"]
    labels = [tr["label"] for tr in tracks]
    assert not any("process -1" in lb for lb in labels)


def test_long_names_show_in_full_on_hover_and_click(browser, readable):
    _open(browser, readable["nccl"])
    browser.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=statistics]").click()
    summary = browser.execute_script("return otelReport.data.summary")
    cutlass = [r for r in summary["kernels"]["by_name"] if r["raw_name"].startswith("_Z")]
    assert cutlass
    cells = {td.get_attribute("textContent"): td for td in
             browser.find_elements(By.CSS_SELECTOR, "#stat-kernels tbody td.name.folded")}
    for r in cutlass:
        td = cells[r["short_name"]]
        title = td.get_attribute("title")
        assert title.startswith(r["name"]) and r["raw_name"] in title  # hover: full and recorded name
        td.click()
        assert td.get_attribute("textContent") == title  # click: the full name in place
    # Kernels whose full names share their first 30 characters read differently.
    shown = [td.get_attribute("textContent") for td in
             browser.find_elements(By.CSS_SELECTOR, "#stat-kernels tbody tr td:last-child")]
    assert len(set(shown)) == len(shown) == len(summary["kernels"]["by_name"])
    # The timeline: hovering a kernel gives its full name.
    browser.execute_script("otelReport.showTab('timeline')")
    index = browser.execute_script("""
        const T = otelReport.Timeline, D = otelReport.data.timeline, e = T.events; let best = -1;
        for (let i = 0; i < D.count; i++) if (D.raw[e.name[i]] && (best < 0 || e.dur[i] > e.dur[best])) best = i;
        T.reveal(best); return best;""")
    pos = browser.execute_script(f"return otelReport.Timeline.screenPos({index})")
    canvas = browser.find_element(By.ID, "tl-canvas")
    ActionChains(browser).move_to_element_with_offset(
        canvas, int(pos["x"] - canvas.size["width"] / 2), int(pos["y"] - canvas.size["height"] / 2)).perform()
    title = canvas.get_attribute("title")
    full = browser.execute_script(f"const D = otelReport.data.timeline; return D.strings[otelReport.Timeline.events.name[{index}]]")
    assert title.startswith(full) and "recorded as: _Z" in title and len(full) > 200


def test_step_card_says_what_is_missing(browser, readable):
    _open(browser, readable["b200"])
    card = browser.find_element(By.ID, "no-steps")
    assert "No step markers" in card.text and "ProfilerStep" in card.text
    assert not browser.find_elements(By.CSS_SELECTOR, "[data-metric='steps.count']")
    assert "0 / 0" not in browser.find_element(By.ID, "dashboard").text
    assert _collect_logs(browser) == []


LONG_WINDOW = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"  # 43 s, no steps


def test_timeline_opens_on_the_first_step_with_gpu_work_and_zooms_to_all(browser, reports):
    url, summary, profile = reports["largest"]
    _open(browser, url)
    browser.execute_script("otelReport.showTab('timeline')")
    t0, t1 = _view(browser)
    first = browser.execute_script("return otelReport.data.timeline.initial_view")
    assert (t0, t1) == pytest.approx((first["t0"], first["t1"]))
    assert first["reason"].endswith("step 2")  # step 2 is this trace's first step, with kernels
    step = next(s for s in summary["steps"]["items"] if s["step"] == 2)
    origin = browser.execute_script("return otelReport.data.timeline.t0_ns")
    assert t0 <= step["start_ns"] - origin and step["start_ns"] - origin + step["duration_us"] * 1e3 <= t1
    assert "Opened on the first step with GPU work" in browser.find_element(By.ID, "tl-details").text
    browser.find_element(By.ID, "tl-reset").click()  # "Zoom to all": one click
    a0, a1 = _view(browser)
    assert a0 == 0 and a1 > 2 * (t1 - t0)


def test_timeline_of_a_long_window_opens_on_its_busiest_second(browser, tmp_path):
    html = tmp_path / "long.html"
    subprocess.run([sys.executable, "-m", "otel_profiler", "report", str(trace(LONG_WINDOW)), "-o", str(html)],
                   check=True, capture_output=True)
    _open(browser, html.as_uri())
    browser.execute_script("otelReport.showTab('timeline')")
    t0, t1 = _view(browser)
    assert t1 - t0 == pytest.approx(1e9)  # one second of a 43 s window
    busy_in_view = browser.execute_script("""
        const e = otelReport.Timeline.events, [a, b] = arguments; let n = 0, all = 0;
        for (let i = 0; i < e.kind.length; i++) if (e.kind[i] === 1) { all++; if (e.start[i] >= a && e.start[i] < b) n++; }
        return [n, all];""", t0, t1)
    assert busy_in_view[0] > 0
    browser.find_element(By.ID, "tl-reset").click()
    a0, a1 = _view(browser)
    assert a0 == 0 and a1 > 40e9


def test_annotation_dropdown_fits_its_card_and_thresholds_show_no_backticks(browser, reports):
    url, _, _ = reports["largest"]
    _open(browser, url)
    browser.execute_script("otelReport.showTab('dashboard')")
    # An annotation name as long as real ones get (a module path with its arguments): a select that
    # sizes to its longest option would reach past the card.
    widths = browser.execute_script("""
        const s = document.getElementById('annotation-select'), card = s.closest('.card');
        s.append(new Option('enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__ '.repeat(6)));
        return [s.getBoundingClientRect().right, card.getBoundingClientRect().right, s.scrollWidth];""")
    assert widths[0] <= widths[1]
    browser.execute_script("otelReport.showTab('insights')")
    text = browser.find_element(By.ID, "insights").text
    assert "dataloader: time in DataLoader __next__" in text and "``" not in text


def test_timeline_shades_a_live_runs_detailed_windows(browser, tmp_path):
    torch = pytest.importorskip("torch")
    from otel_profiler import api

    model = torch.nn.Linear(16, 4)
    folder = tmp_path / "live"
    with api.Profiler(profile_dir=str(folder), steps="1:3", activities="cpu_op", summary_at_exit=False,
                      auto_steps=False, signal=False):
        for _ in range(5):
            model(torch.randn(8, 16)).sum().backward()
            api.step()
    html = tmp_path / "live.html"
    subprocess.run([sys.executable, "-m", "otel_profiler", "report", str(folder), "-o", str(html)],
                   check=True, capture_output=True)
    _open(browser, html.as_uri())
    browser.execute_script("otelReport.showTab('timeline')")
    browser.find_element(By.ID, "tl-reset").click()
    assert browser.find_element(By.ID, "tl-canvas").get_attribute("data-windows") == "1"
    assert browser.execute_script("return DATA.timeline.windows.map(w => w.label)") == ["window: steps 1-2 (steps)"]
    assert not [e for e in _collect_logs(browser) if "timeline" in e["message"]]
