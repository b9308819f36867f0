"""``otel-profiler trigger (--port P | --pid PID | --run RUN_ID)``: open a detailed window in a running job.

Sends one datagram to the trigger socket of port P (the job's ``OTEL_PROFILER_TRIGGER_PORT`` plus
its local rank; a job of the same user on this host) or ``SIGUSR2`` to process PID. The job
captures its next ``OTEL_PROFILER_WINDOW_STEPS`` steps.

It says what it sent, and exits 1 without effect when nothing answers: no trigger socket of this
user for the port (in the temporary directory, or any the host lists in ``/proc/net/unix``), no
such process, or a process that does not handle SIGUSR2 (it would be killed by it, so nothing is
sent).

With ``--run RUN_ID --steps N`` (and ``--url``, ``--token-file``), every rank of the run, on any
host, captures the same N steps, through the Profiler app its ranks report to.
"""

from __future__ import annotations

import argparse
import os
import signal
import stat
import sys

from ..live.windows.triggers import MIN_INTERVAL_S, is_private_folder, send, socket_name, trigger_folder
from ..names import terminal_safe
from ..profiler_warnings import print_error


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("trigger", help="capture the next steps of a running job in detail",
                              description=__doc__.split("\n\n", 1)[1])
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--port", type=int,
                        help="the job's trigger port: its OTEL_PROFILER_TRIGGER_PORT (or run "
                             "--trigger-port) plus the local rank to reach")
    target.add_argument("--pid", type=int, help="send SIGUSR2 to this process (a profiled job's)")
    target.add_argument("--run", metavar="RUN_ID",
                        help="every rank of this run (on any host) captures the same --steps steps, through "
                             "the Profiler app its ranks report to (OTEL_PROFILER_UPLOAD)")
    p.add_argument("--steps", type=int, default=5, help="with --run: how many steps to capture (default 5)")
    p.add_argument("--url", default=os.environ.get("OTEL_PROFILER_UPLOAD") or None,
                   help="with --run: the Profiler app's address (default: OTEL_PROFILER_UPLOAD)")
    p.add_argument("--token-file", metavar="FILE",
                   help="with --run: file holding your API token of `otel-profiler users token` (-: standard "
                        "input; default: OTEL_PROFILER_UPLOAD_TOKEN, else standard input)")
    p.set_defaults(func=run)


def _error(text: str, code: int = 1) -> int:
    print_error(text)
    return code


def socket_paths(port: int) -> list[str]:
    """This user's trigger sockets for ``port``: the one in this process's temporary directory,
    then any other bound one ``/proc/net/unix`` lists (a job started with another ``TMPDIR``);
    only those in a folder of this user with mode 0700."""
    name = socket_name(port)
    paths = [os.path.join(trigger_folder(), name)]
    try:
        with open("/proc/net/unix") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        lines = []
    folder_name = os.path.basename(trigger_folder())
    for line in lines:
        fields = line.split(None, 7)
        path = fields[7] if len(fields) == 8 else ""
        if (os.path.basename(path) == name and os.path.basename(os.path.dirname(path)) == folder_name
                and path not in paths):
            paths.append(path)
    return [p for p in paths if is_private_folder(os.path.dirname(p)) and _is_socket(p)]


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def _handles_sigusr2(pid: int) -> bool | None:
    """Whether process ``pid`` catches SIGUSR2 (``SigCgt`` in /proc/PID/status); None: unknown."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signal.SIGUSR2 - 1) & 1)
    except (OSError, ValueError):
        return None
    return None


def _process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f" ({terminal_safe(f.read().strip())})"  # a name any local user can choose
    except OSError:
        return ""


def run(args: argparse.Namespace) -> int:
    if args.pid is not None:
        return _signal(args.pid)
    if args.run is not None:
        from cuda_tracer.profile import TraceError

        from .trigger_run import run_capture
        from .upload import read_token

        try:
            token = read_token(args.token_file)
        except TraceError as exc:
            return _error(str(exc), 2)
        return run_capture(args, token)
    port = args.port
    if not 0 < port < 65536:
        return _error(f"--port {port}: not a port number (1-65535)", 2)
    sent, failure = [], ""
    for path in socket_paths(port):
        try:
            send(path)
            sent.append(path)
        except (ConnectionRefusedError, FileNotFoundError):
            continue  # left by a job that ended
        except OSError as exc:
            failure = f"cannot send to the trigger socket {path}: {exc.strerror or exc}"
    if not sent:
        return _error(failure or f"nothing listens on trigger port {port}: no job of this user whose "
                      "OTEL_PROFILER_TRIGGER_PORT (or run --trigger-port) plus local rank is this port "
                      "runs on this host; nothing was sent")
    print(f"otel-profiler: sent a capture request (one datagram) to trigger port {port} "
          f"({terminal_safe(', '.join(sent))}); the job captures its next OTEL_PROFILER_WINDOW_STEPS "
          f"steps (5 by default; it takes one request per {MIN_INTERVAL_S:g} s)", file=sys.stderr)
    return 0


def _signal(pid: int) -> int:
    if pid <= 0:
        return _error(f"--pid {pid}: not a process id", 2)
    if not os.path.exists(f"/proc/{pid}") and os.path.isdir("/proc"):
        return _error(f"no process {pid}; nothing was sent")
    if _handles_sigusr2(pid) is False:
        return _error(f"process {pid}{_process_name(pid)} does not handle SIGUSR2, so it is not a "
                      "job profiled by otel-profiler (SIGUSR2 would end it); nothing was sent")
    try:
        os.kill(pid, signal.SIGUSR2)
    except ProcessLookupError:
        return _error(f"no process {pid}; nothing was sent")
    except (PermissionError, OverflowError) as exc:
        return _error(f"cannot signal process {pid}: {getattr(exc, 'strerror', None) or exc}")
    print(f"otel-profiler: sent SIGUSR2 to process {pid}{_process_name(pid)}; it captures its next "
          "OTEL_PROFILER_WINDOW_STEPS steps (5 by default)", file=sys.stderr)
    return 0
