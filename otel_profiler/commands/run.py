"""``otel-profiler run [options] -- COMMAND...``: profile a training job without changing its code.

Checks its own flags first (a bad value is a usage error, exit 2, before COMMAND starts), sets the
environment (``OTEL_PROFILER_ENABLED``, one run id and profile folder for every process and rank,
the chosen options) and puts the bootstrap ``sitecustomize.py`` first on ``PYTHONPATH``, then runs
COMMAND (``python train.py``, ``torchrun ...``). When it ends, summarizes the profile folder into
``summary.json`` and prints the summary table (``--no-summary``: neither), then repeats the lines
the job's exporters said at exit (spans waiting in the spool with the ``replay`` command, batches
to send with ``export``), so they come last. Exits with COMMAND's exit code, whatever happens to
the profiler: an unusable ``--output-dir`` (under a file, read-only) turns profiling off with one
line and COMMAND still runs; a summary that cannot be written (full disk) is one line. With
``--output-dir D``, undeliverable OTLP requests are spooled under ``D/otlp-spool``.

Signals: SIGTERM, SIGHUP and SIGUSR2 sent to ``run`` go to COMMAND, and so does SIGINT sent by a
process (``kill -INT``); a Ctrl-C typed at the terminal already reaches COMMAND (the same process
group), so it is not sent twice. If ``run`` itself dies (even SIGKILL), COMMAND gets SIGTERM from
the kernel (Linux's parent-death signal, as ``torchrun`` does for its workers) and leaves nothing
behind: its exporter and helpers follow it.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys

import threading
from typing import Callable

from .. import config
from cuda_tracer.private_files import make_private_dir

from ..bootstrap import SITE_DIR
from ..live.child_processes import JOB_ROOT_ENV, RUN_ENV
from ..live.resource import run_id as resource_run_id
from .run_signals import end_as_the_job_did, parent_death_signal, wait_forwarding_signals

log = logging.getLogger(__name__)

DIST_INFO_PREFIX = "otel_profiler-"
"""How this distribution's metadata folder is named (``otel_profiler-<version>.dist-info``)."""
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run", help="profile a command (python train.py, torchrun ...) with no code change",
        description="Run COMMAND with profiling on in every Python process it starts, then "
                    "summarize. Put `--` before COMMAND.")
    p.add_argument("--output-dir", metavar="DIR",
                   help="profile folder (default: $OTEL_PROFILER_OUTPUT_DIR/<run id>/, else "
                        "./otel-profile/<run id>/)")
    p.add_argument("--steps", metavar="START:STOP", type=_flag("OTEL_PROFILER_STEPS", "--steps"),
                   help="detailed capture for steps START to STOP-1, or 'off' (default: "
                        "OTEL_PROFILER_STEPS, else 1:11)")
    p.add_argument("--every", type=_flag("OTEL_PROFILER_EVERY_STEPS", "--every"), metavar="N",
                   help="also capture a window every N steps (default: OTEL_PROFILER_EVERY_STEPS, "
                        "else 0: off)")
    p.add_argument("--duration", type=_flag("OTEL_PROFILER_DURATION_S", "--duration"), metavar="S",
                   help="also capture the first S seconds (default: OTEL_PROFILER_DURATION_S, "
                        "else 0: off)")
    p.add_argument("--cpu-ops", action="store_true",
                   help="also record PyTorch CPU operators (default: off)")
    p.add_argument("--trigger-port", type=_flag("OTEL_PROFILER_TRIGGER_PORT", "--trigger-port"), metavar="PORT",
                   help="trigger port (+ local rank): a request from the same user opens a window on demand, see "
                        "`otel-profiler trigger` (default: OTEL_PROFILER_TRIGGER_PORT, else 0: off)")
    p.add_argument("--top", type=_positive, default=20, help="rows per table in the printed summary")
    p.add_argument("--no-summary", action="store_true",
                   help="after COMMAND, write and print no summary (only the line naming the profile "
                        "folder; `otel-profiler summary FOLDER` makes it later)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="the command to profile, after `--`, e.g. -- python train.py --epochs 1, "
                        "or -- torchrun --nproc-per-node 8 train.py")
    p.set_defaults(func=run, own_flags=tuple(s for a in p._actions for s in a.option_strings if s.startswith("--")))


def _flag(variable: str, flag: str) -> Callable[[str], str]:
    """An argparse type checking a flag's value as its setting would be checked: a bad value is a
    usage error before COMMAND starts (one line naming the flag, exit 2). The text is kept."""
    def check(text: str) -> str:
        try:
            config.flag_value(variable, flag, text)
        except config.ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{flag} ")) from None
        return text

    check.__name__ = flag  # argparse names the type in its message
    return check


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return value


FLAG_VARIABLES = {"steps": "OTEL_PROFILER_STEPS", "every": "OTEL_PROFILER_EVERY_STEPS",
                  "duration": "OTEL_PROFILER_DURATION_S", "trigger_port": "OTEL_PROFILER_TRIGGER_PORT"}
"""The settings this command's own flags set (argparse destination -> variable)."""


def child_environment(args: argparse.Namespace, base: dict[str, str]) -> tuple[dict[str, str], str]:
    """The environment COMMAND runs in, and the profile folder it writes."""
    env = dict(base)
    env.pop(RUN_ENV, None)  # the job is a run of its own, not one of the program that started this
    run_id = resource_run_id(env.get("OTEL_PROFILER_RUN_ID", ""), env)
    folder = args.output_dir or os.path.join(config.load(env).output_dir, run_id)
    folder = os.path.abspath(folder)
    env.update({
        "OTEL_PROFILER_ENABLED": "true",
        JOB_ROOT_ENV: str(os.getpid()),  # the job is this process tree (CPU samples)
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
    """Whether this package is installed (its ``.dist-info`` in a folder of ``sys.path``: a plain
    or an editable install), as ``importlib.metadata.distribution`` would find it, without the
    cost of importing ``importlib.metadata`` (about a tenth of the command's own start-up)."""
    for folder in sys.path:
        try:
            with os.scandir(folder or ".") as entries:
                if any(e.name.startswith(DIST_INFO_PREFIX) and e.name.endswith(".dist-info") for e in entries):
                    return True
        except OSError:  # not a folder (a zip file), or gone
            continue
    return False


def run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    else:
        _say_flags_after_the_command(command, getattr(args, "own_flags", ()))
    if not command:
        print("otel-profiler: error: nothing to run; usage: otel-profiler run [options] -- COMMAND...",
              file=sys.stderr)
        return 2
    folder: str | None
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
    if folder is not None:
        _forget_notes(folder)
    try:
        child = subprocess.Popen(command, env=env, preexec_fn=parent_death_signal())
    except OSError as exc:
        print(f"otel-profiler: error: cannot run {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    preparing = _prepare_summary() if folder is not None and not args.no_summary else None
    code = wait_forwarding_signals(child)
    if folder is not None:
        try:
            if args.no_summary:
                print(_written_line(folder, summary_written=False) if _why_nothing(folder) == "" else
                      f"otel-profiler: no profile was recorded in {folder}{_why_nothing(folder)}", file=sys.stderr)
            else:
                if preparing is not None:
                    preparing.join()
                _report(folder, args.top)
            _upload_in_background(folder)
            _repeat_notes(folder)
        except KeyboardInterrupt:  # Ctrl-C while summarizing: the job's exit code all the same
            pass
    return code if code >= 0 else end_as_the_job_did(-code)


def _say_flags_after_the_command(command: list[str], own_flags: tuple[str, ...]) -> None:
    """``run python train.py --cpu-ops``: the flag goes to the command, as written; one line says
    so, with where it belongs (``--help`` is the command's too, and is not named)."""
    misplaced = [arg for arg in command[1:] if arg.split("=", 1)[0] in own_flags and arg != "--help"]
    if misplaced:
        flags = " ".join(misplaced)
        print(f"otel-profiler: warning: {flags} follows the command, so the command gets it, not run; run's own "
              f"flags go before `--` and the command after it: otel-profiler run {flags} -- {command[0]} ...",
              file=sys.stderr)


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


def _prepare_summary() -> threading.Thread:
    """Import what summarizing needs while the job runs (a daemon thread at the lowest CPU
    priority, so the job's own start comes first), so the summary is printed soon after the job ends."""
    def load() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, 19)  # on Linux: this thread only
        except (AttributeError, OSError):
            pass
        try:
            from ..live import output  # noqa: F401
            from ..analysis import document  # noqa: F401
            from ..report import console  # noqa: F401
        except Exception:
            log.debug("importing the summary modules ahead failed; they load when needed", exc_info=True)

    thread = threading.Thread(target=load, name="otel-profiler-run-imports", daemon=True)
    thread.start()
    return thread


def _forget_notes(folder: str) -> None:
    """Remove the exit lines of an earlier run of the same folder (``--output-dir`` reused)."""
    for name in _note_files(folder):
        try:
            os.remove(os.path.join(folder, name))
        except OSError:
            pass


def _note_files(folder: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(folder) if n.startswith("delivery-at-exit.") and n.endswith(".txt"))
    except OSError:
        return []


def _repeat_notes(folder: str) -> None:
    """The lines the job's exporters said at exit (spooled spans with the ``replay`` command,
    lost batches with the ``export`` command), repeated last so they are not lost above the table."""
    from ..profiler_warnings import print_warning

    for name in _note_files(folder):
        try:
            with open(os.path.join(folder, name), errors="replace") as f:
                lines = [line.rstrip("\n") for line in f.read(64 << 10).splitlines() if line.strip()]
        except OSError:
            continue
        for line in lines:
            print_warning(line)


def _report(folder: str, top: int) -> None:
    """Summarize after the job; any failure here (a full disk, an unreadable part) is one line,
    never the exit code."""
    from ..live.output import summarize_folder, write_summary
    from ..report.console import render_table

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
        print(f"otel-profiler: no profile was recorded in {folder}{_why_nothing(folder)}", file=sys.stderr)
        return
    print(render_table(summary, top=top), file=sys.stderr)
    print("\n" + _written_line(folder, summary_written=written), file=sys.stderr)


def _why_nothing(folder: str) -> str:
    """Why a folder holds no profile, when it can be told: no process wrote a rank."""
    if any(name.startswith("rank-") and name.endswith(".json") for name in _names(folder)):
        return ""
    return (": no process of the command imported torch, TensorFlow or Keras (profiling starts at that "
            "import), or none of them recorded anything")


FULL_DISK_BYTES = 64 << 10
"""Less free space than this on the profile folder's disk at the end: the profile may lack parts."""


def _written_line(folder: str, summary_written: bool) -> str:
    """The last line about the profile: where it is, or that it is incomplete and why."""
    where = f"{'summary.json; ' if summary_written else ''}`otel-profiler summary {folder}`"
    problem = _incomplete(folder)
    if problem:
        return f"otel-profiler: warning: the profile in {folder} is incomplete ({problem}); what was written: {where}"
    return f"otel-profiler: profile written to {folder} ({where})"


def _incomplete(folder: str) -> str:
    """Why the profile in ``folder`` lacks parts (its ranks said so, or its disk is full), or ""."""
    import json

    parts, reasons = 0, set()
    for name in _names(folder):
        if name.startswith("rank-") and name.endswith(".json"):
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    lost = json.load(f).get("parts_not_written") or {}
                parts += int(lost.get("parts", 0))
                reasons.add(str(lost.get("reason", "")))
            except (OSError, ValueError, AttributeError, TypeError):
                continue
    if parts:
        return f"{parts} parts could not be written: {', '.join(sorted(r for r in reasons if r))}"
    try:
        disk = os.statvfs(folder)
    except OSError:
        return ""
    free = disk.f_bavail * disk.f_frsize
    return f"its disk is full: {free >> 10} KiB free" if free < FULL_DISK_BYTES else ""


def _upload_in_background(folder: str) -> None:
    """With ``OTEL_PROFILER_UPLOAD`` set: record the folder's upload in the upload spool and hand it
    to a detached process that delivers it, retrying for a bounded time (``run``'s exit waits for
    a small local write only). One line says what happens; the token is never shown."""
    settings = config.load(os.environ)
    url = settings.upload.strip()
    if not url:  # the usual case: nothing more is imported (the upload client loads numpy)
        return
    from ..shared import upload
    from ..live.wiring import EXPORTER_CHILD_ENV
    from ..profiler_warnings import print_warning
    from .upload import default_spool

    if not any(upload.PROFILE_FILE.fullmatch(n) for n in _names(folder)):
        return
    not_sent = f"the profile is not uploaded (`otel-profiler upload {folder} --url URL` sends it)"
    if upload.http_url(url):
        print_warning(f"OTEL_PROFILER_UPLOAD={upload.http_url(url)}; {not_sent}")
        return
    if not settings.upload_token.strip():
        print_warning(f"OTEL_PROFILER_UPLOAD is set but OTEL_PROFILER_UPLOAD_TOKEN is not; {not_sent}")
        return
    spool = upload.spool_beside(folder)
    retry = "otel-profiler upload --retry" + ("" if spool == default_spool() else f" --spool {spool}")
    try:
        record = upload.spool_upload(spool, url, folder, os.path.basename(folder))
    except OSError as exc:
        print_warning(f"cannot use the upload spool {spool} ({exc.strerror or exc}); {not_sent}")
        return
    if record is None:
        print_warning(f"the upload spool {spool} is full ({upload.MAX_PENDING} uploads wait: `{retry}`); "
                      f"{not_sent}")
        return
    if upload.start_worker(spool, url, dict(os.environ, **{EXPORTER_CHILD_ENV: "1"})) is None:
        print_warning(f"cannot start the upload; it waits in {spool} (`{retry}` sends it)")
        return
    print(f"otel-profiler: uploading {folder} to {upload.shown_url(url)} in the background (if the app cannot "
          f"be reached it waits in {spool}: `{retry}`)", file=sys.stderr)


def _names(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []
