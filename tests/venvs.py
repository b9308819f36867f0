"""Virtual environments the tests run jobs in, made once per machine and reused while their stamp
matches (``scripts/test.sh`` makes them in the background while the rest installs, so the tests
themselves only check them).

- Other torch releases, for the live-path tests on the oldest and the newest torch this project
  supports (``tests/live/test_torch_releases.py``). Each holds one torch release from the package
  index (the default build, with its NVIDIA packages: about 4 GB) and this project's runtime
  dependencies from ``pyproject.toml``; the project itself is not installed there but put on
  ``PYTHONPATH`` by the tests (as the mounted-package set-up of docs/zero-code.md does), so one
  environment serves every clone on the machine. They live in
  ``${XDG_CACHE_HOME:-~/.cache}/otel-profiler/venv-torch-<version>`` (or under
  ``$OTEL_PROFILER_TORCH_VENVS``); the stamp holds the Python version, the torch version and the
  runtime dependencies.
- TensorFlow (``tests/live/test_tensorflow_keras.py``): tensorflow-cpu, xprof and this project
  (editable) with its ``tensorflow`` extra, in ``${XDG_CACHE_HOME:-~/.cache}/otel-profiler/venv-tf``
  (or ``$OTEL_PROFILER_TF_VENV``). It cannot share the main environment: tensorflow-cpu and torch pin
  different protobuf/numpy ranges. Its stamp holds the Python version, the repository's path and
  ``pyproject.toml``.

Run as a script it makes (or checks) them all: ``python tests/venvs.py``; ``python tests/venvs.py
2.4.1 2.15.0`` makes only those torch releases.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the oldest supported Python
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "otel-profiler"
TF_VENV = Path(os.environ.get("OTEL_PROFILER_TF_VENV") or CACHE / "venv-tf")
OLDEST, NEWEST = "2.4.1", "2.15.0"
"""The oldest and the newest torch release the live path is tested on (the ``[torch]`` extra's range)."""
INSTALL_TIMEOUT = 1800


def runtime_dependencies() -> list[str]:
    """The project's runtime dependencies, as ``pyproject.toml`` declares them."""
    with open(REPO / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def venv_folder(version: str) -> Path:
    base = os.environ.get("OTEL_PROFILER_TORCH_VENVS")
    return (Path(base) if base else CACHE) / f"venv-torch-{version}"


def _stamp(version: str) -> str:
    digest = hashlib.sha256("\n".join(runtime_dependencies()).encode()).hexdigest()[:16]
    return f"{sys.version_info[:2]} torch=={version} {digest}"


class VenvError(RuntimeError):
    """The environment could not be made; the message has pip's reason."""


def _made(venv: Path, stamp_text: str, install: list[str], what: str) -> Path:
    """The Python of ``venv``, made with ``pip install *install`` unless its stamp already says ``stamp_text``
    (one maker at a time: parallel test runs share the environments)."""
    python = venv / "bin" / "python"
    stamp = venv / ".otel-profiler-stamp"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / (venv.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.exists() and stamp.exists() and stamp.read_text() == stamp_text:
            return python
        began = time.monotonic()
        steps = [[sys.executable, "-m", "venv", "--clear", str(venv)],
                 [str(python), "-m", "pip", "install", "--quiet", *install]]
        for cmd in steps:
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
            except subprocess.TimeoutExpired as exc:
                raise VenvError(f"making the {what} environment timed out: {' '.join(cmd[:4])}") from exc
            if out.returncode != 0:
                raise VenvError(f"cannot make the {what} environment ({' '.join(cmd[:4])} exited "
                                f"{out.returncode}):\n{(out.stderr or out.stdout)[-3000:]}")
        stamp.write_text(stamp_text)
        print(f"made {venv} in {time.monotonic() - began:.0f} s", file=sys.stderr)
        return python


def torch_python(version: str) -> Path:
    """The Python of the environment with torch ``version``, made on first use."""
    return _made(venv_folder(version), _stamp(version), [f"torch=={version}", *runtime_dependencies()],
                 f"torch {version}")


def tensorflow_python() -> Path:
    """The Python of the TensorFlow environment, made on first use."""
    digest = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()[:16]
    return _made(TF_VENV, f"{sys.version_info[:2]} {REPO} {digest}", ["-e", f"{REPO}[tensorflow]"], "TensorFlow")


if __name__ == "__main__":
    for wanted in sys.argv[1:] or [OLDEST, NEWEST]:
        print(torch_python(wanted))
    if not sys.argv[1:]:
        print(tensorflow_python())
