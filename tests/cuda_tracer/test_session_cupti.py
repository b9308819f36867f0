"""Detailed GPU capture without torch: the session's CUPTI path (``cuda_tracer.capture.cupti.CuptiWindowSource``).

Without a GPU: the adapter against a stand-in for cupti-python's GPU calls handing over real records
(capture lands in the profile; TensorFlow's or JAX's own profiler makes it back off), a job where
cupti-python is missing, and a real plain-python job through ``otel-profiler run`` that finishes with
its steps and one line saying why CUPTI does not capture (no driver here, or no cupti-python).
Live CUPTI on a GPU is tests/gpu's job.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

import cupti_records_real as f
from cuda_tracer.capture import subscriber
from cuda_tracer.capture.cupti import CuptiWindowSource, cupti_activities
from cuda_tracer.model.events import Kind
from cuda_tracer.loading import load_profile
from otel_profiler import api
from otel_profiler.live.session import ProfilerWarning
from cupti_fakes import FakeCupti
from test_tensorflow_keras import tf_python  # noqa: F401  (the TensorFlow environment fixture)
from cupti_fakes import isolated_from_other_profilers  # noqa: F401 (autouse fixture)

REPO = Path(__file__).resolve().parents[2]
TF_PROFILER = "tensorflow.python.profiler.profiler_v2"
JAX_PROFILER = "jax._src.profiler"
QUIET = dict(signal=False, summary_at_exit=False, auto_steps=False, flush_interval_s=60)


class DeliveringCupti(FakeCupti):
    """A fake cupti-python that hands over one launch + kernel pair at each final flush."""

    def activity_flush_all(self, flag):
        super().activity_flush_all(flag)
        if flag == 1 and self.callbacks is not None:
            corr = len(self.flushes)
            t = self.now + corr * 1000
            self.callbacks[1]([f.api(corr, t, t + 10, 211), f.kernel(corr, t + 20, t + 90, name=f"k{corr}")])



@pytest.fixture
def no_torch(monkeypatch):
    """The process looks like a TensorFlow/JAX job: torch not imported."""
    for name in [n for n in sys.modules if n == "torch" or n.startswith("torch.")]:
        monkeypatch.delitem(sys.modules, name)


def fake_cupti(monkeypatch, module) -> None:
    monkeypatch.setitem(sys.modules, "cupti", NS(cupti=module))
    monkeypatch.setitem(sys.modules, "cupti.cupti", module)


def test_cupti_activities_follow_the_setting():
    assert cupti_activities({"kernel", "memcpy"}) == ("CONCURRENT_KERNEL", "MEMCPY", "MEMCPY2", "MARKER",
                                                       "NAME", "OVERHEAD")
    assert "RUNTIME" not in cupti_activities({"kernel"}) and "DRIVER" in cupti_activities({"driver"})
    assert cupti_activities({"cpu_op"}) == ("MARKER", "NAME", "OVERHEAD")


def test_adapter_starts_stops_and_refuses_like_the_session_expects():
    source = CuptiWindowSource({"kernel", "runtime"}, rank=3, module=DeliveringCupti())
    source.start()
    assert source.running
    capture = source.stop()
    assert not source.running
    batch = capture.to_batch()
    assert batch.kind.tolist() == [Kind.RUNTIME, Kind.KERNEL] and set(batch.columns["rank"]) == {3}
    assert len(capture.to_batch()) == 0  # handed over once
    busy = CuptiWindowSource({"kernel"}, module=FakeCupti(register_status=39))
    with pytest.raises(subscriber.ProfilerBusy) as caught, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        busy.start()
    assert caught.value.announced and "MULTIPLE_SUBSCRIBERS" in str(caught.value)


def test_other_profiler_active_sees_tensorflow_and_jax_profilers(monkeypatch):
    monkeypatch.setitem(sys.modules, TF_PROFILER, NS(_profiler=None))
    monkeypatch.setitem(sys.modules, JAX_PROFILER, NS(_profile_state=NS(profile_session=None)))
    assert subscriber.other_profiler_active() is None
    monkeypatch.setitem(sys.modules, TF_PROFILER, NS(_profiler=object()))
    assert "TensorFlow" in subscriber.other_profiler_active()
    monkeypatch.setitem(sys.modules, TF_PROFILER, NS(_profiler=None))
    monkeypatch.setitem(sys.modules, JAX_PROFILER, NS(_profile_state=NS(profile_session=object())))
    assert "JAX" in subscriber.other_profiler_active()


def test_detection_imports_neither_tensorflow_nor_jax():
    code = ("import sys; from cuda_tracer.capture.subscriber import other_profiler_active; other_profiler_active(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'jax', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def _profile(folder: Path):
    return load_profile([str(folder)]).ranks[0]


def test_without_torch_a_window_captures_through_cupti(tmp_path, monkeypatch, no_torch):
    module = DeliveringCupti()
    fake_cupti(monkeypatch, module)
    with api.Profiler(profile_dir=str(tmp_path), steps="1:3", **QUIET):
        for _ in range(5):
            api.step()
    rank = _profile(tmp_path)
    kernels = rank.batch.of_kind(Kind.KERNEL)
    assert kernels.names() == ["k1"]  # one final flush, at the window's stop
    assert len(rank.batch.of_kind(Kind.RUNTIME)) == 1
    assert rank.meta["detailed_capture"] == "on"
    assert [(w["first_step"], w["last_step"], w["captured"]) for w in rank.meta["windows"]] == [(1, 2, True)]
    assert not module.enabled  # every kind disabled again after the window


@pytest.mark.parametrize("owner, word", [(TF_PROFILER, "TensorFlow"), (JAX_PROFILER, "JAX")])
def test_backs_off_with_one_line_when_the_framework_profiler_holds_cupti(tmp_path, monkeypatch, no_torch,
                                                                       owner, word):
    module = DeliveringCupti()
    fake_cupti(monkeypatch, module)
    held = NS(_profiler=object()) if owner == TF_PROFILER else NS(_profile_state=NS(profile_session=1))
    monkeypatch.setitem(sys.modules, owner, held)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with api.Profiler(profile_dir=str(tmp_path), steps="0:2", every_steps=3, **QUIET):
            for _ in range(8):
                api.step()
    lines = [str(w.message) for w in caught if "otel-profiler" in str(w.message)]
    assert len(lines) == 1 and word in lines[0], lines
    assert sum(issubclass(w.category, ProfilerWarning) for w in caught) == 1  # the back-off line only
    assert module.callbacks is None and not module.enabled  # CUPTI never touched
    rank = _profile(tmp_path)
    assert len(rank.batch.of_kind(Kind.STEP)) == 8 and len(rank.batch.of_kind(Kind.KERNEL)) == 0
    assert word in rank.meta["detailed_capture"]


def test_missing_cupti_skips_windows_until_torch_comes_and_kineto_captures(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setitem(sys.modules, "cupti", None)  # as if cupti-python were not installed
    monkeypatch.setitem(sys.modules, "cupti.cupti", None)
    hidden = {n: m for n, m in sys.modules.items() if n == "torch" or n.startswith("torch.")}
    for name in hidden:  # the first window opens before the job imports torch
        monkeypatch.delitem(sys.modules, name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with api.Profiler(profile_dir=str(tmp_path), steps="0:2", every_steps=4, window_steps=1,
                          activities="gpu,cpu_op", **QUIET):
            for _ in range(3):
                api.step()
            sys.modules.update(hidden)  # the job imports torch: the next window is Kineto's
            for _ in range(4):
                hidden["torch"].ones(4).sum()
                api.step()
    lines = [str(w.message) for w in caught if "otel-profiler" in str(w.message)]
    assert len(lines) == 1 and "cupti-python is not installed" in lines[0], lines
    rank = _profile(tmp_path)
    assert [w["captured"] for w in rank.meta["windows"]] == [False, True]
    assert len(rank.batch.of_kind(Kind.CPU_OP)) > 0
    assert rank.meta["detailed_capture"] == "on"


PLAIN_JOB = """
import time
from otel_profiler import annotate, step

for i in range(6):
    with annotate("work"):
        sum(range(20000))
    step()
"""


# With cupti-python installed (the dev extra), this machine's missing driver is the reason.
WHY_NO_CUPTI = ("CUDA driver is not found" if importlib.util.find_spec("cupti") is not None
                else "cupti-python is not installed")


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="a CUDA driver is present")
def test_plain_python_job_without_cupti_runs_with_one_line_about_it(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(PLAIN_JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(OTEL_PROFILER_SIGNAL="false", OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none")
    out = subprocess.run([sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(tmp_path / "prof"),
                          "--", sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    about_cupti = [line for line in out.stderr.replace(str(tmp_path), "<tmp>").splitlines()
                   if "cupti" in line.lower() and line.startswith("otel-profiler")]  # not the summary's insights
    assert len(about_cupti) == 1 and WHY_NO_CUPTI in about_cupti[0], out.stderr
    rank = _profile(tmp_path / "prof")
    assert len(rank.batch.of_kind(Kind.STEP)) == 5  # six boundaries
    assert WHY_NO_CUPTI in rank.meta["detailed_capture"]
    assert json.loads((tmp_path / "prof" / "summary.json").read_text())


@pytest.mark.slow
def test_keras_job_without_cupti_runs_with_one_line_about_it(tf_python, tmp_path):  # noqa: F811
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH", "VIRTUAL_ENV"))}
    env.update(OTEL_PROFILER_SIGNAL="false", OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none",
               TF_CPP_MIN_LOG_LEVEL="2")
    probe = subprocess.run([str(tf_python), "-c", "import importlib.util as u; print(u.find_spec('cupti') is None)"],
                           capture_output=True, text=True, timeout=60)
    if probe.stdout.strip() != "True":
        pytest.skip("cupti-python is installed in the TensorFlow environment")
    out = subprocess.run([str(tf_python), "-m", "otel_profiler", "run", "--output-dir", str(tmp_path / "prof"),
                          "--", str(tf_python), str(REPO / "examples" / "train_keras.py"), "--epochs", "1",
                          "--samples", "128", "--batch-size", "32"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    about_cupti = [line for line in out.stderr.replace(str(tmp_path), "<tmp>").splitlines()
                   if "cupti" in line.lower() and line.startswith("otel-profiler")]  # not the summary's insights
    assert len(about_cupti) == 1 and "cupti-python is not installed" in about_cupti[0], out.stderr[-3000:]
    rank = _profile(tmp_path / "prof")
    assert len(rank.batch.of_kind(Kind.STEP)) == 128 * 3 // 4 // 32  # validation_split=0.25
    assert "cupti-python is not installed" in rank.meta["detailed_capture"]
