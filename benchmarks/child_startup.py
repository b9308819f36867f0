"""What a profiled job's light child processes pay: the start-up hook in a Python process that never
imports torch, and a compiled loop whose Inductor compile workers are such children.

1. ``python -c pass`` with ``OTEL_PROFILER_ENABLED=true`` and the bootstrap folder on ``PYTHONPATH``
   (what ``otel-profiler run`` gives every process of a job) against the plain command, ``--runs``
   pairs alternating, so machine noise hits both alike: medians and the median paired difference.
2. A small model compiled by Inductor (a fresh cache folder each run, so its compile workers really
   start and compile) trained for a few steps, unprofiled and zero-code profiled, ``--compiled``
   pairs alternating: CPU seconds of the whole process tree (user + system, children included) and
   wall seconds, medians and ratios.

    python benchmarks/child_startup.py [--runs 40] [--compiled 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SITE_DIR = REPO / "otel_profiler" / "bootstrap" / "site"
COMPILED_LOOP = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 1))
step_model = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(20):
    opt.zero_grad(); step_model(torch.randn(32, 64)).pow(2).mean().backward(); opt.step()
"""


def env_for(profiled: bool, tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "_OTEL_", "PYTHONPATH"))}
    if profiled:
        env.update(OTEL_PROFILER_ENABLED="true", OTEL_PROFILER_PROFILE_DIR=str(tmp / "profile"),
                   OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none",
                   PYTHONPATH=os.pathsep.join([str(SITE_DIR), str(REPO)]))
    env.update(extra)
    return env


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, the whole process tree) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def interleaved(runs: int, make: callable) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    plain, profiled = [], []
    for i in range(runs):
        order = (False, True) if i % 2 == 0 else (True, False)
        for flag in order:
            (profiled if flag else plain).append(make(flag))
    return plain, profiled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--compiled", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        plain, profiled = interleaved(args.runs, lambda p: timed([sys.executable, "-c", "pass"], env_for(p, tmp)))
        p_wall, q_wall = [w for w, _ in plain], [w for w, _ in profiled]
        diffs = [b - a for a, b in zip(p_wall, q_wall)]
        print(f"python -c pass, {args.runs} pairs: plain {statistics.median(p_wall) * 1e3:.1f} ms, "
              f"with the start-up hook {statistics.median(q_wall) * 1e3:.1f} ms, median paired difference "
              f"{statistics.median(diffs) * 1e3:+.1f} ms")
        if args.compiled <= 0:
            return

        def compiled(flag: bool) -> tuple[float, float]:
            cache = tempfile.mkdtemp(dir=tmp)
            env = env_for(flag, Path(cache), TORCHINDUCTOR_CACHE_DIR=cache, TORCHINDUCTOR_COMPILE_THREADS="2")
            return timed([sys.executable, "-c", COMPILED_LOOP], env)

        plain, profiled = interleaved(args.compiled, compiled)
        for what, index in (("wall", 0), ("CPU", 1)):
            a, b = statistics.median(x[index] for x in plain), statistics.median(x[index] for x in profiled)
            print(f"compiled loop (Inductor, fresh cache), {args.compiled} pairs, {what}: unprofiled {a:.1f} s, "
                  f"profiled {b:.1f} s, ratio {b / a:.2f}x; rounds: "
                  + ", ".join(f"{q[index] / p[index]:.2f}" for p, q in zip(plain, profiled)))


if __name__ == "__main__":
    main()
