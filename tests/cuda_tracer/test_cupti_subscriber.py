"""Back-off detection: another CUPTI subscriber (Nsight, a user's torch.profiler session, a CUPTI error)."""

from __future__ import annotations

import enum
import os
import subprocess
import sys
import warnings

import pytest

from cuda_tracer.capture.subscriber import (back_off, other_profiler_active, own_session,
                                    reason_from_cupti_error)
from cupti_fakes import isolated_from_other_profilers  # noqa: F401 (autouse fixture)



def test_nothing_active():
    assert other_profiler_active() is None


def test_injection_path_means_nsight(monkeypatch):
    monkeypatch.setenv("CUDA_INJECTION64_PATH", "/opt/nvidia/nsight-systems/libToolsInjection64.so")
    reason = other_profiler_active()
    assert "CUDA_INJECTION64_PATH" in reason and "libToolsInjection64.so" in reason
    assert "\n" not in reason


def test_nsys_variables(monkeypatch):
    monkeypatch.setenv("NSYS_LAUNCH_ID", "1")
    assert other_profiler_active() == "running under Nsight Systems (NSYS_LAUNCH_ID is set)"
    assert other_profiler_active({}) is None  # an explicit environment is honoured


def test_user_torch_profiler_session_is_detected_and_ours_is_not():
    torch = pytest.importorskip("torch")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert "torch.profiler" in other_profiler_active()
        with own_session():
            assert other_profiler_active() is None
            assert "own torch.profiler" in other_profiler_active(count_own=True)
        assert other_profiler_active() is not None
    assert other_profiler_active() is None


def test_detection_never_imports_torch():
    code = ("import sys; from cuda_tracer.capture.subscriber import other_profiler_active as o; "
            "print(o(), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         env={k: v for k, v in os.environ.items() if not k.startswith("NSYS_")
                              and k != "CUDA_INJECTION64_PATH"})
    assert out.stdout.split() == ["None", "False"]


class Result(enum.IntEnum):  # shaped like cupti-python's cupti.Result
    ERROR_NOT_INITIALIZED = 15
    ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39


class CuptiError(Exception):
    def __init__(self, status):
        super().__init__("CUPTI error")
        self.status = status


def test_reason_from_cupti_error_codes():
    assert "another CUPTI subscriber" in reason_from_cupti_error(
        CuptiError(Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED))
    assert reason_from_cupti_error(CuptiError(Result.ERROR_NOT_INITIALIZED)) == \
        "CUPTI refused to start: ERROR_NOT_INITIALIZED (15)"
    assert reason_from_cupti_error(ValueError("boom")) == "CUPTI refused to start: boom"


def test_back_off_warns_once_per_reason():
    with pytest.warns(RuntimeWarning, match="cupti GPU capture is off: reason A"):
        back_off("cupti", "reason A")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back_off("cupti", "reason A")
    with pytest.warns(RuntimeWarning, match="reason B"):
        back_off("cupti", "reason B")
