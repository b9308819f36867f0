"""``cuda_tracer.tensorflow.xplane`` without TensorFlow: the XSpace time-base reader on hand-built protobuf
bytes, the mapping of a trace viewer ``Trace`` (host, GPU streams, derived lines) to an EventBatch,
and the CLI's answer to unusable ``.xplane.pb`` input. The real TensorFlow path is in
``test_tensorflow_keras.py``.
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace as NS

import numpy as np
import pytest

from cuda_tracer.model.correlate import correlate
from cuda_tracer.model.events import MISSING, Kind, MemcpyKind
from cuda_tracer.tensorflow.xplane import profile_start_ns, trace_to_batch, xplane_files

START_NS = 1_796_006_295_843_142_796


# ---------------------------------------------------------------------------- protobuf writing
def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def plane(name: str, stats: dict[str, int] | None = None, filler: bytes = b"") -> bytes:
    body = field(1, 7) + field(2, name) + (field(3, filler) if filler else b"")
    for i, (stat, value) in enumerate((stats or {}).items(), start=1):
        body += field(5, field(1, i) + field(2, field(1, i) + field(2, stat)))  # map entry
        body += field(6, field(1, i) + field(3, value))
    return field(1, body)


def test_profile_start_is_read_from_the_task_environment_plane():
    host = plane("/host:CPU", filler=b"\x08\x01" * 5000)  # a line to skip by its length
    env = plane("Task Environment", {"profile_stop_time": START_NS + 10**9, "profile_start_time": START_NS})
    assert profile_start_ns(host + env) == START_NS
    assert profile_start_ns(env + host) == START_NS
    assert profile_start_ns(host) is None  # an XSpace without it: times stay relative


@pytest.mark.parametrize("data", [b"\x0a\xff\x01abc", b"\x0f", b"\x0a\x80"])
def test_bytes_that_are_not_protobuf_are_refused(data):
    with pytest.raises((ValueError, IndexError)):
        profile_start_ns(data)


# ---------------------------------------------------------------------------- mapping
def ev(device: int, resource: int, name: str, ts_ps: int, dur_ps: int, **args: str) -> NS:
    return NS(device_id=device, resource_id=resource, name=name, timestamp_ps=ts_ps,
              duration_ps=dur_ps, args=args)


def gpu_trace() -> NS:
    host = NS(name="/host:CPU", resources={11: NS(name="python"), 12: NS(name="tf_Compute/1")})
    gpu = NS(name="/device:GPU:1", resources={
        20: NS(name="Stream #7(Kernels)"), 21: NS(name="Stream #13(MemcpyH2D)"),
        22: NS(name="TensorFlow Ops"), 23: NS(name="Steps")})
    tpu = NS(name="/device:TPU:0", resources={30: NS(name="XLA Ops")})
    events = [
        ev(1, 11, "train", 1_000_000, 9_000_000_000, step_num="4", _r="1", group_id="4"),
        ev(1, 12, "MatMul", 2_000_000, 1_500_000, long_name="sequential/dense/MatMul:MatMul"),
        ev(1, 11, "cuLaunchKernel", 3_000_000, 2_000_000, correlation_id="77"),
        ev(1, 11, "cudaMemcpyAsync", 3_500_000, 1_000_000, correlation_id="78"),
        ev(1, 11, "EagerExecute", 4_000_000, 0),
        ev(2, 20, "volta_sgemm_128x64_nn", 9_000_000, 4_000_123, correlation_id="77"),
        ev(2, 21, "MemcpyH2D", 8_000_000, 500_000, correlation_id="78"),
        ev(2, 20, "Memset", 12_000_000, 10_000),
        ev(2, 22, "sequential/dense/MatMul", 9_000_000, 4_000_123),
        ev(2, 23, "4", 1_000_000, 9_000_000_000),
        ev(3, 30, "fusion.1", 1_000_000, 1_000_000),
    ]
    return NS(devices={1: host, 2: gpu, 3: tpu}, trace_events=events)


def test_trace_viewer_events_map_to_kinds_devices_streams_and_exact_times():
    batch, processes, threads = trace_to_batch(gpu_trace(), START_NS)
    assert processes["2"] == "/device:GPU:1" and threads["1/12"] == "tf_Compute/1"
    assert len(batch) == 9  # the derived Steps line and the TPU plane are dropped
    assert np.all(np.diff(batch.start_ns) >= 0)
    by_name = {n: i for i, n in enumerate(batch.names())}
    kind = {n: Kind(int(batch.kind[i])) for n, i in by_name.items()}
    assert kind == {"ProfilerStep#4": Kind.STEP, "MatMul": Kind.CPU_OP, "cuLaunchKernel": Kind.DRIVER,
                    "cudaMemcpyAsync": Kind.RUNTIME, "EagerExecute": Kind.INSTANT,
                    "volta_sgemm_128x64_nn": Kind.KERNEL, "MemcpyH2D": Kind.MEMCPY, "Memset": Kind.MEMSET,
                    "sequential/dense/MatMul": Kind.GPU_USER_ANNOTATION}
    k = by_name["volta_sgemm_128x64_nn"]
    assert batch.start_ns[k] == START_NS + 9_000 and batch.end_ns[k] == START_NS + 9_000 + 4_000
    assert (batch.device[k], batch.stream[k], batch.correlation[k]) == (1, 7, 77)
    copy = by_name["MemcpyH2D"]
    assert batch.subkind[copy] == MemcpyKind.HtoD and batch.stream[copy] == 13
    step = by_name["ProfilerStep#4"]
    assert batch.extra("step") == {step: 4} and batch.device[step] == MISSING
    assert batch.extra("long_name") == {by_name["MatMul"]: "sequential/dense/MatMul:MatMul"}


def test_launch_calls_link_to_their_gpu_ops():
    batch, _, _ = trace_to_batch(gpu_trace(), START_NS)
    corr = correlate(batch)
    names = batch.names()
    linked = {names[g]: names[l] for g, l in zip(corr.gpu_rows.tolist(), corr.launch_of_gpu.tolist()) if l >= 0}
    assert linked == {"volta_sgemm_128x64_nn": "cuLaunchKernel", "MemcpyH2D": "cudaMemcpyAsync"}


# ---------------------------------------------------------------------------- files and errors
def test_a_logdir_means_its_newest_run(tmp_path):
    for run in ("2026_01_01_10_00_00", "2026_01_02_09_00_00"):
        folder = tmp_path / "plugins" / "profile" / run
        folder.mkdir(parents=True)
        (folder / "host.xplane.pb").write_bytes(b"")
    (tmp_path / "plugins" / "profile" / "2026_01_03_00_00_00").mkdir()  # an empty run is no run
    assert xplane_files(str(tmp_path)) == [str(tmp_path / "plugins/profile/2026_01_02_09_00_00/host.xplane.pb")]
    run = tmp_path / "plugins" / "profile" / "2026_01_01_10_00_00"
    assert xplane_files(str(run)) == [str(run / "host.xplane.pb")]
    assert xplane_files(str(tmp_path / "plugins")) == []


@pytest.mark.parametrize("content", [b"\x0a\xff\x01abc", plane("Task Environment", {"profile_start_time": 1})])
def test_unusable_xplane_input_is_one_line_and_exit_2(tmp_path, content):
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(content)
    out = subprocess.run([sys.executable, "-m", "otel_profiler", "summary", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "Traceback" not in out.stderr, out.stderr
