"""Hostile inputs are bounded in time as in memory: a huge kernel name, a gzip bomb of real-looking
events, a file of junk events, a byte-order mark, a symlink loop. Each is read by the real command
line in a child process, whose peak memory is measured."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from cuda_tracer.model.events import Kind
from cuda_tracer.trace_json import files as trace_files
from cuda_tracer.trace_json.columns import MAX_STRING_CHARS
from cuda_tracer.trace_json.files import read_trace
from otel_profiler.analysis.activity import kernel_precision
from otel_profiler.analysis.breakdown import COMMUNICATION, COMPUTE, kernel_class
from test_cli_bad_input import GOOD, assert_one_line, run_cli, run_cli_measured


def kernel(name: str, ts: int) -> str:
    return json.dumps({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 5,
                       "args": {"device": 0, "stream": 7, "correlation": ts}})


# ----------------------------------------------------------------------------- a huge name
def huge_name_trace(path, name_bytes: int) -> None:
    """A plain JSON trace of 1,000 ordinary kernels and one whose name has ``name_bytes`` bytes."""
    with open(path, "w") as f:
        f.write('{"traceEvents": [' + ",".join(kernel("ampere_sgemm_32x32", 1000 + 10 * i) for i in range(1000)))
        head, tail = kernel("@NAME@", 20000).split("@NAME@")
        f.write("," + head)
        for _ in range(name_bytes >> 20):  # written in pieces: the test holds no copy of it
            f.write("xmma_tf32_" * ((1 << 20) // 10) + "x" * ((1 << 20) % 10))
        f.write(tail + "]}")


@pytest.mark.slow
@pytest.mark.parametrize("command", ["summary", "report", "export"])
def test_a_huge_kernel_name_is_cut_with_one_line_in_bounded_memory(tmp_path, command):
    path = tmp_path / "big-name.json"
    huge_name_trace(path, 64 << 20)
    out = tmp_path / ("out.html" if command == "report" else "out.jsonl")
    args = {"summary": ["--format", "json"], "report": ["-o", str(out)], "export": ["--output", str(out)]}
    code, peak_mib, stderr = run_cli_measured(command, str(path), *args[command])
    assert code == 0, stderr
    lines = [line for line in stderr.splitlines() if "otel-profiler" in line]
    assert lines == [f"otel-profiler: warning: {path}: 1 string(s) longer than 65,536 characters cut to "
                     "that length"], stderr
    assert peak_mib < 600, f"{command} of a 64 MiB name took {peak_mib} MiB"  # 3 copies of the name, once


@pytest.mark.parametrize("threaded", [False, True], ids=["whole", "in-pieces"])
def test_long_args_values_are_cut_and_counted_in_whichever_piece_they_are(tmp_path, monkeypatch, threaded):
    """Side-table values (a ``Call stack`` here) are cut piece by piece as the pieces are converted:
    read whole or in many pieces, the same values are cut and each is counted once."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": i, "dur": 1,
               "args": {"Call stack": "x" * (MAX_STRING_CHARS + 9) if i in (3, 700) else "a.py(1): f"}}
              for i in range(1000)]
    path = tmp_path / "long-args.json"
    path.write_text(json.dumps({"traceEvents": events}))
    if threaded:
        original = trace_files.read_stream
        monkeypatch.setattr(trace_files, "THREADED_TEXT", 0)
        monkeypatch.setattr(trace_files, "read_stream",
                            lambda p, chunks, emit, **_: original(p, chunks, emit, piece_bytes=16 << 10,
                                                                  first_piece_bytes=4 << 10))
    rank = read_trace(str(path))
    values = [v for v in rank.batch.extra_value if isinstance(v, str)]
    assert sorted(map(len, values))[-2:] == [MAX_STRING_CHARS] * 2 and values.count("a.py(1): f") == 998
    assert rank.meta["strings_cut"] == 2


def test_a_cut_name_keeps_its_first_characters_and_the_other_names_stay(tmp_path):
    path = tmp_path / "big-name.json"
    huge_name_trace(path, 2 << 20)
    rank = read_trace(str(path))
    names = rank.batch.strings
    cut = [s for s in names if s.startswith("xmma_tf32_")]
    assert [len(s) for s in cut] == [MAX_STRING_CHARS] and rank.meta["strings_cut"] == 1
    assert "ampere_sgemm_32x32" in names and len(rank.batch) == 1001
    assert "strings_cut" not in read_trace(str(GOOD)).meta


def test_name_matching_reads_names_as_before():
    """The precision and class rules, now plain alternations over the lowered name, still read
    the names they read before (the ``.*`` of ``xmma.*tf32`` was never needed: ``tf32`` matches)."""
    for name, precision in [("sm80_xmma_gemm_tf32f32_tf32f32_f32_nn", "tf32"), ("ampere_sgemm_128x64_nn", "fp32"),
                            ("ampere_fp16_s16816gemm_fp16_256x128", "fp16"), ("void cutlass::Kernel<bf16>", "bf16"),
                            ("IMMA_int8_kernel", "int8"), ("Memcpy HtoD", "unknown"), ("vec_I8_add", "int8"),
                            ("XMMA_anything_TF32", "tf32"), ("h884cudnn", "fp16"), ("f16_f32", "fp32")]:
        assert kernel_precision(name) == precision, name
    assert kernel_class(Kind.KERNEL, "NCCLDevKernel_AllReduce_Sum") == COMMUNICATION
    assert kernel_class(Kind.KERNEL, "rccl_allgather") == COMMUNICATION
    assert kernel_class(Kind.KERNEL, "void at::native::ncclKernel_x") == COMMUNICATION
    assert kernel_class(Kind.KERNEL, "my_nccl_like_gemm") == COMPUTE


# ----------------------------------------------------------------------------- a gzip bomb
def event_bomb(path, members: int) -> None:
    """Repeated real-looking kernel events: one gzip member of 1 MiB of events (compressed about
    250 times), written ``members`` times (gzip readers join members)."""
    one = kernel("volta_sgemm_128x64_nn", 1000)
    block = (",".join([one] * ((1 << 20) // (len(one) + 1))) + ",").encode()
    member = gzip.compress(block, 6)
    with open(path, "wb") as f:
        f.write(gzip.compress(b'{"traceEvents": ['))
        for _ in range(members):
            f.write(member)
        f.write(gzip.compress(one.encode() + b"]}"))


@pytest.mark.slow
def test_a_gzip_bomb_of_events_is_refused_before_600_mib(tmp_path):
    """As the bomb found (6.5 MB that expand to 1.9 GB): its whole-file allowance (100 times its
    8 MB) would cost over 600 MiB of parsed events; it is refused once the part read expands more
    than 100 times."""
    bomb = tmp_path / "bomb.json.gz"
    event_bomb(bomb, members=1900)  # 1.9 GiB of events
    assert bomb.stat().st_size > 6 << 20
    code, peak_mib, stderr = run_cli_measured("summary", str(bomb))
    assert code == 2
    assert_one_line(stderr, bomb, "decompresses to more than 100 times its compressed size")
    assert "--max-json-mb" in stderr
    assert peak_mib < 600, f"reading a gzip bomb of events took {peak_mib} MiB"


# ----------------------------------------------------------------------------- junk, BOM, loops
def test_a_file_of_junk_events_is_one_line_and_exit_2(tmp_path):
    junk = tmp_path / "junk.json"
    junk.write_text('{"traceEvents": [' + ",".join(['{"foo": 1}'] * 1_000_000) + "]}")
    result = run_cli("summary", str(junk))
    assert result.returncode == 2 and result.stdout == ""
    assert_one_line(result.stderr, junk, "no usable event: none of its 1,000,000 events")
    empty = tmp_path / "no-events.json"  # no events at all: an empty profile, as before
    empty.write_text('{"traceEvents": []}')
    assert run_cli("summary", str(empty)).returncode == 0


@pytest.mark.parametrize("scanner", ["native", "python"])
def test_a_byte_order_mark_is_accepted(tmp_path, scanner, monkeypatch):
    monkeypatch.setenv("OTEL_PROFILER_PURE_PYTHON", "1" if scanner == "python" else "0")
    text = gzip.decompress(GOOD.read_bytes())
    expected = read_trace(str(GOOD)).batch
    for name, data in (("bom.json", b"\xef\xbb\xbf" + text), ("bom.json.gz", gzip.compress(b"\xef\xbb\xbf" + text))):
        (tmp_path / name).write_bytes(data)
        batch = read_trace(str(tmp_path / name)).batch
        assert len(batch) == len(expected) and batch.strings == expected.strings
        assert all((batch.columns[c] == expected.columns[c]).all() for c in expected.columns), name
    result = run_cli("summary", str(tmp_path / "bom.json"))
    assert result.returncode == 0 and "ampere_sgemm_32x32_sliced1x4_tn" in result.stdout, result.stderr


def test_a_symlink_loop_is_named_as_a_loop(tmp_path):
    os.symlink(tmp_path / "b.json", tmp_path / "a.json")
    os.symlink(tmp_path / "a.json", tmp_path / "b.json")
    result = run_cli("summary", str(tmp_path / "a.json"))
    assert result.returncode == 2
    assert_one_line(result.stderr, tmp_path / "a.json", "too many levels of symbolic links (a symlink loop)")
    folder = tmp_path / "ranks"
    folder.mkdir()
    (folder / "rank-0.json.gz").write_bytes(GOOD.read_bytes())
    os.symlink(folder / "rank-1.json", folder / "rank-1.json")  # a link to itself, in a folder of ranks
    result = run_cli("summary", str(folder))
    assert result.returncode == 2 and "ampere_sgemm_32x32_sliced1x4_tn" in result.stdout
    assert_one_line(result.stderr, folder / "rank-1.json", "too many levels of symbolic links")


def test_every_repository_trace_still_reads(shared_traces):
    """No real trace has a string long enough to be cut, or is refused for having no usable event."""
    for path in sorted(shared_traces.rglob("*.json.gz")):
        rank = read_trace(str(path))
        assert "strings_cut" not in rank.meta, path
        assert len(rank.batch) or not rank.meta["skipped_events"], path



# ----------------------------------------------------------------------------- inside a job
BAD_STEPS_JOB = """
from otel_profiler import annotate, step_context
for i in range(8):
    with step_context(i if i % 2 else "abc"):  # every other step a value that is no step number
        with annotate("work"):
            sum(range(1000))
print("finished", flush=True)
"""


def test_a_bad_step_context_value_never_raises_and_every_warning_is_one_line(tmp_path):
    """``step_context("abc")`` is one warning and runs its block; the capture window of steps 1:3
    on a machine where CUPTI cannot start (no GPU driver) is one line too, not Python's two."""
    from test_config import _zero_code

    done = _zero_code(tmp_path, BAD_STEPS_JOB, OTEL_PROFILER_STEPS="1:3")
    assert done.returncode == 0 and done.stdout == "finished\n", done.stderr
    lines = done.stderr.splitlines()
    assert all(line.startswith("otel-profiler: warning: ") for line in lines), lines
    assert [line for line in lines if "step_context" in line] == [
        "otel-profiler: warning: step_context('abc'): not a step number (an integer from 0); such blocks "
        "are not recorded as steps"]
    assert list((tmp_path / "prof").glob("rank-*.events"))  # the good steps were recorded
