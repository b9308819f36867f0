"""Names printed to a terminal are made safe: a real trace whose kernel, annotation and file names
carry escape sequences (window title, clear screen, OSC 52 clipboard write, 8-bit CSI) goes through
every command, and nothing any command prints holds an ESC, a BEL or any other control character.
The names are still shown, escaped (``\\x1b``), so the tests can tell the names were printed."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys

import pytest

from conftest import trace
from cuda_tracer.terminal_lines import terminal_safe

GOOD = trace("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")
KERNEL = "ampere_sgemm_32x32_sliced1x4_tn"
TITLE = "\x1b]0;pwned\x07"  # OSC 0: set the window title
CLEAR = "\x1b[2J\x1b[H"  # clear the screen, cursor home
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x07"  # OSC 52: write the clipboard
CSI8 = "\x9b31m"  # the 8-bit CSI (C1), as some terminals read it
EVIL = f"evil{TITLE}{CLEAR}{CLIPBOARD}{CSI8}"
EVIL_FILE = f"rank-0{TITLE}{CLEAR}{CLIPBOARD}{CSI8}" + os.fsdecode(b"\x9b") + ".json"  # + a raw byte
SHOWN = "evil\\x1b]0;pwned\\x07"  # how the kernel name reads once made safe
# Anything but printable text and newlines: C0 (but \n), DEL, C1, and bytes that are no UTF-8.
UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\udc80-\udcff]")


def run_cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_profiler", *args], capture_output=True, timeout=300,
                          **kwargs)


def unsafe(data: bytes) -> list[str]:
    """The control characters (and undecodable bytes) in a command's output."""
    return UNSAFE.findall(data.decode("utf-8", "surrogateescape"))


def assert_safe(result: subprocess.CompletedProcess) -> None:
    assert not unsafe(result.stdout), unsafe(result.stdout)[:5]
    assert not unsafe(result.stderr), (unsafe(result.stderr)[:5], result.stderr[-2000:])
    assert b"Traceback" not in result.stderr, result.stderr[-3000:]


@pytest.fixture(scope="module")
def evil_trace(tmp_path_factory):
    """The A100 AlexNet trace with its busiest kernel, one annotation and one thread renamed."""
    doc = json.loads(gzip.decompress(GOOD.read_bytes()))
    renamed = 0
    for event in doc["traceEvents"]:
        if event.get("name") == KERNEL:
            event["name"] = EVIL
            renamed += 1
        elif event.get("cat") == "user_annotation" and renamed:
            event["name"] = f"step{CLEAR}{TITLE}"
        elif event.get("ph") == "M" and event.get("name") == "thread_name":
            event["args"]["name"] = f"thread{CLIPBOARD}"
    assert renamed
    path = tmp_path_factory.mktemp("evil") / EVIL_FILE
    path.write_text(json.dumps(doc))
    return path


def test_terminal_safe_escapes_every_control_character_and_nothing_else():
    assert terminal_safe(EVIL) == "evil\\x1b]0;pwned\\x07\\x1b[2J\\x1b[H\\x1b]52;c;cm0gLXJmIH4=\\x07\\x9b31m"
    assert terminal_safe("a\nb\tc\rd\x00\x7f\udc9b") == "a\\nb\\tc\\rd\\x00\\x7f\\udc9b"
    plain = "ampere_sgemm_32x32 void at::native::f<float>(…) é ✓ 名前"
    assert terminal_safe(plain) is plain  # nothing to escape: the same object


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_summary_prints_hostile_names_escaped(evil_trace, fmt):
    result = run_cli("summary", "--format", fmt, str(evil_trace))
    assert result.returncode == 0, result.stderr[-2000:]
    assert_safe(result)
    out = result.stdout.decode()
    if fmt == "json":  # the same names once parsed, control characters as \u escapes
        summary = json.loads(out)
        assert EVIL in [k["name"] for k in summary["kernels"]["by_name"]]
        assert summary["ranks_meta"][0]["file"] == str(evil_trace)
    else:
        assert SHOWN in out and "rank-0\\x1b]0;pwned\\x07" in out  # the kernel and the file, escaped


def test_report_diff_and_export_print_hostile_names_escaped(evil_trace, tmp_path):
    out_file = tmp_path / f"report{TITLE}.html"
    report = run_cli("report", str(evil_trace), "-o", str(out_file))
    assert report.returncode == 0 and out_file.stat().st_size > 0, report.stderr[-2000:]
    assert_safe(report)
    assert b"report\\x1b]0;pwned\\x07.html" in report.stderr
    diff = run_cli("diff", str(GOOD), str(evil_trace))
    assert diff.returncode == 0, diff.stderr[-2000:]
    assert_safe(diff)
    assert SHOWN.encode() in diff.stdout and b"new:  " in diff.stdout
    page = run_cli("diff", "--format", "html", str(GOOD), str(evil_trace))  # HTML on standard output
    assert page.returncode == 0, page.stderr[-2000:]
    assert_safe(page)
    data = page.stdout.decode().split('id="diff-data">')[1].split("</script>")[0]
    assert EVIL in [k["raw_name"] for k in json.loads(data)["kernels"]["by_name"]]  # the same names
    spans = tmp_path / f"spans{CLEAR}.jsonl"
    utf8_name = tmp_path / f"rank-0{TITLE}{CSI8}.json"  # (spans carry the file name: UTF-8 only here)
    utf8_name.write_bytes(evil_trace.read_bytes())
    export = run_cli("export", str(utf8_name), "--output", str(spans))
    assert export.returncode == 0 and spans.stat().st_size > 0, export.stderr[-2000:]
    assert_safe(export)
    assert b"spans\\x1b[2J" in export.stderr


def test_error_lines_name_hostile_files_escaped(tmp_path):
    empty = tmp_path / f"empty{CLIPBOARD}.json"
    empty.write_text("")
    for args in (["summary", str(empty)], ["summary", str(tmp_path / f"gone{TITLE}.json")],
                 ["replay", str(tmp_path / f"spool{CLEAR}")]):
        result = run_cli(*args)
        assert result.returncode == 2, result.stderr
        assert_safe(result)
        (line,) = result.stderr.decode().splitlines()
        assert line.startswith("otel-profiler: error: ") and ("\\x1b]" in line or "\\x1b[2J" in line), line


def test_trigger_names_a_hostile_process_escaped(tmp_path):
    """A process of any local user may name itself with escape sequences; ``trigger --pid`` names it."""
    code = ("import ctypes, sys, time; name = b'job\\x1b]0;pwned\\x07'; "
            "ctypes.CDLL(None).prctl(15, ctypes.c_char_p(name), 0, 0, 0); "  # PR_SET_NAME
            "print('ready', flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        result = run_cli("trigger", "--pid", str(proc.pid))  # it does not handle SIGUSR2: refused
        assert result.returncode == 1
        assert_safe(result)
        assert b"(job\\x1b]0;pwned\\x07)" in result.stderr, result.stderr
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)


JOB = f"""
from otel_profiler import annotate, step
for i in range(30):
    with annotate({EVIL!r}):
        sum(range(2000))
    step()
"""


def test_run_prints_the_summary_of_a_job_with_hostile_names_escaped(tmp_path):
    """``otel-profiler run`` prints the job's summary: its annotation names come escaped, and the
    warning of a bad ``step_context`` value too."""
    job = tmp_path / "job.py"
    job.write_text(JOB + f"from otel_profiler import step_context\nwith step_context({TITLE!r}):\n    pass\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(OTEL_METRICS_EXPORTER="none", OTEL_PROFILER_SIGNAL="false")
    result = run_cli("run", "--output-dir", str(tmp_path / "prof"), "--", sys.executable, str(job), env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_safe(result)
    assert SHOWN.encode() in result.stderr, result.stderr[-3000:]  # the annotation table
    assert b"step_context('\\x1b]0;pwned\\x07')" in result.stderr  # the warning, one line, escaped
