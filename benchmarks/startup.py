"""Python start-up time with the package (and its startup hook) installed and ``OTEL_PROFILER_ENABLED``
unset, against the same interpreter without the package.

Two fresh venvs of this interpreter: ``bare`` (nothing installed) and ``installed`` (this package,
installed with pip, non-editable, so site-packages holds ``otel_profiler.pth``). Each run is
``python -c pass``; runs alternate between the two venvs (``--runs`` pairs), so machine noise hits
both alike. Prints the median of each, the median of the paired differences with a bootstrap 95 %
interval, whether the hook imported anything (``-X importtime``), and the time Python spends on
the hook file itself (``site.addpackage`` in process: free of process start-up noise).

    python benchmarks/startup.py [--runs 300]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def make_venvs(folder: Path) -> tuple[Path, Path]:
    src = folder / "src"
    for name in ("otel_profiler", "cuda_tracer"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    pythons = []
    for name in ("bare", "installed"):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder / name)], check=True)
        pythons.append(folder / name / "bin" / "python")
    # pip and setuptools of this environment, for the install only (not at start-up afterwards)
    env = {"PYTHONPATH": sysconfig.get_paths()["purelib"], "PATH": "/usr/bin:/bin"}
    subprocess.run([str(pythons[1]), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    str(src)], check=True, env=env, cwd=folder)
    return pythons[0], pythons[1]


HOOK_TIMING = """
import site, time
best = min((lambda t: (site.addpackage({purelib!r}, "otel_profiler.pth", set()), time.perf_counter_ns() - t)[1])(
    time.perf_counter_ns()) for _ in range(4000))
print(f"{{best / 1e3:.1f}}")
"""


def start_ns(python: Path, env: dict[str, str]) -> int:
    t0 = time.perf_counter_ns()
    subprocess.run([str(python), "-c", "pass"], env=env, check=True)
    return time.perf_counter_ns() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    env = {"PATH": "/usr/bin:/bin"}  # no OTEL_PROFILER_ENABLED, no PYTHONPATH
    with tempfile.TemporaryDirectory() as tmp:
        bare, installed = make_venvs(Path(tmp))
        purelib = subprocess.run([str(installed), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, env=env).stdout.strip()
        assert Path(purelib, "otel_profiler.pth").is_file(), "the startup hook was not installed"
        trace = subprocess.run([str(installed), "-X", "importtime", "-c", "pass"], capture_output=True,
                               text=True, env=env).stderr
        leaked = [m for m in ("otel_profiler", "numpy", "torch") if f" {m}\n" in trace or f" {m}." in trace]
        for python in (bare, installed):  # warm the file cache
            for _ in range(10):
                start_ns(python, env)
        a, b = [], []
        for _ in range(args.runs):
            pair = [(bare, a), (installed, b)]
            random.shuffle(pair)
            for python, out in pair:
                out.append(start_ns(python, env))
        hook_us = subprocess.run([str(installed), "-c", HOOK_TIMING.format(purelib=purelib)],
                                 capture_output=True, text=True, env=env).stdout.strip()
    diffs = [y - x for x, y in zip(a, b)]
    rng = random.Random(0)
    boots = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(1000))
    print(f"runs: {args.runs} pairs, interleaved in random order")
    print(f"without the package: median {statistics.median(a) / 1e6:.2f} ms")
    print(f"installed, OTEL_PROFILER_ENABLED unset: median {statistics.median(b) / 1e6:.2f} ms")
    print(f"added start-up time: median {statistics.median(diffs) / 1e6:.3f} ms "
          f"(95% CI {boots[25] / 1e6:.3f} .. {boots[974] / 1e6:.3f} ms)")
    print(f"modules the hook imported when unset: {leaked or 'none'}")
    print(f"processing otel_profiler.pth alone (site.addpackage, in process, best of 4000): {hook_us} us")


if __name__ == "__main__":
    main()
