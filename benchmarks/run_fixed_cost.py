"""The fixed cost of ``otel-profiler run`` on a short job, side by side with the job run plainly.

A short torch job (20 optimizer steps of a small model, ``torch`` imported) runs REPEAT times each
way, interleaved: ``python job.py``, ``otel-profiler run --no-summary -- python job.py`` and
``otel-profiler run -- python job.py`` (the summary printed). Figures (medians): each way's wall
time, the difference and ratio to the plain job, and for ``run`` the seconds from the end of the
job's own code (a timestamp it writes last) to ``run``'s exit: what the wrapper, the profiler's
exit and the summary add after the job.

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
import torch
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64)
for _ in range(int(sys.argv[1])):
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
open(sys.argv[2], "w").write(repr(time.time()))
'''


def one(command: list[str], env: dict[str, str], end_file: Path) -> tuple[float, float]:
    """(wall seconds, seconds from the job code's end to the command's exit)."""
    end_file.unlink(missing_ok=True)
    started = time.monotonic()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall, exited = time.monotonic() - started, time.time()
    return wall, exited - float(end_file.read_text())


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
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
        for _ in range(args.repeat):
            for name, command in ways.items():
                results[name].append(one(command, env, end))
    base = statistics.median(w for w, _ in results["python job.py"])
    print(f"{'way':24} {'wall s':>8} {'- plain s':>10} {'/ plain':>8} {'after job s':>12}")
    for name, runs in results.items():
        wall = statistics.median(w for w, _ in runs)
        after = statistics.median(a for _, a in runs)
        print(f"{name:24} {wall:8.2f} {wall - base:10.2f} {wall / base:8.2f} {after:12.2f}")


if __name__ == "__main__":
    main()
