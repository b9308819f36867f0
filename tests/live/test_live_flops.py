"""FLOPs from live windows: a window that records operators records their input shapes too, read
from torch's event objects or from its trace file, and the summary's FLOPs per step equal
``torch.utils.flop_counter.FlopCounterMode``'s count of the same step, run beside it; the same FLOPs
reach the job's Prometheus endpoint (``otel_profiler_flops_total``)."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest

from cuda_tracer.loading import load_profile
from otel_profiler import api
from otel_profiler.analysis.summary import summarize
from ports import free_port

torch = pytest.importorskip("torch")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

QUIET = dict(summary_at_exit=False, auto_steps=False, signal=False)


def _train_step_fn():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(96, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    x, w = torch.randn(32, 96), torch.randn(10, 48)

    def step() -> None:
        model(x).sum().backward()
        torch.mm(torch.randn(24, 10), w)  # a matrix product outside any module
        torch.bmm(torch.randn(4, 8, 16), torch.randn(4, 16, 8))

    return step


@pytest.mark.parametrize("activities", ["cpu_op", "cpu_op,memory"], ids=["event objects", "trace file"])
def test_the_flops_of_live_steps_equal_torchs_own_count(tmp_path, activities):
    step = _train_step_fn()
    with FlopCounterMode(display=False) as counter:
        step()
    expected = counter.get_total_flops()
    assert expected > 0

    with api.Profiler(profile_dir=str(tmp_path), steps="1:4", activities=activities, **QUIET):
        for _ in range(5):
            step()
            api.step()
    profile = load_profile([str(tmp_path)])
    flops = summarize(profile)["flops"]
    by_step = {s["step"]: s["flops"] for s in flops["by_step"]}
    assert by_step == {0: 0.0, 1: expected, 2: expected, 3: expected, 4: 0.0}, by_step
    gemm = flops["by_class"]["gemm"]["flops"]
    assert gemm == pytest.approx(3 * expected)  # every FLOP here is a matrix product's
    names = {row["name"] for row in flops["by_operator"]}
    assert {"aten::addmm", "aten::mm", "aten::bmm"} <= names, names


def _flops_scraped(port: int) -> dict[str, float]:
    """``otel_profiler_flops_total`` by operator class, from the job's /metrics ({} until there)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            text = response.read().decode()
    except OSError:
        return {}
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r'^otel_profiler_flops_total\{[^}]*otel_profiler_op_class="(\w+)"[^}]*\} (\S+)$', text, re.M)}


def test_the_live_flops_reach_the_prometheus_endpoint(tmp_path):
    pytest.importorskip("prometheus_client")
    step = _train_step_fn()
    with FlopCounterMode(display=False) as counter:
        step()
    port = free_port()
    with api.Profiler(profile_dir=str(tmp_path), steps="1:4", activities="cpu_op", prometheus_port=port, **QUIET):
        for _ in range(5):
            step()
            api.step()
        deadline = time.monotonic() + 120  # the window closed at step 4: its part is flushed and observed
        while not _flops_scraped(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        scraped = _flops_scraped(port)
    assert scraped == {"gemm": pytest.approx(3 * counter.get_total_flops())}, scraped
