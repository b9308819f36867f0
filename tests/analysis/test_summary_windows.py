"""The detailed windows of a live run in the summary (``steps.windows``, JSON and text) and on the
report's timeline: each captured window with its rank, steps and reason, named as the summary names
them; a window whose events were lost is left out and the one captured in its place takes its reason."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from cuda_tracer.loading import load_profile
from otel_profiler import api
from otel_profiler.analysis.summary import summarize
from otel_profiler.analysis.windows import captured_windows

QUIET = dict(summary_at_exit=False, auto_steps=False, signal=False)


def test_the_policys_reasons_become_the_summarys():
    meta = [{"reason": "range", "first_step": 1, "last_step": 10, "captured": False},  # lost
            {"reason": "retry", "first_step": 11, "last_step": 20, "captured": True},
            {"reason": "every", "first_step": 100, "last_step": 104, "captured": True},
            {"reason": "slow", "first_step": 130, "last_step": 134, "captured": True},
            {"reason": "signal", "first_step": 140, "last_step": 144, "captured": True},
            {"reason": "trigger", "first_step": 150, "last_step": 154, "captured": True},
            {"reason": "demand", "first_step": 160, "last_step": 164, "captured": True},
            {"reason": "time", "first_step": 0, "last_step": 0, "captured": True},
            {"reason": "duration", "first_step": 0, "last_step": 3, "captured": False},
            {"reason": "range", "first_step": "x", "last_step": 3, "captured": True}]  # unreadable: skipped
    assert [(w["first_step"], w["reason"]) for w in captured_windows(meta)] == [
        (11, "steps"), (100, "every"), (130, "slow_step"), (140, "signal"), (150, "trigger"), (160, "trigger"),
        (0, "duration")]
    assert captured_windows(None) == [] and captured_windows({"not": "a list"}) == []


def test_a_live_runs_windows_are_in_the_summary_json_and_text(tmp_path):
    pytest.importorskip("torch")
    import torch

    model = torch.nn.Linear(16, 4)
    with api.Profiler(profile_dir=str(tmp_path), steps="3:5", every_steps=6, window_steps=2,
                      activities="cpu_op", **QUIET):
        for _ in range(9):
            model(torch.randn(8, 16)).sum().backward()
            time.sleep(0.001)
            api.step()
    summary = summarize(load_profile([str(tmp_path)]))
    expected = [(0, 1, "every"), (3, 4, "steps"), (6, 7, "every")]
    assert summary["steps"]["windows"] == [{"rank": 0, "first_step": a, "last_step": b, "reason": r}
                                           for a, b, r in expected]
    text = subprocess.run([sys.executable, "-m", "otel_profiler", "summary", str(tmp_path)], capture_output=True,
                          text=True, check=True, timeout=300).stdout
    assert "== Detailed windows (3:" in text
    rows = [line.split() for line in text.split("== Detailed windows", 1)[1].splitlines()[3:6]]
    assert rows == [["0", str(a), str(b), r] for a, b, r in expected]
    document = json.loads(subprocess.run([sys.executable, "-m", "otel_profiler", "summary", str(tmp_path), "--format",
                                          "json"], capture_output=True, text=True, check=True, timeout=300).stdout)
    assert document["steps"]["windows"] == summary["steps"]["windows"]
