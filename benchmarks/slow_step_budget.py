"""The slow-step trigger's cost on a job that stalls now and then, against the same job unprofiled.

The job trains a small MLP for a fixed wall time; every 10th step it also sleeps 30 ms (a periodic
stall: a checkpoint, a slow batch). It runs three ways, interleaved, each in a fresh process:
unprofiled, profiled with default settings and operators recorded (``OTEL_PROFILER_ACTIVITIES=
gpu,cpu_op``, the slow-step trigger on), and the same with the slow-step trigger off
(``OTEL_PROFILER_SLOW_STEP_FACTOR=0``). It prints the steps each finished in the time, the ratio
to the unprofiled run and the slow windows the profile recorded.

    python benchmarks/slow_step_budget.py [--seconds 20] [--repeat 1]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

JOB = r'''
import sys, time, torch
seconds = float(sys.argv[1])
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(128, 64), torch.randn(128, 1)
end, steps = time.monotonic() + seconds, 0
while time.monotonic() < end:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    steps += 1
    if steps % 10 == 0:
        time.sleep(0.03)
print(steps)
'''


def run(seconds: float, env_extra: dict[str, str] | None, folder: str) -> tuple[int, int]:
    """Steps finished, and slow windows recorded (0 unprofiled)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(REPO)
    if env_extra is not None:
        env.update({"OTEL_PROFILER_ENABLED": "true", "OTEL_PROFILER_OUTPUT_DIR": folder,
                    "OTEL_PROFILER_SUMMARY_AT_EXIT": "false", **env_extra})
    out = subprocess.run([sys.executable, "-c", JOB, str(seconds)], env=env, capture_output=True,
                         text=True, check=True).stdout
    windows = 0
    for meta in glob.glob(os.path.join(folder, "*", "rank-*.json")):
        with open(meta) as f:
            windows += sum(1 for w in json.load(f).get("windows", []) if w.get("reason") == "slow")
    return int(out.split()[-1]), windows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    variants = {"unprofiled": None,
                "profiled (defaults, operators)": {"OTEL_PROFILER_ACTIVITIES": "gpu,cpu_op"},
                "profiled, slow-step trigger off": {"OTEL_PROFILER_ACTIVITIES": "gpu,cpu_op",
                                                    "OTEL_PROFILER_SLOW_STEP_FACTOR": "0"}}
    results: dict[str, list[tuple[int, int]]] = {name: [] for name in variants}
    for _ in range(args.repeat):
        for name, extra in variants.items():
            with tempfile.TemporaryDirectory() as folder:
                results[name].append(run(args.seconds, extra, folder))
    base = sum(s for s, _ in results["unprofiled"]) / args.repeat
    print(f"{'variant':34} {'steps':>7} {'ratio':>6} {'slow windows':>13}")
    for name, runs in results.items():
        steps = sum(s for s, _ in runs) / args.repeat
        windows = sum(w for _, w in runs) / args.repeat
        print(f"{name:34} {steps:7.0f} {steps / base:6.2f} {windows:13.1f}")


if __name__ == "__main__":
    main()
