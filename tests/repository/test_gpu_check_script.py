"""tests/gpu/run_gpu_checks.sh as a user's tool, on a machine without a GPU: usage errors exit 2, a
missing prerequisite exits 3 at once with one line saying which, and a hanging step is cut by its
time limit. (What it checks on a GPU is tests/gpu's; docs/gpu-checks.md describes it.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "gpu" / "run_gpu_checks.sh"

pytestmark = pytest.mark.skipif(shutil.which("nvidia-smi") is not None,
                                reason="an NVIDIA driver is installed: run the check itself")


def run(*args: str, path_first: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK")}
    if path_first is not None:
        environ["PATH"] = f"{path_first}{os.pathsep}{environ['PATH']}"
    environ.update(env)
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, env=environ, capture_output=True,
                          text=True, timeout=180)


def stand_in_nvidia_smi(folder: Path, body: str) -> Path:
    folder.mkdir(exist_ok=True)
    tool = folder / "nvidia-smi"
    tool.write_text("#!/bin/sh\n" + body + "\n")
    tool.chmod(0o755)
    return folder


def missing_lines(out: subprocess.CompletedProcess) -> list[str]:
    return [line for line in out.stdout.splitlines() if line.startswith("PREREQUISITE MISSING")]


def test_bad_usage_exits_2_with_one_line(tmp_path):
    out = run("a", "b")
    assert out.returncode == 2 and out.stderr.strip().startswith("usage:")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = run(str(blocker / "out"))
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"output folder {blocker / 'out'}: cannot be created or written"]


def test_no_driver_exits_3_before_anything_runs(tmp_path):
    out = run(str(tmp_path / "out"))
    assert out.returncode == 3, out.stdout + out.stderr
    assert missing_lines(out) == ["PREREQUISITE MISSING: the command nvidia-smi is not installed"]
    assert (tmp_path / "out" / "prerequisite_missing.txt").exists()
    assert (tmp_path / "out" / "steps.tsv").read_text() == ""  # no step ran


def test_no_cuda_device_for_torch_exits_3_naming_it(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("torch sees a CUDA device here")
    bin_dir = stand_in_nvidia_smi(tmp_path / "bin", 'echo "GPU 0: stand-in (UUID: GPU-0)"')
    out = run(str(tmp_path / "out"), path_first=bin_dir)
    assert out.returncode == 3, out.stdout[-2000:]
    [line] = missing_lines(out)
    assert "CUDA device visible to torch" in line
    found = json.loads((tmp_path / "out" / "prerequisites.json").read_text())
    assert found["torch"] == torch.__version__ and found["missing"]
    steps = [row.split("\t")[:2] for row in (tmp_path / "out" / "steps.tsv").read_text().splitlines()]
    assert steps == [["nvidia-smi", "0"], ["prerequisites", "1"]]
    assert not list((tmp_path / "out").glob("*_capture.batch.zip"))  # nothing was captured


def test_a_hanging_step_is_cut_by_its_limit(tmp_path):
    bin_dir = stand_in_nvidia_smi(tmp_path / "bin", "exec sleep 600")
    out = run(str(tmp_path / "out"), path_first=bin_dir, GPU_CHECK_BUDGET_S="6")
    assert out.returncode == 3
    assert "nvidia-smi: timed out after 6 s" in out.stdout
    name, code, _ = (tmp_path / "out" / "steps.tsv").read_text().splitlines()[0].split("\t")
    assert (name, code) == ("nvidia-smi", "124")
