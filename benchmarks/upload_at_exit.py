"""Upload at a job's exit (``OTEL_PROFILER_UPLOAD``), measured: how long a job takes to end after its own
code has ended, with the upload off, on with the app up and on with the app down, side by side, for a
zero-code job (``OTEL_PROFILER_ENABLED``) and for ``otel-profiler run``; and how long after the job's
exit its run is listed by the app (up).

The job is ``tests/scripts/manual_sgd.py`` (a short torch CPU training) followed by one line with the
time its code ended; the figure is the time from that line to the exit of the process we started (the
job, or ``run``, which summarizes after it), torch's own interpreter exit included. Runs of the six
cases are interleaved, REPEATS times; medians, and each "on" as a ratio of its "off".

    python benchmarks/upload_at_exit.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

import requests  # noqa: E402

from app_support import SCRIPT, AppServer, cli, free_port  # noqa: E402
from otel_profiler.bootstrap import SITE_DIR  # noqa: E402

CASES = [(launcher, mode) for launcher in ("zero-code", "run") for mode in ("off", "on, app up", "on, app down")]


def job_env(out: Path, upload: dict[str, str], zero_code: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(OTEL_PROFILER_OUTPUT_DIR=str(out), OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none",
               OTEL_LOGS_EXPORTER="none", OTEL_RESOURCE_ATTRIBUTES="ml.team=vision,enduser.id=alice", **upload)
    if zero_code:
        env.update(OTEL_PROFILER_ENABLED="true", PYTHONPATH=SITE_DIR)
    return env


def one_job(script: Path, folder: Path, launcher: str, upload: dict[str, str]) -> float:
    """Seconds from the end of the job's code to the exit of the process started."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    if launcher == "run":
        cmd = [sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(folder), "--", sys.executable, str(script)]
        env = job_env(folder.parent, upload, zero_code=False)
    else:
        cmd = [sys.executable, str(script)]
        env = dict(job_env(folder.parent, upload, zero_code=True), OTEL_PROFILER_PROFILE_DIR=str(folder))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"{launcher} job failed ({done.returncode}): {done.stderr[-2000:]}")
    code_end = float(next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("code-end ")))
    return ended - code_end


def helpers_of(path: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(str(path).encode() in a for a in argv) and any(b"otel_profiler" in a for a in argv):
                pids.append(int(entry.name))
    return pids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="otel-upload-bench-") as tmp_name:
        tmp = Path(tmp_name)
        script = tmp / "job.py"
        script.write_text(SCRIPT.read_text() + "\nimport time\nprint(f'code-end {time.time():.6f}', flush=True)\n")
        store = tmp / "store"
        store.mkdir()
        cli("teams", "add", "vision", "--store", str(store))
        cli("users", "add", "alice", "--team", "vision", "--role", "member", "--no-password", "--store", str(store))
        token = cli("users", "token", "alice", "--store", str(store)).stdout.strip()
        server = AppServer(store)
        down = f"http://127.0.0.1:{free_port()}"
        uploads = {"off": {}, "on, app up": {"OTEL_PROFILER_UPLOAD": server.url, "OTEL_PROFILER_UPLOAD_TOKEN": token},
                   "on, app down": {"OTEL_PROFILER_UPLOAD": down, "OTEL_PROFILER_UPLOAD_TOKEN": token}}
        exits: dict[tuple[str, str], list[float]] = {case: [] for case in CASES}
        listed_after: list[float] = []
        try:
            for repeat in range(args.repeats):
                for launcher, mode in CASES:
                    name = f"{launcher}-{mode.replace(', ', '-').replace(' ', '-')}-{repeat}"
                    exits[(launcher, mode)].append(one_job(script, tmp / "out" / name, launcher, uploads[mode]))
                    if mode == "on, app up":
                        exited = time.monotonic()
                        while name not in {r["run_id"] for r in requests.get(
                                server.url + "/api/runs", headers={"Authorization": f"Bearer {token}"},
                                timeout=60).json()["runs"]}:
                            if time.monotonic() - exited > 300:
                                raise SystemExit(f"{name} never reached the app")
                            time.sleep(0.1)
                        listed_after.append(time.monotonic() - exited)
        finally:
            server.stop()
            for pid in helpers_of(tmp):  # the uploads to the app that is down would retry for 15 minutes
                os.kill(pid, signal.SIGKILL)
        print(f"seconds from the end of the job's code to its exit (median of {args.repeats}; ratio to upload off)")
        print(f"{'launcher':<10} {'upload':<14} {'median s':>9} {'ratio':>7}  all")
        for launcher, mode in CASES:
            median = statistics.median(exits[(launcher, mode)])
            base = statistics.median(exits[(launcher, "off")])
            print(f"{launcher:<10} {mode:<14} {median:9.3f} {median / base:7.2f}  "
                  + " ".join(f"{x:.3f}" for x in exits[(launcher, mode)]))
        print(f"run listed by the app after the job's exit (app up): median {statistics.median(listed_after):.2f} s, "
              f"max {max(listed_after):.2f} s")


if __name__ == "__main__":
    main()
