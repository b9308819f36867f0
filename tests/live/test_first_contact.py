"""First contact with real training scripts (issue 27): the profiler leaves the job's warnings and
stderr as they were, counts the steps of optimizers that take turns once each, records module
information live, and names what it could not do in one line.

Every job here is a real script in ``tests/scripts`` run under ``otel-profiler run``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_tracer.model.events import Kind
from cuda_tracer.loading import load_profile

torch = pytest.importorskip("torch")

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
TIMEOUT = 240


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", OTEL_PROFILER_SIGNAL="false")
    env.update(extra)
    return env


def profiled(tmp: Path, script: str, *args: str, env: dict[str, str] | None = None,
             options: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(tmp / "prof"), *options, "--",
           sys.executable, str(SCRIPTS / script), *args]
    out = subprocess.run(cmd, env=env or clean_env(), cwd=tmp, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def steps_and_meta(folder: Path) -> tuple[list[int], dict]:
    rank = load_profile([str(folder)]).ranks[0]
    return sorted(rank.batch.of_kind(Kind.STEP).extra("step").values()), rank.meta


# ------------------------------------------------------------------------- 1. warnings shown once
def test_a_warning_the_job_printed_is_not_printed_again(tmp_path):
    """The job warns at one place every iteration; Python shows it once. The profiler's first flush
    (which reads the machine's resources) comes between, and the job goes on warning after it."""
    meta = tmp_path / "prof" / "rank-0.json"
    out = profiled(tmp_path, "warning_loop.py", str(meta), "20",
                   env=clean_env(OTEL_PROFILER_FLUSH_INTERVAL_S="0.2"))
    assert "warning-loop: done" in out.stdout and meta.is_file()
    assert out.stderr.count("UserWarning: the learning rate is only a guess") == 1, out.stderr[-3000:]
    assert json.loads(meta.read_text())["compute"]["os"].startswith(os.uname().sysname)


# ------------------------------------------------------------------------- 2. a late first step
def test_a_first_optimizer_step_after_the_time_window_leaves_one_kind_of_window(tmp_path):
    """LBFGS whose first step comes after the 10 s time fallback window ended: the steps are the
    evidence, the run's windows are the steps' windows only, and no "no training step" line."""
    out = profiled(tmp_path, "lbfgs_closure.py", "6", "11")
    numbers, meta = steps_and_meta(tmp_path / "prof")
    assert meta["step_source"] == "optimizer" and numbers == list(range(len(numbers))) and len(numbers) >= 4
    reasons = {window["reason"] for window in meta["windows"]}
    assert len(reasons) == 1 and "time" not in reasons, meta["windows"]
    assert "no training step" not in out.stderr, out.stderr[-3000:]
    assert f"Steps ({len(numbers)}, from optimizer; step 0 is the loop's first iteration)" in out.stderr


# ------------------------------------------------------------------------- 3, 4. several optimizers
# N iterations are N steps: the first begins at the first training forward pass.
@pytest.mark.parametrize("script, args, steps", [
    ("forward_forward.py", ("2", "30"), 60),  # one optimizer per layer, in turn: every step counts
    ("forward_forward.py", ("3", "10"), 30),
    ("gan_two_optimizers.py", ("12",), 12),  # two optimizers in one iteration: one step
])
def test_steps_of_optimizers_that_take_turns_count_once_each(tmp_path, script, args, steps):
    profiled(tmp_path, script, *args)
    numbers, meta = steps_and_meta(tmp_path / "prof")
    assert meta["step_source"] == "optimizer"
    assert numbers == list(range(steps))


def test_step_beside_an_optimizer_counts_each_iteration_once(tmp_path):
    out = profiled(tmp_path, "step_beside_optimizer.py", "12")
    numbers, meta = steps_and_meta(tmp_path / "prof")
    assert meta["step_source"] == "step()" and numbers == list(range(12))
    assert "Steps (12, from step(); step 0 is the loop's first iteration)" in out.stderr


# ------------------------------------------------------------------------- 7. the package's names
def test_the_package_binds_the_api_names_it_loads():
    """``otel_profiler.annotate`` goes through the package's ``__getattr__`` once, then is a plain
    module attribute (the same object as ``from otel_profiler import annotate``); torch stays out."""
    probe = ("import sys, otel_profiler\n"
             "before = 'annotate' in vars(otel_profiler)\n"
             "with otel_profiler.annotate('x'):\n"
             "    pass\n"
             "from otel_profiler import annotate, step\n"
             "print(before, vars(otel_profiler).get('annotate') is annotate, "
             "vars(otel_profiler).get('step') is step, 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], env=clean_env(), capture_output=True, text=True,
                         timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True", "False"]


# ------------------------------------------------------------------------- 9. export's first contact
TRACE_FILE = Path(__file__).resolve().parents[1] / "data" / "traces" / "hta" / "trace_filter" / "sampled_rank-0.json.gz"


def export(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_profiler", "export", str(TRACE_FILE), *args],
                          env=clean_env(**env), cwd=tmp, capture_output=True, text=True, timeout=TIMEOUT)


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_export_to_an_endpoint_nothing_listens_on_fails_in_one_line(tmp_path, protocol):
    import hashlib
    import socket

    with socket.socket() as probe:  # a port of this machine that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    before = hashlib.sha256(TRACE_FILE.read_bytes()).hexdigest()
    out = export(tmp_path, "--endpoint", f"http://127.0.0.1:{port}", "--protocol", protocol,
                 OTEL_PROFILER_EXPORT_RETRY_S="60")
    assert out.returncode == 1
    (line,) = out.stderr.splitlines()
    assert f"127.0.0.1:{port}" in line and "connection refused" in line and "untouched" in line
    assert hashlib.sha256(TRACE_FILE.read_bytes()).hexdigest() == before


def test_export_output_takes_a_folder_or_says_what_to_give(tmp_path):
    out = export(tmp_path, "--output", str(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = (tmp_path / "spans.jsonl").read_text().splitlines()
    assert lines and all("resourceSpans" in json.loads(line) for line in lines)
    bad = export(tmp_path, "--output", str(tmp_path / "spans"))
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1
    assert ".jsonl" in bad.stderr and ".pb" in bad.stderr and "folder" in bad.stderr
    helped = subprocess.run([sys.executable, "-m", "otel_profiler", "export", "--help"], env=clean_env(),
                            capture_output=True, text=True, timeout=TIMEOUT).stdout
    assert ".jsonl" in helped and "folder" in helped


# ------------------------------------------------------------------------- 10. non-UTF-8 file names
def test_json_lines_keep_a_file_name_that_is_not_utf8(tmp_path):
    """A trace whose file name has a byte that is not UTF-8 (``\\xff``): its name goes into the spans'
    resource; the JSON lines hold it as a JSON escape (the file stays UTF-8), its bytes intact."""
    folder = os.fsencode(tmp_path)
    name = folder + b"/r\xffank-0.json.gz"
    with open(name, "wb") as f:
        f.write(TRACE_FILE.read_bytes())
    out_file = tmp_path / "spans.jsonl"
    done = subprocess.run([sys.executable, "-m", "otel_profiler", "export", name, "--output", str(out_file)],
                          env=clean_env(), cwd=tmp_path, capture_output=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    raw = out_file.read_bytes()
    raw.decode("utf-8")  # valid UTF-8 throughout
    sources = {attribute["value"]["stringValue"] for line in raw.splitlines()
               for attribute in json.loads(line)["resourceSpans"][0]["resource"]["attributes"]
               if attribute["key"] == "otel_profiler.source"}
    assert {os.fsencode(s) for s in sources} == {b"r\xffank-0.json.gz"}
    assert sum(len(json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]) for line in raw.splitlines()) > 0


# ------------------------------------------------------------------------- 6. Kineto's chatter
def test_kineto_lines_stay_off_stderr_and_the_jobs_lines_stay_in_order(tmp_path):
    """Operators recorded, a window part handed over at every step (Kineto starts and stops at each),
    while another thread writes to stderr: none of Kineto's lines, every line of the job's, in order."""
    out = profiled(tmp_path, "stderr_lines.py", "40",
                   env=clean_env(OTEL_PROFILER_ACTIVITIES="cpu_op", OTEL_PROFILER_DURATION_S="1000000",
                                 OTEL_PROFILER_WINDOW_PART_STEPS="1"))
    _, meta = steps_and_meta(tmp_path / "prof")
    assert sum(window["parts"] for window in meta["windows"]) >= 20  # Kineto started that often
    lines = out.stderr.splitlines()
    kineto = [line for line in lines if "profiler_start" in line or "profiler_stop" in line
              or "gpuGetDeviceCount" in line or line.startswith(("USDT:", "ERROR:", "INFO:"))]
    assert not kineto, kineto[:3]
    total = int(next(line for line in lines if line.startswith("thread-lines ")).split()[1])
    assert [line for line in lines if line.startswith("thread-line ")] == \
        [f"thread-line {n}" for n in range(total)]
    assert [line for line in lines if line.startswith("main-line ")] == [f"main-line {i}" for i in range(40)]


TREE_WARNING = (b"[W1205 00:39:58.600899872 collection.cpp:671] Warning: threading.py(611): wait "
                b"(function operator())")


def test_torchs_event_tree_warning_is_cut_out_and_the_jobs_lines_are_kept(tmp_path):
    """torch 2.15's warning while it builds a stopped window's tree, written as torch writes it (the
    message, then its newline in a second write, another thread's line between the two), is cut out
    during a stop; the job's lines around it, and a torch warning from elsewhere, are kept."""
    other = b"[W1205 00:40:01.000000001 Module.cpp:12] Warning: the job's own (function operator())\n"
    writes = [TREE_WARNING, b"job line 1\n", b"\n", other, TREE_WARNING + b"\n", b"job line 2\n"]
    code = "\n".join(["import os",
                      "from cuda_tracer.capture.stderr_filter import kineto_lines_dropped",
                      "os.write(2, b'before\\n')",
                      "with kineto_lines_dropped():",
                      *(f"    os.write(2, {data!r})" for data in writes),
                      "os.write(2, b'after\\n')"])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120, cwd=SCRIPTS.parent.parent)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr == b"before\njob line 1\n" + other + b"job line 2\nafter\n"


# ------------------------------------------------------------------------- 5. modules, live
def test_a_live_run_with_operators_records_the_module_tree(tmp_path):
    """``--cpu-ops``: the windows record nn.Module calls as recorded traces have them, so the summary
    has the model's module tree (Sequential(Linear, ReLU, Linear) of manual_sgd.py); Python
    function events other than module calls are not kept."""
    out = profiled(tmp_path, "manual_sgd.py", "30", options=("--cpu-ops",))
    assert "nn.Module hierarchy" in out.stderr and "2 (Linear)" in out.stderr  # the summary `run` prints
    rank = load_profile([str(tmp_path / "prof")]).ranks[0]
    python = rank.batch.of_kind(Kind.PYTHON_FUNCTION)
    assert len(python) > 0 and all(name.startswith("nn.Module: ") for name in python.names())
    modules = json.loads((tmp_path / "prof" / "summary.json").read_text())["operators"]["modules"]
    paths = {row["path"]: row["calls"] for row in modules["by_path"]}
    tree = ("Sequential", "Sequential/0 (Linear)", "Sequential/1 (ReLU)", "Sequential/2 (Linear)")  # by attribute
    assert set(tree) <= set(paths), paths  # (a window started inside a forward pass sees its inner calls)
    assert all(paths[path] >= 3 for path in tree), paths


def test_step_beside_an_optimizer_in_process_gives_one_step_per_iteration(tmp_path):
    """Under ``Profiler()`` the first step begins when profiling starts: 12 iterations, 12 steps."""
    from otel_profiler import api

    code = compile((SCRIPTS / "step_beside_optimizer.py").read_text(), "step_beside_optimizer.py", "exec")
    saved = sys.argv
    sys.argv = ["step_beside_optimizer.py", "12"]
    try:
        with api.Profiler(profile_dir=str(tmp_path), steps="off", summary_at_exit=False, signal=False):
            exec(code, {"__name__": "__main__"})
    finally:
        sys.argv = saved
    numbers, meta = steps_and_meta(tmp_path)
    assert meta["step_source"] == "step()" and numbers == list(range(12))


# ------------------------------------------------------------------------- a misspelt switch
MISSPELT = ("otel-profiler: warning: OTEL_PROFILER_ENABLE is not a setting of otel-profiler (did you mean "
            "OTEL_PROFILER_ENABLED?); profiling is off")


@pytest.mark.parametrize("hook", ["sitecustomize", "pth"])
def test_a_misspelt_switch_is_named_once_and_nothing_else_changes(tmp_path, hook):
    """``OTEL_PROFILER_ENABLE=true``: one line names the switch (in the job, not again in its child
    process), through either startup hook; with ``OTEL_PROFILER_ENABLED=false`` beside it, nothing."""
    repo = SCRIPTS.parent.parent
    site = repo / "otel_profiler" / "bootstrap" / "site"
    job = "import subprocess, sys; print('job'); subprocess.run([sys.executable, '-c', 'print(\"child\")'])"
    if hook == "pth":  # the hook's own line, as site-packages runs it at start-up
        job = (repo / "otel_profiler" / "bootstrap" / "otel_profiler.pth").read_text().strip() + "\n" + job
    path = os.pathsep.join([str(site), str(repo)] if hook == "sitecustomize" else [str(repo)])
    said = subprocess.run([sys.executable, "-c", job], env=clean_env(OTEL_PROFILER_ENABLE="true", PYTHONPATH=path),
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert said.returncode == 0 and said.stdout == "job\nchild\n", said.stderr
    assert said.stderr.splitlines() == [MISSPELT]
    off = subprocess.run([sys.executable, "-c", job], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env=clean_env(OTEL_PROFILER_ENABLE="true", OTEL_PROFILER_ENABLED="false", PYTHONPATH=path))
    assert off.returncode == 0 and off.stdout == "job\nchild\n" and off.stderr == "", off.stderr
    assert not list(tmp_path.iterdir())  # nothing recorded, nothing written


# ------------------------------------------------------------------------- run's own words
def test_a_flag_of_run_after_the_command_is_named_and_left_to_the_command(tmp_path):
    """``run python -c ... --cpu-ops --top=3``: the command gets both flags, as written, and one line
    says where run's flags belong."""
    out = subprocess.run([sys.executable, "-m", "otel_profiler", "run", "--no-summary", sys.executable, "-c",
                          "import sys; print(sys.argv[1:])", "--cpu-ops", "--top=3", "--epochs"],
                         env=clean_env(), cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0 and out.stdout == "['--cpu-ops', '--top=3', '--epochs']\n", out.stderr
    said = [line for line in out.stderr.splitlines() if "follows the command" in line]
    assert said == ["otel-profiler: warning: --cpu-ops --top=3 follows the command, so the command gets it, not "
                    "run; run's own flags go before `--` and the command after it: otel-profiler run --cpu-ops "
                    f"--top=3 -- {sys.executable} ..."], out.stderr


@pytest.mark.parametrize("summary", [True, False])
def test_a_command_that_records_nothing_is_told_why(tmp_path, summary):
    out = subprocess.run([sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(tmp_path / "prof"),
                          *(() if summary else ("--no-summary",)), "--", sys.executable, "-c", "print(1)"],
                         env=clean_env(), cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0 and out.stdout == "1\n", out.stderr
    assert out.stderr.splitlines() == [
        f"otel-profiler: no profile was recorded in {tmp_path / 'prof'}: no process of the command imported "
        "torch, TensorFlow or Keras (profiling starts at that import), or none of them recorded anything"]
