"""Steps found in any training loop: the order of evidence, on real torch (in process and zero-code).

Training scripts in ``tests/scripts`` (manual SGD, LBFGS with a closure, gradient accumulation,
inference only) run unchanged under each enabling way: ``otel-profiler run``, ``OTEL_PROFILER_ENABLED``
with the startup hook the package installs, and ``opentelemetry-instrument``. Keras custom loops
(``tf.GradientTape``) are checked with stand-in classes: TensorFlow is not installed in this
environment (its own tests build a separate one), so the patched methods are exercised on fakes with
the same method names, driving a real session.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuda_tracer.model.events import Kind
from cuda_tracer.loading import load_profile
from otel_profiler import api
from otel_profiler.live.steps import markers
from otel_profiler.live.steps.evidence import StepEvidence

torch = pytest.importorskip("torch")

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
TIMEOUT = 180
QUIET = dict(summary_at_exit=False, signal=False)


# ------------------------------------------------------------------------- the decision, alone
def test_evidence_order_backward_then_optimizer_then_manual():
    e = StepEvidence(grace=3, grace_with_optimizer=10)
    assert e.backward(1) is None and e.backward(2) is None
    assert e.backward(3) == [1, 2, 3] and e.source == "backward"  # the waiting passes count
    assert e.backward(4) == [4]
    assert e.optimizer_step() is True and e.source == "optimizer" and e.switched_from == "backward"
    assert e.backward(5) is None  # an optimizer marks the steps now
    assert e.manual("step()") is True and e.optimizer_step() is None  # the program's own steps win
    assert e.manual("step()") is False


def test_evidence_waits_longer_when_an_optimizer_exists_and_ignores_passes_inside_its_step():
    e = StepEvidence(grace=3, grace_with_optimizer=6)
    e.optimizer_made = True
    assert all(e.backward(t) is None for t in range(5))  # accumulating gradients
    e.optimizer_started()  # LBFGS: passes inside the step are not steps
    assert e.backward(6) is None and e.backward(7) is None
    assert e.optimizer_step() is True and e.source == "optimizer" and e.switched_from is None


# ------------------------------------------------------------------------- in process, real torch
def _steps(folder: Path) -> tuple[list[int], dict]:
    rank = load_profile([str(folder)]).ranks[0]
    return sorted(rank.batch.of_kind(Kind.STEP).extra("step").values()), rank.meta


def _run_script(path: Path, *args: str) -> None:
    code = compile(path.read_text(), str(path), "exec")
    saved = sys.argv
    sys.argv = [str(path), *args]
    try:
        exec(code, {"__name__": "__main__"})
    finally:
        sys.argv = saved


# Under Profiler() the first step begins when profiling starts, so N iterations are N steps.
@pytest.mark.parametrize("script, args, steps, source", [
    ("manual_sgd.py", ("20",), 20, "backward"),
    ("lbfgs_closure.py", ("6",), 6, "optimizer"),
    ("grad_accumulation.py", ("6", "12"), 6, "optimizer"),  # 12 passes a step: more than the grace
])
def test_api_session_finds_steps_of_any_loop(tmp_path, script, args, steps, source, capsys):
    with api.Profiler(profile_dir=str(tmp_path), steps="off", **QUIET):
        _run_script(SCRIPTS / script, *args)
    numbers, meta = _steps(tmp_path)
    assert numbers == list(range(steps))
    assert meta["step_source"] == source


def test_nvtx_ranges_follow_annotations_only_when_on():
    calls = []
    markers.nvtx = (lambda n: calls.append(("push", n)), lambda: calls.append(("pop",)),
                    lambda n: calls.append(("start", n)) or 7, lambda i: calls.append(("end", i)))
    try:
        with api.annotate("fwd"):
            pass
        api.annotate("deco")(lambda: None)()
        api.annotation_end(api.annotation_begin("free"))
    finally:
        markers.nvtx = None
    assert calls == [("push", "fwd"), ("pop",), ("push", "deco"), ("pop",), ("start", "free"), ("end", 7)]
    with api.annotate("off"):
        pass
    assert len(calls) == 6


def test_nvtx_stays_off_without_a_gpu(tmp_path):
    assert not torch.cuda.is_available()
    with api.Profiler(profile_dir=str(tmp_path), steps="off", nvtx=True, **QUIET):
        assert markers.nvtx is None
        with api.annotate("x"):
            pass


# ------------------------------------------------------------------------- Keras custom loops
def fake_keras_classes():
    """Stand-ins with the method names of tf.GradientTape and a Keras 3 optimizer (apply_gradients
    calls apply), new for each test so patches never carry over."""
    class GradientTape:
        def gradient(self, target, sources):
            return [0.0 for _ in sources]

    class BaseOptimizer:
        def __init__(self, learning_rate=0.1):
            self.learning_rate = learning_rate

        def apply_gradients(self, grads_and_vars):
            grads, variables = zip(*grads_and_vars)
            return self.apply(grads, variables)

        def apply(self, grads, variables):
            return len(grads)

    class Optimizer(BaseOptimizer):
        pass

    return GradientTape, Optimizer


@pytest.mark.parametrize("use_optimizer", [False, True])
def test_keras_custom_loop_steps_from_apply_or_tape(tmp_path, use_optimizer):
    from otel_profiler.integrations.keras import patch_gradient_tape, patch_optimizer

    Tape, Optimizer = fake_keras_classes()
    with api.Profiler(profile_dir=str(tmp_path), steps="off", **QUIET):
        from otel_profiler.live.session import current

        patch_gradient_tape(Tape, current())
        patch_optimizer(Optimizer, current())
        optimizer = Optimizer() if use_optimizer else None
        for _ in range(12):
            grads = Tape().gradient(1.0, [1, 2])
            if optimizer is not None:
                optimizer.apply_gradients(zip(grads, [1, 2]))  # apply inside counts once
    numbers, meta = _steps(tmp_path)
    assert numbers == list(range(12))
    assert meta["step_source"] == ("optimizer" if use_optimizer else "backward")


# ------------------------------------------------------------------------- zero-code, three ways
def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", OTEL_PROFILER_SIGNAL="false")
    env.update(extra)
    return env


def hook_installed() -> bool:
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return any(os.path.isfile(os.path.join(d, "otel_profiler.pth")) for d in dirs)


def by_run(tmp: Path, script: list[str], env: dict):
    return [sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(tmp / "prof"), "--",
            sys.executable, *script], env


def by_env(tmp: Path, script: list[str], env: dict):
    if not hook_installed():
        pytest.skip("the startup hook is not in site-packages: reinstall the package (pip install -e .)")
    env.update(OTEL_PROFILER_ENABLED="true", OTEL_PROFILER_PROFILE_DIR=str(tmp / "prof"))
    return [sys.executable, *script], env


def by_opentelemetry_instrument(tmp: Path, script: list[str], env: dict):
    pytest.importorskip("opentelemetry.instrumentation")
    env.update(OTEL_PROFILER_PROFILE_DIR=str(tmp / "prof"))
    launcher = [sys.executable, "-c", "import sys; from opentelemetry.instrumentation.auto_instrumentation "
                "import run; sys.argv[0] = 'opentelemetry-instrument'; run()"]
    return [*launcher, sys.executable, *script], env


CASES = [  # script and arguments, steps expected (None: a time window), step source
    (["manual_sgd.py", "20"], 20, "backward"),  # N iterations are N steps, numbered from 0
    (["lbfgs_closure.py", "8"], 8, "optimizer"),
    (["grad_accumulation.py", "8", "4"], 8, "optimizer"),
    (["inference_loop.py", "2"], None, "time"),
]


@pytest.mark.parametrize("enable", [by_run, by_env, by_opentelemetry_instrument])
@pytest.mark.parametrize("case", CASES, ids=[c[0][0].removesuffix(".py") for c in CASES])
def test_unchanged_scripts_record_their_steps_or_a_time_window(tmp_path, enable, case):
    (script, *args), steps, source = case
    # cpu_op: detailed windows capture CPU operators here, so the time window holds real torch work;
    # a long one for the inference loop, so that it ends at exit whatever the machine's load.
    extra = {"OTEL_PROFILER_DURATION_S": "30"} if steps is None else {}
    cmd, env = enable(tmp_path, [str(SCRIPTS / script), *args],
                      clean_env(OTEL_PROFILER_ACTIVITIES="cpu_op", **extra))
    out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]
    numbers, meta = _steps(tmp_path / "prof")
    assert meta["step_source"] == source
    notes = [line for line in out.stderr.splitlines() if "no training step seen" in line]
    if steps is None:
        assert numbers == [] and meta["steps"] == 0
        (window,) = meta["windows"]
        assert window["reason"] == "duration" and window["captured"]
        assert len(load_profile([str(tmp_path / "prof")]).ranks[0].batch.of_kind(Kind.CPU_OP)) > 0
        assert len(notes) == 1 and "the first 30 s of torch work were recorded" in notes[0]
    else:
        assert numbers == list(range(steps)) and not notes
    summary_file = tmp_path / "prof" / "summary.json"
    end = time.monotonic() + 120  # without `run`, a process of its own writes it after the job
    while not summary_file.exists() and time.monotonic() < end:
        time.sleep(0.1)
    summary = json.loads(summary_file.read_text())
    assert summary["steps"]["source"] == source
    if enable is by_run:  # `run` prints the summary after the job: the steps table or the note
        assert ("no training step was seen" if steps is None else f"Steps ({steps}, from {source}; step 0 is the loop's first iteration)") \
            in out.stderr


def test_time_fallback_window_is_the_default_length_and_says_so(tmp_path):
    """No OTEL_PROFILER_DURATION_S: the fallback window is a 'time' window of the default 10 s."""
    cmd, env = by_run(tmp_path, [str(SCRIPTS / "inference_loop.py"), "1"], clean_env())
    out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]
    _, meta = _steps(tmp_path / "prof")
    assert [w["reason"] for w in meta["windows"]] == ["time"]
    assert "the first 10 s of torch work were recorded as a time window" in out.stderr
    assert "no training step was seen" in out.stderr  # the summary's note


# ------------------------------------------------------------------------- a fresh installation
def _fresh_venv(tmp: Path, editable: bool) -> Path:
    """A new venv with this package installed from a copy of the source tree (its dependencies come
    from the current environment through a path entry, so nothing is downloaded)."""
    import shutil
    import sysconfig

    repo = Path(__file__).resolve().parents[2]
    src = tmp / "src"
    for name in ("otel_profiler", "cuda_tracer"):
        shutil.copytree(repo / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(repo / name, src / name)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "aa_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
               *(["-e"] if editable else []), str(src)]
    out = subprocess.run(install, capture_output=True, text=True, timeout=300, cwd=tmp)
    assert out.returncode == 0, out.stderr[-3000:]
    assert Path(purelib, "otel_profiler.pth").is_file()
    return python


@pytest.mark.slow
@pytest.mark.parametrize("editable", [False, True], ids=["pip-install", "pip-install-e"])
def test_installed_package_profiles_with_the_variable_alone(tmp_path, editable):
    python = _fresh_venv(tmp_path, editable)
    job = tmp_path / "job"
    job.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    script = [str(python), str(SCRIPTS / "manual_sgd.py"), "12"]
    out = subprocess.run(script, env=env, cwd=job, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0 and not (job / "otel-profile").exists()  # unset: nothing at all
    probe = subprocess.run([str(python), "-c", "import sys; print(sorted(m for m in ('numpy', 'torch', "
                            "'otel_profiler') if m in sys.modules))"], env=env, cwd=job, capture_output=True, text=True)
    assert probe.stdout.strip() == "[]"
    out = subprocess.run(script, env=dict(env, OTEL_PROFILER_ENABLED="true"), cwd=job, capture_output=True,
                         text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]
    (folder,) = (job / "otel-profile").iterdir()
    numbers, meta = _steps(folder)
    assert numbers == list(range(12)) and meta["step_source"] == "backward"
    assert Path(meta["resource"]["service.name"]).name == "manual_sgd"
    assert str(tmp_path / ("src" if editable else "venv")) in subprocess.run(
        [str(python), "-c", "import otel_profiler; print(otel_profiler.__file__)"],
        env=env, cwd=job, capture_output=True, text=True).stdout


def test_n_iterations_are_n_steps_and_the_first_matches_the_loops_own_timer(tmp_path):
    """12 iterations under `run`: steps 0 to 11, step 0 from the first forward pass with gradients
    on (the evaluation pass before the loop is not one) to the first optimizer step's end, as the
    loop's own timer measures its first iteration. The other steps run from one optimizer step's
    end to the next, so each also holds the few statements between the timer's end and its next
    start: compared in total, with the same margin."""
    timer = tmp_path / "times.json"
    cmd = [sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(tmp_path / "prof"), "--no-summary",
           "--", sys.executable, str(SCRIPTS / "timed_loop.py"), str(timer), "12"]
    out = subprocess.run(cmd, env=clean_env(), cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]
    rank = load_profile([str(tmp_path / "prof")]).ranks[0]
    steps = rank.batch.of_kind(Kind.STEP)
    numbers = steps.extra("step")
    ours = {numbers[i]: float(steps.duration_ns[i]) / 1e9 for i in range(len(steps))}
    theirs = json.loads(timer.read_text())
    assert sorted(ours) == list(range(12)) and rank.meta["step_source"] == "optimizer"
    # a margin for what lies between the two clocks' reads (a few Python statements), which a
    # busy machine can stretch by a time slice or two
    margin = 0.002 + 0.05 * theirs[0]
    assert abs(ours[0] - theirs[0]) <= margin, (ours[0], theirs[0])
    assert ours[0] <= theirs[0] + 0.0005  # it starts after the timer's start, ends at the step's end
    assert abs(sum(ours.values()) - sum(theirs)) <= 0.02 + 0.05 * sum(theirs), (ours, theirs)


def test_the_first_steps_start_from_what_the_hooks_saw():
    """``FirstStep`` on the sequences the hooks report (times in ns): a dry run of the model before
    the loop is replaced by the loop's own call; a forward alone before a `step()` at the top of the
    loop is no iteration; gradient accumulation starts at the first micro-batch; an LBFGS closure
    runs inside the optimizer step, which starts it; a forward not seen leaves step 0 unmeasured."""
    from otel_profiler.live.steps.first_step import FirstStep

    model, head = object(), object()

    def replay(*events):
        first = FirstStep()
        for kind, at in events:
            {"model": lambda t: first.forward(id(model), t), "head": lambda t: first.forward(id(head), t),
             "backward": lambda t: first.backward(), "optimizer": first.optimizer}[kind](at)
        return first.at_boundary(100), first.at_boundary(200)

    later = (False, None)  # every later boundary
    assert replay(("model", 5), ("head", 6), ("model", 20), ("head", 21), ("backward", 30),
                  ("optimizer", 40)) == ((True, 20), later)  # the dry run at 5 is not step 0's start
    assert replay(("model", 5)) == ((False, None), later)  # step() at the top: the boundary starts step 0
    assert replay(("model", 10), ("backward", 20), ("model", 30), ("backward", 40),
                  ("optimizer", 50)) == ((True, 10), later)  # accumulation: the first micro-batch
    assert replay(("optimizer", 10), ("model", 20), ("backward", 30)) == ((True, 10), later)  # LBFGS
    assert replay(("backward", 30), ("optimizer", 40)) == ((True, None), later)  # forward not seen
