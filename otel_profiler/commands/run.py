"""``otel-profiler run [options] -- COMMAND...``: profile a training job without changing its code.

Sets the environment (``OTEL_PROFILER_ENABLED``, one run id and profile folder for every process
and rank, the chosen options) and puts the bootstrap ``sitecustomize.py`` first on ``PYTHONPATH``,
then runs COMMAND (``python train.py``, ``torchrun ...``). When it ends, summarizes the profile
folder into ``summary.json`` and prints the summary table. Exits with COMMAND's exit code, whatever
happens to the profiler: an unusable ``--output-dir`` (under a file, read-only) turns profiling
off with one line and COMMAND still runs; a summary that cannot be written (full disk) is one line.
With ``--output-dir D``, undeliverable OTLP requests are spooled under ``D/otlp-spool``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

from .. import config
from cuda_tracer.private_files import make_private_dir

from ..bootstrap import SITE_DIR
from ..live.output import summarize_folder, write_summary
from ..report.console import render_table
from ..live.resource import run_id as resource_run_id

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run", help="profile a command (python train.py, torchrun ...) with no code change",
        description="Run COMMAND with profiling on in every Python process it starts, then "
                    "summarize. Put `--` before COMMAND.")
    p.add_argument("--output-dir", metavar="DIR",
                   help="profile folder (default: $OTEL_PROFILER_OUTPUT_DIR/<run id>/, else "
                        "./otel-profile/<run id>/)")
    p.add_argument("--steps", metavar="START:STOP",
                   help="detailed capture for steps START to STOP-1, or 'off' (default: "
                        "OTEL_PROFILER_STEPS, else 1:11)")
    p.add_argument("--every", type=int, metavar="N",
                   help="also capture a window every N steps (default: OTEL_PROFILER_EVERY_STEPS, "
                        "else 0: off)")
    p.add_argument("--duration", type=float, metavar="S",
                   help="also capture the first S seconds (default: OTEL_PROFILER_DURATION_S, "
                        "else 0: off)")
    p.add_argument("--cpu-ops", action="store_true",
                   help="also record PyTorch CPU operators (default: off)")
    p.add_argument("--trigger-port", type=int, metavar="PORT",
                   help="trigger port (+ local rank): a request from the same user opens a window on demand, see "
                        "`otel-profiler trigger` (default: OTEL_PROFILER_TRIGGER_PORT, else 0: off)")
    p.add_argument("--top", type=int, default=20, help="rows per table in the printed summary")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="the command to profile, after `--`, e.g. -- python train.py --epochs 1, "
                        "or -- torchrun --nproc-per-node 8 train.py")
    p.set_defaults(func=run)


FLAG_VARIABLES = {"steps": "OTEL_PROFILER_STEPS", "every": "OTEL_PROFILER_EVERY_STEPS",
                  "duration": "OTEL_PROFILER_DURATION_S", "trigger_port": "OTEL_PROFILER_TRIGGER_PORT"}
"""The settings this command's own flags set (argparse destination -> variable)."""


def child_environment(args: argparse.Namespace, base: dict[str, str]) -> tuple[dict[str, str], str]:
    """The environment COMMAND runs in, and the profile folder it writes."""
    env = dict(base)
    run_id = resource_run_id(env.get("OTEL_PROFILER_RUN_ID", ""), env)
    folder = args.output_dir or os.path.join(config.load(env)["OTEL_PROFILER_OUTPUT_DIR"], run_id)
    folder = os.path.abspath(folder)
    env.update({
        "OTEL_PROFILER_ENABLED": "true",
        "OTEL_PROFILER_RUN_ID": run_id,
        "OTEL_PROFILER_PROFILE_DIR": folder,
        "OTEL_PROFILER_SUMMARY_AT_EXIT": "false",
    })
    for dest, variable in FLAG_VARIABLES.items():
        if getattr(args, dest) is not None:
            env[variable] = str(getattr(args, dest))
    if args.output_dir and not env.get("OTEL_PROFILER_SPOOL_DIR"):
        env["OTEL_PROFILER_SPOOL_DIR"] = os.path.join(folder, "otlp-spool")
    if args.cpu_ops:
        current = env.get("OTEL_PROFILER_ACTIVITIES", "gpu")
        env["OTEL_PROFILER_ACTIVITIES"] = f"{current},cpu_op"
    paths = [SITE_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if not _installed():  # running from a source tree: the job must import this same package
        paths.append(_PACKAGE_ROOT)
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env, folder


def _as_flag(args: argparse.Namespace, problem: str) -> str:
    """A settings problem worded with this command's flag when the value came from one
    (``--steps 'abc': expected ...``), else as it is (naming the variable)."""
    for dest, variable in FLAG_VARIABLES.items():
        if getattr(args, dest) is not None and problem.startswith(variable + "="):
            return "--" + dest.replace("_", "-") + " " + problem[len(variable) + 1:]
    return problem


def _installed() -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("otel-profiler")
        return True
    except PackageNotFoundError:
        return False


def run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("otel-profiler: error: nothing to run; usage: otel-profiler run [options] -- COMMAND...",
              file=sys.stderr)
        return 2
    env, folder = child_environment(args, dict(os.environ))
    problems = [_as_flag(args, problem) for problem in config.load(env).warnings]
    if problems:  # never stop the job: run it unprofiled, say why once
        print("otel-profiler: warning: profiling is off because of invalid settings: "
              + "; ".join(problems), file=sys.stderr)
        env, folder = dict(os.environ), None
    else:
        problem = _unusable(folder)
        if problem:  # the job comes first: it runs unprofiled
            print(f"otel-profiler: warning: profiling is off: cannot use the profile folder {folder} "
                  f"({problem}); running the command without it", file=sys.stderr)
            env, folder = dict(os.environ), None
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        print(f"otel-profiler: error: cannot run {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    code = _wait_forwarding_signals(child)
    if folder is not None:
        _report(folder, args.top)
    return code if code >= 0 else 128 - code


def _unusable(folder: str) -> str | None:
    """Why ``folder`` cannot be made or written (None when it can): made 0700 now, and probed
    with a file that is removed at once."""
    try:
        make_private_dir(folder)  # refuses a folder of another user or one others can write
        probe = os.path.join(folder, f".otel-profiler-probe-{os.getpid()}")
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.remove(probe)
    except OSError as exc:
        return exc.strerror or exc.__class__.__name__
    return None


def _wait_forwarding_signals(child: subprocess.Popen) -> int:
    """Wait for ``child``; SIGTERM/SIGHUP to us go to it, Ctrl-C reaches it through the terminal."""
    def forward(signum: int, frame: object) -> None:
        try:
            child.send_signal(signum)
        except OSError:
            pass

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR2):
        try:
            previous[sig] = signal.signal(sig, signal.SIG_IGN if sig == signal.SIGINT else forward)
        except (ValueError, OSError):
            pass
    try:
        return child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _report(folder: str, top: int) -> None:
    """Summarize after the job; any failure here (a full disk, an unreadable part) is one line,
    never the exit code."""
    written = True
    try:
        try:
            summary = write_summary(folder) if os.path.isdir(folder) else None
        except OSError as exc:
            print(f"otel-profiler: warning: cannot write summary.json in {folder} "
                  f"({exc.strerror or exc})", file=sys.stderr)
            written, summary = False, summarize_folder(folder)  # still shown
    except Exception as exc:
        print(f"otel-profiler: warning: cannot summarize {folder} ({exc.__class__.__name__}: "
              f"{str(exc)[:200]})", file=sys.stderr)
        return
    if summary is None:
        print(f"otel-profiler: no profile was recorded in {folder}", file=sys.stderr)
        return
    print(render_table(summary, top=top), file=sys.stderr)
    print(f"\notel-profiler: profile written to {folder} ({'summary.json; ' if written else ''}"
          f"`otel-profiler summary {folder}`)", file=sys.stderr)
