"""The fixed cost of ``otel-profiler run`` on a short job, side by side with the job run plainly.

A short torch job (20 optimizer steps of a small model, ``torch`` imported) runs REPEAT times each
way, interleaved: ``python job.py``, ``otel-profiler run --no-summary -- python job.py`` and
``otel-profiler run -- python job.py`` (the summary printed). Figures (medians): each way's wall
time, its difference and ratio to the plain job, and its three pieces with their differences:
before the job's code starts (the wrapper's start, Python's and the profiler's bootstrap; the job
writes a timestamp first thing), the job's code (profiling at work), and after the job's code ends
(interpreter exit, the profiler's last write, the wrapper's summary) to the command's exit.

    python benchmarks/run_fixed_cost.py [--repeat 5] [--steps 20]
"""

from __future__ import annotations

import argparse
import os
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


def one(command: list[str], env: dict[str, str], end_file: Path) -> tuple[float, float, float, float]:
    """Seconds: (wall, before the job's code starts, the job's code, after the job's code ends)."""
    end_file.unlink(missing_ok=True)
    launched = time.time()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    exited = time.time()
    code_start, code_end = map(float, end_file.read_text().split())
    return exited - launched, code_start - launched, code_end - code_start, exited - code_end


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_METRICS_EXPORTER"] = env["OTEL_TRACES_EXPORTER"] = "none"
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        job, end = tmp / "job.py", tmp / "end"
        job.write_text(JOB)
        plain = [sys.executable, str(job), str(args.steps), str(end)]
        cli = [sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(tmp / "prof")]
        ways = {"python job.py": plain,
                "run --no-summary": cli + ["--no-summary", "--"] + plain,
                "run (summary printed)": cli + ["--"] + plain}
        results: dict[str, list[tuple[float, ...]]] = {name: [] for name in ways}
        for _ in range(args.repeat):
            for name, command in ways.items():
                results[name].append(one(command, env, end))
    base = [statistics.median(r[k] for r in results["python job.py"]) for k in range(4)]
    print(f"{'way':24} {'wall s':>8} {'- plain':>8} {'/ plain':>8} {'before':>8} {'- plain':>8} "
          f"{'job code':>9} {'- plain':>8} {'after':>8} {'- plain':>8}")
    for name, runs in results.items():
        wall, before, code, after = (statistics.median(r[k] for r in runs) for k in range(4))
        print(f"{name:24} {wall:8.2f} {wall - base[0]:8.2f} {wall / base[0]:8.2f} {before:8.2f} "
              f"{before - base[1]:8.2f} {code:9.2f} {code - base[2]:8.2f} {after:8.2f} {after - base[3]:8.2f}")


if __name__ == "__main__":
    main()
