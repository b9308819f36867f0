"""Forked children of a profiled process die of SIGTERM as they would unprofiled.

The session's SIGTERM handler is Python-level; a child inherits it, and a SIGTERM that reaches a new
child before it runs (``Pool.terminate`` right after the pool started) was discarded by CPython's
after-fork reset of pending signals, so the worker never died (an intermittent hang of
``tests/export/test_faults_process.py``'s threads-and-pool job). The fork hooks block SIGTERM across the
fork and give the child the default action before unblocking it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, os, signal, sys, time
from otel_profiler import api
from otel_profiler.live import session
with api.Profiler(profile_dir=sys.argv[1], signal=False, summary_at_exit=False, steps="off"):
    live = session.current()
    assert signal.getsignal(signal.SIGTERM) == live.hygiene.on_sigterm
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        child = {"handler_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
                 "blocked": signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, set())}
        os.write(write, json.dumps(child).encode())
        time.sleep(30)  # the parent's SIGTERM must end this at once
        os._exit(0)
    child = json.loads(os.read(read, 1000))
    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    child["died_of"] = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    child["parent_handler_ours"] = signal.getsignal(signal.SIGTERM) == live.hygiene.on_sigterm
    child["parent_blocked"] = signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    print(json.dumps(child))
"""


def test_forked_child_gets_the_default_sigterm_and_an_unblocked_mask(tmp_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"handler_default": True, "blocked": False, "died_of": 15,
                      "parent_handler_ours": True, "parent_blocked": False}, result
