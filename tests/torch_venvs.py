"""Virtual environments with other torch releases, for the live-path tests on the oldest and the
newest torch this project supports (``tests/live/test_torch_releases.py``).

Each holds one torch release from the package index (the default build, with its NVIDIA packages:
about 4 GB) and this project's runtime dependencies from ``pyproject.toml``; the project itself is
not installed there but put on ``PYTHONPATH`` by the tests (as the mounted-package set-up of
docs/zero-code.md does), so one environment serves every clone on the machine. They live in
``${XDG_CACHE_HOME:-~/.cache}/otel-profiler/venv-torch-<version>`` (or under
``$OTEL_PROFILER_TORCH_VENVS``), made once and reused while their stamp (Python version, torch
version, the runtime dependencies) matches.

Run as a script it makes (or checks) them: ``python tests/torch_venvs.py 2.4.1 2.15.0``.
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


def torch_python(version: str) -> Path:
    """The Python of the environment with torch ``version``, made on first use (one maker at a time)."""
    venv = venv_folder(version)
    python = venv / "bin" / "python"
    stamp = venv / ".otel-profiler-stamp"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / (venv.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.exists() and stamp.exists() and stamp.read_text() == _stamp(version):
            return python
        began = time.monotonic()
        steps = [[sys.executable, "-m", "venv", "--clear", str(venv)],
                 [str(python), "-m", "pip", "install", "--quiet", f"torch=={version}", *runtime_dependencies()]]
        for cmd in steps:
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
            except subprocess.TimeoutExpired as exc:
                raise VenvError(f"making the torch {version} environment timed out: {' '.join(cmd[:4])}") from exc
            if out.returncode != 0:
                raise VenvError(f"cannot make the torch {version} environment ({' '.join(cmd[:4])} exited "
                                f"{out.returncode}):\n{(out.stderr or out.stdout)[-3000:]}")
        stamp.write_text(_stamp(version))
        print(f"made {venv} in {time.monotonic() - began:.0f} s", file=sys.stderr)
        return python


if __name__ == "__main__":
    for wanted in sys.argv[1:] or [OLDEST, NEWEST]:
        print(torch_python(wanted))
