"""Real TensorFlow on CPU: Keras trained zero-code and with the explicit callback, spans at a real OTLP
receiver, and TensorFlow's own profiler capture of the same run read back through xprof.

TensorFlow lives in its own virtual environment outside the work tree (``tests/venvs.py``: made once per
machine with ``pip install -e '.[tensorflow]'``, by ``scripts/test.sh`` before the tests run or else by the
``tf_python`` fixture). When the environment cannot be made (no package index, an incompatible wheel),
every test here fails with pip's own reason; nothing is skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from cuda_tracer.model.events import Kind
from cuda_tracer.loading import load_profile
from otlp_receiver import OtlpReceiver
from venvs import VenvError, tensorflow_python

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_keras.py"
SAMPLES, BATCH, EPOCHS = 256, 32, 2
TRAIN_STEPS = int(SAMPLES * 0.75) // BATCH * EPOCHS  # validation_split=0.25
RUN_TIMEOUT = 120

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------------------- the environment
@pytest.fixture(scope="session")
def tf_python() -> Path:
    """The Python of the TensorFlow environment (tests/venvs.py; scripts/test.sh makes it beforehand)."""
    try:
        return tensorflow_python()
    except VenvError as exc:
        pytest.fail(str(exc))


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH", "VIRTUAL_ENV"))}
    env.update(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none",
               OTEL_PROFILER_SIGNAL="false", TF_CPP_MIN_LOG_LEVEL="2")
    env.update(extra)
    return env


def run(cmd: list, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True,
                         timeout=RUN_TIMEOUT)
    assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return out


def in_venv(tf_python: Path, code: str, *args: str) -> object:
    """Run ``code`` in the TensorFlow environment; it prints one JSON document, returned parsed."""
    out = run([tf_python, "-c", code, *args], clean_env(), REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- one zero-code run
@pytest.fixture(scope="module")
def zero_code_run(tf_python, tmp_path_factory):
    """``otel-profiler run`` of the Keras example with an OTLP endpoint and a TF profiler capture."""
    tmp = tmp_path_factory.mktemp("keras")
    with OtlpReceiver() as receiver:
        env = clean_env(OTEL_TRACES_EXPORTER="otlp",  # clean_env turns the standard exporters off
                        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.http_endpoint,
                        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf", OTEL_SERVICE_NAME="keras-test")
        began = time.monotonic()
        run([tf_python, "-m", "otel_profiler", "run", "--output-dir", tmp / "prof", "--",
             tf_python, EXAMPLE, "--epochs", EPOCHS, "--samples", SAMPLES, "--batch-size", BATCH,
             "--tf-profile", tmp / "tflog"], env, tmp)
        seconds = time.monotonic() - began
        spans = receiver.collected.spans()
    return {"folder": tmp / "prof", "tflog": tmp / "tflog", "spans": spans, "seconds": seconds}


def test_zero_code_keras_gives_steps_epochs_and_phases(zero_code_run):
    profile = load_profile([str(zero_code_run["folder"])])
    batch = profile.ranks[0].batch
    steps = batch.of_kind(Kind.STEP)
    assert sorted(steps.extra("step").values()) == list(range(TRAIN_STEPS))
    notes = batch.of_kind(Kind.USER_ANNOTATION)
    names = notes.names()
    assert names.count("train") == 1 and names.count("predict") == 1
    assert names.count("test") == EPOCHS  # the validation of each epoch
    epochs = notes.take([n == "epoch" for n in names])
    assert sorted(epochs.extra("epoch").values()) == list(range(EPOCHS))
    train = notes.take([n == "train" for n in names])
    # every step and every epoch lies inside the train phase; predict comes after it
    assert steps.start_ns.min() >= train.start_ns[0] and steps.end_ns.max() <= train.end_ns[0]
    assert epochs.start_ns.min() >= train.start_ns[0] and epochs.end_ns.max() <= train.end_ns[0]
    predict = notes.take([n == "predict" for n in names])
    assert predict.start_ns[0] >= train.end_ns[0]
    meta = profile.ranks[0].meta
    assert meta["steps"] == TRAIN_STEPS and meta["windows"], meta


def test_zero_code_keras_spans_reach_the_otlp_receiver(zero_code_run):
    spans = zero_code_run["spans"]
    assert spans, "no span reached the receiver"
    assert {res["service.name"].string_value for res, _ in spans} == {"keras-test"}
    names = [s.name for _, s in spans]
    assert names.count("train.step") == TRAIN_STEPS
    assert names.count("epoch") == EPOCHS and names.count("test") == EPOCHS
    assert names.count("train") == 1 and names.count("predict") == 1


READ_XPLANE = """
import json, sys
from cuda_tracer.model.events import Kind
from cuda_tracer.loading import load_profile
profile = load_profile([sys.argv[1]])
batch = profile.ranks[0].batch
steps = batch.of_kind(Kind.STEP)
print(json.dumps({"sources": profile.sources, "counts": batch.counts_by_kind(),
                  "ops": sorted(set(batch.of_kind(Kind.CPU_OP).names())),
                  "long_names": sorted(set(batch.extra("long_name").values()))[:200],
                  "steps": {int(steps.extra("step")[r]): [int(steps.start_ns[r]), int(steps.end_ns[r])]
                            for r in steps.extra("step")}}))
"""


def test_tf_profiler_capture_of_the_same_run_imports_with_ops_and_aligned_steps(tf_python, zero_code_run):
    tf = in_venv(tf_python, READ_XPLANE, str(zero_code_run["tflog"]))
    assert len(tf["sources"]) == 1 and tf["sources"][0].endswith(".xplane.pb")
    assert tf["counts"]["cpu_op"] > 100
    assert any("MatMul" in op for op in tf["ops"]), tf["ops"][:50]  # the Dense layers' kernels
    assert any(n.startswith("sequential") for n in tf["long_names"]), tf["long_names"][:20]
    # TF's step markers (emitted by the callback) carry our step numbers, at the same wall time
    live = load_profile([str(zero_code_run["folder"])]).ranks[0].batch.of_kind(Kind.STEP)
    ours = {n: (int(live.start_ns[r]), int(live.end_ns[r])) for r, n in live.extra("step").items()}
    assert sorted(int(n) for n in tf["steps"]) == sorted(ours) == list(range(TRAIN_STEPS))
    for n, (start, end) in tf["steps"].items():
        assert abs(start - ours[int(n)][0]) < 2_000_000 and abs(end - ours[int(n)][1]) < 2_000_000, n


def test_summary_report_and_export_read_the_tf_profile(tf_python, zero_code_run, tmp_path):
    tflog = str(zero_code_run["tflog"])
    cli = [tf_python, "-m", "otel_profiler"]
    summary = json.loads(run([*cli, "summary", tflog, "--format", "json"], clean_env(), tmp_path).stdout)
    assert summary["events"]["step"] == TRAIN_STEPS and summary["events"]["cpu_op"] > 100
    assert summary["ranks_meta"][0]["format"] == "xplane"
    assert "xprof" not in run([*cli, "summary", tflog], clean_env(), tmp_path).stderr.lower()
    run([*cli, "report", tflog, "-o", tmp_path / "report.html"], clean_env(), tmp_path)
    assert (tmp_path / "report.html").stat().st_size > 10_000
    out = run([*cli, "export", tflog, "--output", tmp_path / "spans.jsonl"], clean_env(), tmp_path)
    assert f"exported {TRAIN_STEPS}" in out.stdout + out.stderr or (tmp_path / "spans.jsonl").exists()


EXPLICIT = """
import json, os, sys
import numpy as np, keras
from otel_profiler.integrations.keras import ProfilerCallback
rng = np.random.default_rng(0)
x = rng.random((192, 8), dtype=np.float32); y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
callback = ProfilerCallback(steps="2:4", profile_dir=sys.argv[1], summary_at_exit=False)
model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[callback])
model.evaluate(x, y, batch_size=64, verbose=0, callbacks=[callback])
written = sorted(os.listdir(sys.argv[1]))  # flushed after each call, before stop()
callback.stop()
print(json.dumps({"patched": getattr(keras.Model.fit, "__otel_profiler_patched__", False),
                  "flushed": any(n.endswith(".events") for n in written)}))
"""


def test_explicit_callback_drives_windows_in_one_profile(tf_python, tmp_path):
    folder = tmp_path / "prof"
    out = in_venv(tf_python, EXPLICIT, str(folder))
    assert out == {"patched": False, "flushed": True}  # no zero-code session: Keras untouched
    profile = load_profile([str(folder)])
    assert len(profile.ranks) == 1, "fit and evaluate must write one profile, not two ranks"
    batch = profile.ranks[0].batch
    assert sorted(batch.of_kind(Kind.STEP).extra("step").values()) == list(range(6))
    names = batch.of_kind(Kind.USER_ANNOTATION).names()
    assert names.count("train") == 1 and names.count("test") == 1 and names.count("epoch") == 1
    windows = profile.ranks[0].meta["windows"]
    assert [(w["first_step"], w["last_step"]) for w in windows] == [(2, 3)], windows
