"""Bad input to the CLI: one clear line naming the input, exit code 2, never a traceback."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from conftest import trace

GOOD = trace("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_profiler", *args], capture_output=True,
                          text=True, timeout=120)


def bad_inputs(tmp_path):
    truncated = tmp_path / "truncated.json.gz"
    truncated.write_bytes(GOOD.read_bytes()[:5000])
    invalid = tmp_path / "invalid.json"
    invalid.write_text('{"traceEvents": [{"ph": "X", "name": ')
    not_trace = tmp_path / "config.json"
    not_trace.write_text(json.dumps({"learning_rate": 0.1}))
    number = tmp_path / "number.json"
    number.write_text("42")
    empty = tmp_path / "empty.json"
    empty.write_text("")
    wrong_type = tmp_path / "wrong_type.json.gz"
    wrong_type.write_bytes(gzip.compress(b'{"traceEvents": {"ph": "X"}}'))
    return {
        "truncated gzip": (truncated, "corrupt or truncated gzip"),
        "invalid JSON": (invalid, "invalid JSON"),
        "JSON that is not a trace": (not_trace, "no 'traceEvents'"),
        "a bare number": (number, "not a Chrome/Kineto trace"),
        "empty file": (empty, "empty file"),
        "traceEvents of the wrong type": (wrong_type, "not a Chrome/Kineto trace"),
        "missing path": (tmp_path / "nope.json", "no such file"),
        "folder without traces": (tmp_path / "emptydir", "no trace files"),
    }


@pytest.mark.parametrize("case", ["truncated gzip", "invalid JSON", "JSON that is not a trace",
                                  "a bare number", "empty file", "traceEvents of the wrong type",
                                  "missing path", "folder without traces"])
@pytest.mark.parametrize("command", ["summary"])
def test_bad_input_is_one_clear_line_and_exit_2(tmp_path, case, command):
    (tmp_path / "emptydir").mkdir()
    path, expected = bad_inputs(tmp_path)[case]
    result = run_cli(command, str(path))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0] and expected in lines[0]


def test_cpu_only_trace_gives_an_honest_no_gpu_summary():
    result = run_cli("summary", "--format", "json",
                     str(trace("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")))
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["devices"] == {} and summary["kernels"]["count"] == 0
    assert any("no GPU activity" in n for n in summary["notes"])


@pytest.mark.parametrize("fmt", ["table", "csv"])
def test_table_and_csv_render(fmt):
    result = run_cli("summary", "--format", fmt, str(GOOD))
    assert result.returncode == 0, result.stderr
    assert "ampere_sgemm_32x32_sliced1x4_tn" in result.stdout
