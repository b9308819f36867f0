"""The job's exit, measured: how long a profiled job takes to end after its own code has ended, and
how much memory it holds then, with the exporter frozen, on a big run and under SIGTERM.

- ``frozen``: ``tests/fault_job.py`` exporting to a healthy receiver; once it runs, its exporter
  process is stopped (SIGSTOP) and the job's loop ends. Figure: seconds from the end of the job's
  own code (its ``--stats`` file) to the job's exit, side by side with the same job with a live
  exporter and unprofiled (torch's own interpreter exit is part of every figure).
- ``memory``: a zero-code job of STEPS optimizer steps with ANNOTATIONS ``annotate()`` calls each,
  default settings (the summary at exit on), no endpoint. Figures: the job's resident memory when
  its code ends, its peak resident memory (the kernel's high-water mark, read when it is reaped),
  the seconds from its code's end to its exit, and when ``summary.json`` appeared.
- ``sigterm``: the same job killed with SIGTERM in the middle, profiled and unprofiled side by
  side: seconds from the signal to the exit.

    python benchmarks/exit_path.py [--steps 2000] [--annotations 300] [--only frozen|memory|sigterm]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from fault_kit import JOB, FaultyReceiver, job_env, otlp_env  # noqa: E402

BIG_JOB = '''
import json, os, sys, time
import torch
from otel_profiler import annotate
steps, annotations, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4, 8)
for i in range(steps):
    for k in range(annotations):
        with annotate("block", k=k):
            pass
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
    if i == steps // 2:
        print("half", flush=True)
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
with open(out, "w") as f:
    json.dump({"rss_kib": int(status["VmRSS"].split()[0]), "end": time.time()}, f)
'''


def _exporter_pids(pid: int) -> list[int]:
    import psutil

    found = []
    for p in psutil.Process(pid).children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "spawn_main" in cmd and "resource_tracker" not in cmd:
            found.append(p.pid)
    return found


def frozen(tmp: Path, freeze: bool | None) -> float:
    """Seconds from the end of the job's code to its exit: its exporter stopped (True) or not
    (False), or the job unprofiled (None)."""
    until, stats = tmp / f"until-{freeze}", tmp / f"stats-{freeze}.json"
    with FaultyReceiver("ok") as receiver:
        env = job_env(tmp / f"prof-{freeze}", **otlp_env(receiver.endpoint("http/protobuf"), "http/protobuf",
                                                         tmp / f"spool-{freeze}"))
        if freeze is None:
            env = {k: v for k, v in env.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
        proc = subprocess.Popen([sys.executable, JOB, "--steps", "0", "--ready", "30", "--step-sleep", "0.01",
                                 "--until", str(until), "--stats", str(stats)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(1.0)  # a part or two exported
        stopped = _exporter_pids(proc.pid) if freeze else []
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        until.touch()
        proc.communicate(timeout=600)
        exited = time.time()
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return exited - stats.stat().st_mtime


def memory(tmp: Path, steps: int, annotations: int) -> dict:
    script, out, folder = tmp / "big_job.py", tmp / "big.json", tmp / "big-prof"
    script.write_text(BIG_JOB)
    env = job_env(folder, OTEL_PROFILER_SUMMARY_AT_EXIT="true")
    env.pop("OTEL_PROFILER_FLUSH_INTERVAL_S")
    proc = subprocess.Popen([sys.executable, str(script), str(steps), str(annotations), str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    exited = time.time()
    proc.returncode = os.waitstatus_to_exitcode(status)
    end = json.loads(out.read_text())
    summary = folder / "summary.json"
    deadline = time.monotonic() + 600
    while not summary.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return {"exit": proc.returncode, "rss_at_end_mb": end["rss_kib"] / 1024, "peak_rss_mb": usage.ru_maxrss / 1024,
            "exit_s": exited - end["end"], "summary_after_exit_s": time.time() - exited if summary.exists() else None}


def sigterm(tmp: Path, steps: int, annotations: int, profiled: bool) -> float:
    script = tmp / "big_job.py"
    script.write_text(BIG_JOB)
    env = job_env(tmp / f"term-{profiled}", OTEL_PROFILER_SUMMARY_AT_EXIT="true")
    if not profiled:
        env = {k: v for k, v in env.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    proc = subprocess.Popen([sys.executable, str(script), str(steps), str(annotations), str(tmp / "t.json")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout.readline().strip() == "half"
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=600)
    return time.monotonic() - sent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--annotations", type=int, default=300)
    ap.add_argument("--only", choices=("frozen", "memory", "sigterm"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.only in (None, "frozen"):
            bare, live, stopped = frozen(tmp, None), frozen(tmp, False), frozen(tmp, True)
            print(f"exit after the job's code: unprofiled {bare:.2f} s, live exporter {live:.2f} s, "
                  f"frozen exporter {stopped:.2f} s")
        if args.only in (None, "memory"):
            m = memory(tmp, args.steps, args.annotations)
            print(f"{args.steps} steps x {args.annotations} annotations: exit {m['exit']}, "
                  f"RSS at the code's end {m['rss_at_end_mb']:.0f} MB, peak RSS {m['peak_rss_mb']:.0f} MB, "
                  f"exit took {m['exit_s']:.2f} s, summary.json "
                  + ("missing" if m["summary_after_exit_s"] is None else
                     f"there {m['summary_after_exit_s']:.2f} s after the exit"))
        if args.only in (None, "sigterm"):
            bare = sigterm(tmp, args.steps, args.annotations, False)
            prof = sigterm(tmp, args.steps, args.annotations, True)
            print(f"SIGTERM to exit: unprofiled {bare:.2f} s, profiled {prof:.2f} s")


if __name__ == "__main__":
    main()
