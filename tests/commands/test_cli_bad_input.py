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


# ----------------------------------------------------------------- inputs that hang or eat memory
PEAK_OF_CHILD = """
import resource, subprocess, sys
result = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=300)
sys.stderr.write(result.stderr)
print(result.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
"""


def run_cli_measured(*args: str) -> tuple[int, int, str]:
    """Exit code, peak resident memory (MiB) and stderr of one ``otel-profiler`` process."""
    out = subprocess.run([sys.executable, "-c", PEAK_OF_CHILD, sys.executable, "-m", "otel_profiler",
                          *args], capture_output=True, text=True, timeout=360)
    code, peak = map(int, out.stdout.split())
    return code, peak, out.stderr


def assert_one_line(result_stderr: str, path, expected: str) -> None:
    assert "Traceback" not in result_stderr
    lines = result_stderr.strip().splitlines()
    assert len(lines) == 1, result_stderr
    assert str(path) in lines[0] and expected in lines[0], lines[0]


def test_a_fifo_is_refused_without_blocking(tmp_path):
    import os

    fifo = tmp_path / "rank-0.json"
    os.mkfifo(fifo)  # nobody ever writes: a plain open() would wait forever
    result = run_cli("summary", str(fifo))
    assert result.returncode == 2
    assert_one_line(result.stderr, fifo, "is a FIFO (named pipe), not a regular file")


def test_dev_zero_is_refused_at_once():
    code, peak_mib, stderr = run_cli_measured("summary", "/dev/zero")
    assert code == 2 and peak_mib < 300, (peak_mib, stderr)
    assert_one_line(stderr, "/dev/zero", "is a character device, not a regular file")


def test_a_folder_where_a_trace_file_is_expected(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "rank-0.json.gz").write_bytes(GOOD.read_bytes())
    (folder / "rank-1.json").mkdir()  # named like a trace, but a folder
    result = run_cli("summary", str(folder))
    assert result.returncode == 2  # rank 0 is summarized, the folder named
    assert_one_line(result.stderr, folder / "rank-1.json", "is a directory, not a trace file")
    assert "ampere_sgemm_32x32_sliced1x4_tn" in result.stdout


def gzip_bomb(path, gib: float = 2.0) -> None:
    """A ~2 MB gzip file that expands to ``gib`` GiB of JSON (spaces inside the event list), built
    from repeated gzip members, each 1 MiB of spaces (gzip readers join members)."""
    member = gzip.compress(b" " * (1 << 20), 9)
    with open(path, "wb") as f:
        f.write(gzip.compress(b'{"traceEvents": ['))
        for _ in range(int(gib * 1024)):
            f.write(member)
        f.write(gzip.compress(b"]}"))


def test_a_gzip_bomb_is_refused_in_bounded_memory(tmp_path):
    bomb = tmp_path / "bomb.json.gz"
    gzip_bomb(bomb)
    assert bomb.stat().st_size < 3 << 20
    code, peak_mib, stderr = run_cli_measured("summary", str(bomb))
    assert code == 2
    assert_one_line(stderr, bomb, "decompresses to more than")
    assert "--max-json-mb" in stderr
    assert peak_mib < 600, f"reading a gzip bomb took {peak_mib} MiB"


def test_max_json_mb_sets_the_limit_both_ways(tmp_path):
    small = tmp_path / "small.json.gz"
    small.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * (3 << 20) + b"]}"))
    refused = run_cli("summary", "--max-json-mb", "2", str(small))
    assert refused.returncode == 2
    assert_one_line(refused.stderr, small, "more than 2 MiB of JSON (the --max-json-mb limit)")
    # a real trace read under an explicit limit above its size
    assert run_cli("summary", "--max-json-mb", "1", str(GOOD)).returncode == 0


# ----------------------------------------------------------------- corrupt profile folders
def write_profile_folder(folder, ranks: int = 4):
    import numpy as np

    from cuda_tracer.profile import RankProfile, write_rank
    from cuda_tracer.trace_json.files import read_trace

    source = read_trace(str(GOOD))
    for r in range(ranks):
        source.meta["rank"] = r
        write_rank(str(folder), RankProfile(dict(source.meta), source.batch.take(np.arange(300))))


@pytest.mark.parametrize("content, expected", [
    ("[1, 2]", "profile metadata is not a JSON object (it is a list)"),
    ("null", "profile metadata is not a JSON object (it is null)"),
    ('{"rank": "zero"}', "field 'rank' should be an integer, not a string"),
    ('{"rank": [0]}', "field 'rank' should be an integer, not a list"),
    ('{"rank": true}', "field 'rank' should be an integer, not a boolean"),
    ('{"rank": 5}', "says rank 5, the file name rank 0"),
    ('{"rank": 0, "resource": [1]}', "field 'resource' should be an object, not a list"),
    ('{"rank": 0, "device_properties": "A100"}', "field 'device_properties' should be a list"),
    ('{"rank": 0, "world_size": "8"}', "field 'world_size' should be an integer, not a string"),
    ('{"rank": 0, ', "unreadable profile metadata"),
    ("", "unreadable profile metadata"),
])
def test_corrupt_rank_metadata_is_one_line_and_exit_2(tmp_path, content, expected):
    folder = tmp_path / "prof"
    write_profile_folder(folder, ranks=1)
    (folder / "rank-0.json").write_text(content)
    result = run_cli("summary", str(folder))
    assert result.returncode == 2 and result.stdout == ""
    assert_one_line(result.stderr, folder / "rank-0.json", expected)


def test_a_folder_with_bad_ranks_reports_the_good_ones_and_names_the_bad(tmp_path):
    import os

    folder = tmp_path / "prof"
    write_profile_folder(folder, ranks=5)
    (folder / "rank-0.json").write_text("[1, 2]")
    (folder / "rank-1.json").write_text('{"rank": "one"}')
    events = folder / "rank-2.00000.events"
    events.write_bytes(events.read_bytes()[:700])  # truncated
    (folder / "rank-3.json").unlink()
    os.mkfifo(folder / "rank-3.json")  # a FIFO where the metadata belongs
    result = run_cli("summary", "--format", "json", str(folder))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 4, result.stderr
    for line, (name, problem) in zip(lines, [
            ("rank-0.json", "not a JSON object"), ("rank-1.json", "'rank' should be an integer"),
            ("rank-2.00000.events", "not a readable event batch"), ("rank-3.json", "FIFO")]):
        assert str(folder / name) in line and problem in line and "left out" in line, line
    summary = json.loads(result.stdout)
    assert [m["rank"] for m in summary["ranks_meta"]] == [4]
    assert sum(summary["events"].values()) == 300  # rank 4's events, all of them


def test_a_folder_with_no_good_rank_is_exit_2_with_every_file_named(tmp_path):
    folder = tmp_path / "prof"
    write_profile_folder(folder, ranks=2)
    (folder / "rank-0.json").write_text("null")
    (folder / "rank-1.00000.events").write_bytes(b"PK\x03\x04 not a zip")
    result = run_cli("summary", str(folder))
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in result.stderr
    assert str(folder / "rank-0.json") in lines[0] and str(folder / "rank-1.00000.events") in lines[1]


@pytest.mark.parametrize("command", ["report", "export"])
def test_report_and_export_also_leave_out_bad_ranks(tmp_path, command):
    folder = tmp_path / "prof"
    write_profile_folder(folder, ranks=2)
    (folder / "rank-1.json").write_text("[1, 2]")
    out = tmp_path / ("out.html" if command == "report" else "out.jsonl")
    result = run_cli(command, str(folder), "-o" if command == "report" else "--output", str(out))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert str(folder / "rank-1.json") in result.stderr and out.stat().st_size > 0


@pytest.mark.parametrize("flag, value, expected", [
    ("--span-budget", "1", "--span-budget '1': must be at least 10"),
    ("--span-budget", "0", "--span-budget '0': must be at least 10"),
    ("--span-budget", "many", "--span-budget 'many': expected an integer"),
    ("--endpoint", "ftp://collector:4317",
     "--endpoint 'ftp://collector:4317': expected an http:// or https:// URL; nothing is exported to it"),
])
def test_export_flags_are_checked_as_their_variables_are(tmp_path, flag, value, expected):
    """``--span-budget`` is bounded as ``OTEL_PROFILER_SPAN_BUDGET`` is (1 refused, 0 not ignored),
    ``--endpoint`` checked as ``OTEL_EXPORTER_OTLP_ENDPOINT`` is: one line, exit 2, nothing written."""
    out = tmp_path / "spans.jsonl"
    result = run_cli("export", str(GOOD), "--output", str(out), flag, value)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == f"otel-profiler: error: {expected}", result.stderr
    assert not out.exists()


def test_export_span_budget_flag_within_bounds_is_used(tmp_path):
    out = tmp_path / "spans.jsonl"
    result = run_cli("export", str(GOOD), "--output", str(out), "--span-budget", "10")
    assert result.returncode == 0, result.stderr
    roots = [s for line in out.read_text().splitlines() for rs in json.loads(line)["resourceSpans"]
             for ss in rs["scopeSpans"] for s in ss["spans"] if not s.get("parentSpanId")]
    budgets = {a["value"]["intValue"] for r in roots for a in r["attributes"]
               if a["key"] == "otel_profiler.span_budget"}
    assert budgets == {"10"}


def test_an_output_folder_of_runs_names_the_run_to_give(tmp_path):
    """`summary` of the output folder (what `--output-dir` was) rather than of one run in it: the
    line names a run folder to give, the newest by name, and how many there are."""
    output = tmp_path / "otel-profile"
    for run in ("20261201-090000-100", "20261205-090000-200"):
        write_profile_folder(output / run, ranks=1)
    (output / "notes").mkdir()  # a folder of something else is not offered
    result = run_cli("summary", str(output))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert_one_line(result.stderr, output, "no otel-profiler profile")
    assert f"name one, e.g. {output / '20261205-090000-200'} (2 runs in it" in result.stderr
    assert run_cli("summary", str(output / "20261205-090000-200")).returncode == 0
