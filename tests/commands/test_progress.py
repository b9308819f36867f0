"""Progress bars on stderr: shown for reading (and exporting) on a terminal, never elsewhere."""

from __future__ import annotations

import argparse
import fcntl
import io
import os
import pty
import select
import struct
import sys
import termios

from conftest import trace
from otel_profiler import commands

TRACE = trace("tracelens/b200/eager_trace.json.gz")


CLI_ON_A_TERMINAL = """
import sys
from otel_profiler import cli, commands
commands.PROGRESS_DELAY_S = 0  # the bar of a read however short
sys.exit(cli.main(sys.argv[1:]))
"""


def run_on_a_terminal(*args: str) -> tuple[int, str, str]:
    """Exit code, stdout and what a terminal on stderr shows, of one ``otel-profiler`` run."""
    import subprocess
    import tempfile
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # 24 x 120
    # stdout to a file: a pipe nobody reads while the terminal is read would fill and block the job
    with tempfile.TemporaryFile("w+") as stdout:
        try:
            proc = subprocess.Popen([sys.executable, "-c", CLI_ON_A_TERMINAL, *args], stderr=slave,
                                    stdout=stdout, text=True)
            os.close(slave)
            shown = b""
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:  # read until the process closes its end
                try:
                    ready = select.select([master], [], [], 1.0)[0]
                    if ready:
                        data = os.read(master, 65536)
                        if not data:
                            break
                        shown += data
                    elif proc.poll() is not None:
                        break
                except OSError:  # EIO: the terminal's other end is closed
                    break
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 1))
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        finally:
            os.close(master)
        stdout.seek(0)
        out = stdout.read()
    return proc.returncode, out, shown.decode(errors="replace")


def test_reading_and_exporting_show_a_progress_bar_on_a_terminal(tmp_path):
    code, out, shown = run_on_a_terminal("summary", "--format", "json", str(TRACE))
    assert code == 0 and '"kernels"' in out
    from tqdm import tqdm

    size = tqdm.format_sizeof(TRACE.stat().st_size, divisor=1024)
    assert "reading: 100%" in shown and f"{size}/{size}" in shown, shown
    spans = tmp_path / "spans.jsonl"
    code, _, shown = run_on_a_terminal("export", str(TRACE), "--output", str(spans))
    assert code == 0 and spans.stat().st_size > 0
    assert "exporting: 100%" in shown and " events" in shown, shown


def test_no_progress_bar_when_stderr_is_not_a_terminal(monkeypatch):
    captured = io.StringIO()
    monkeypatch.setattr(sys, "stderr", captured)
    monkeypatch.setattr(commands, "PROGRESS_DELAY_S", 0)
    profile, _ = commands.load_inputs(argparse.Namespace(inputs=[str(TRACE)], jobs=1,
                                                         max_json_mb=None, separate=False))
    assert len(profile.ranks) == 1 and captured.getvalue() == ""
