"""The fixed cost of ``otel-profiler run`` on a short job, side by side with the job run plainly.

A short torch job (20 optimizer steps of a small model, ``torch`` imported) runs REPEAT times each
way, interleaved: ``python job.py``, ``python job.py`` with the zero-code bootstrap alone
(``OTEL_PROFILER_ENABLED=true`` and the bootstrap folder on ``PYTHONPATH``, as ``run`` sets them, no
wrapper), ``otel-profiler run --no-summary -- python job.py`` and ``otel-profiler run -- python
job.py`` (the summary printed). Figures (medians): each way's wall
time, its difference and ratio to the plain job, and its three pieces with their differences:
before the job's code starts (the wrapper's start, Python's and the profiler's bootstrap; the job
writes a timestamp first thing), the job's code (profiling at work), and after the job's code ends
(interpreter exit, the profiler's last write, the wrapper's summary) to the command's exit; and
the CPU time (user + system) of the way's processes that were waited for (the wrapper, the job,
the job's exporter), which the machine's other work hardly moves. The load average is printed
before and after: on a busy machine the wall times stretch, in every way alike.

    python benchmarks/run_fixed_cost.py [--repeat 5] [--steps 20]
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

JOB = '''
import sys, time
started = time.time()
import torch
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64)
for _ in range(int(sys.argv[1])):
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
open(sys.argv[2], "w").write(f"{started} {time.time()}")
'''


FIGURES = ("wall", "before", "job code", "after", "CPU")


def one(command: list[str], env: dict[str, str], end_file: Path) -> tuple[float, ...]:
    """Seconds: (wall, before the job's code starts, the job's code, after the job's code ends,
    CPU time of the processes waited for)."""
    end_file.unlink(missing_ok=True)
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    launched = time.time()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    exited = time.time()
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    code_start, code_end = map(float, end_file.read_text().split())
    cpu = now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime
    return exited - launched, code_start - launched, code_end - code_start, exited - code_end, cpu


def bootstrap_environment(env: dict[str, str], folder: Path) -> dict[str, str]:
    """``env`` with profiling on through the bootstrap folder, as ``otel-profiler run`` sets it."""
    from otel_profiler.bootstrap import SITE_DIR

    return {**env, "OTEL_PROFILER_ENABLED": "true", "OTEL_PROFILER_PROFILE_DIR": str(folder),
            "OTEL_PROFILER_SUMMARY_AT_EXIT": "false",
            "PYTHONPATH": os.pathsep.join(p for p in (SITE_DIR, env.get("PYTHONPATH")) if p)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_METRICS_EXPORTER"] = env["OTEL_TRACES_EXPORTER"] = "none"
    env["OMP_NUM_THREADS"] = "1"  # no spin-waiting torch threads: on a busy machine they swamp the CPU times
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        job, end = tmp / "job.py", tmp / "end"
        job.write_text(JOB)
        plain = [sys.executable, str(job), str(args.steps), str(end)]
        cli = [sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(tmp / "prof")]
        ways = {"python job.py": (plain, env),
                "bootstrap alone": (plain, bootstrap_environment(env, tmp / "boot")),
                "run --no-summary": (cli + ["--no-summary", "--"] + plain, env),
                "run (summary printed)": (cli + ["--"] + plain, env)}
        results: dict[str, list[tuple[float, ...]]] = {name: [] for name in ways}
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        for _ in range(args.repeat):
            for name, (command, way_env) in ways.items():
                results[name].append(one(command, way_env, end))
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    base = [statistics.median(r[k] for r in results["python job.py"]) for k in range(len(FIGURES))]
    print(f"{'way':22} {'wall s':>7} {'- plain':>7} {'/ plain':>7} " +
          " ".join(f"{name:>8} {'- plain':>7}" for name in FIGURES[1:]) + f" {'/ plain':>7}")
    for name, runs in results.items():
        medians = [statistics.median(r[k] for r in runs) for k in range(len(FIGURES))]
        print(f"{name:22} {medians[0]:7.2f} {medians[0] - base[0]:7.2f} {medians[0] / base[0]:7.2f} " +
              " ".join(f"{medians[k]:8.2f} {medians[k] - base[k]:7.2f}" for k in range(1, len(FIGURES))) +
              f" {medians[-1] / base[-1]:7.2f}")


if __name__ == "__main__":
    main()
