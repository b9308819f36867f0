"""TensorFlow (and JAX) profiler output, ``*.xplane.pb``, read into an ``EventBatch``.

``tf.profiler.experimental.start(logdir)`` / ``stop()`` (and ``jax.profiler.trace``) write one XSpace
protobuf per host: ``logdir/plugins/profile/<run>/<host>.xplane.pb``. XSpace is an internal,
changing format, so the events are read through the converter that TensorBoard's profile plugin
maintains, ``xprof`` (extra ``tensorflow``): its ``trace_viewer`` tool turns an XSpace into the
trace viewer's ``Trace`` protobuf (``xprof.protobuf.trace_events_old_pb2``: devices → resources,
events with integer picosecond times, stats as string arguments), and we map that.

Times: TensorFlow normalizes every XSpace timestamp to the start of the profiling session and keeps
that start, in Unix-epoch ns, as the ``profile_start_time`` stat of the ``Task Environment`` plane,
which the converter does not pass on. :func:`profile_start_ns` reads just that stat from the raw
protobuf (wire format, skipping the event planes by length), so event times are
``profile_start_time + timestamp_ps / 1000``: exact to the ns, comparable with every other source.

Mapping (trace viewer devices are XPlanes, resources are XLines):

- ``/host:CPU``: an event with a ``step_num`` argument is a ``STEP`` (TensorFlow's step marker,
  ``tf.profiler.experimental.Trace("train", step_num=n, _r=1)``, which the Keras callback emits);
  CUDA/HIP API calls (``cu*``, ``cuda*``, ``hip*``) are ``DRIVER``/``RUNTIME`` with their
  ``correlation_id``; other zero-length events are ``INSTANT``; every other host event (TF ops with
  their full name in ``long_name``, executor and tf.data ranges) is a ``CPU_OP``.
- ``/device:GPU:N`` ``Stream #k`` lines: ``Memcpy*`` → ``MEMCPY`` (direction from the name),
  ``Memset*`` → ``MEMSET``, the rest ``KERNEL``, on device N, stream k, with ``correlation_id``.
  The lines TensorFlow derives from them (``TensorFlow Ops``, ``XLA Ops``, name scopes, modules)
  become ``GPU_USER_ANNOTATION``; its derived ``Steps`` line is dropped (steps come from the host).
  The GPU mapping follows xprof's line names; it has not yet been checked on a GPU capture.
"""

from __future__ import annotations

import glob
import os
import re
import tempfile
from typing import Any, Iterator

import numpy as np

from cuda_tracer.model.events import COLUMNS, MISSING, EventBatch, Kind, MemcpyKind
from cuda_tracer.model.string_table import StringTable
from cuda_tracer.profile import RankProfile, TraceError
from cuda_tracer.trace_input import open_regular

XPLANE_SUFFIX = ".xplane.pb"
_GPU_DEVICE = re.compile(r"^/device:GPU:(\d+)$")
_STREAM = re.compile(r"^Stream #(\d+)")
_DERIVED_GPU_LINES = ("TensorFlow Ops", "TensorFlow Name Scope", "XLA Ops", "XLA Modules",
                      "XLA TraceMe", "Framework Ops", "Framework Name Scope")
_API_CALL = re.compile(r"^(cu[A-Z]|cuda[A-Z]|hip[A-Z])")
_COPY_DIRECTION = {"H2D": MemcpyKind.HtoD, "D2H": MemcpyKind.DtoH, "D2D": MemcpyKind.DtoD,
                   "P2P": MemcpyKind.PtoP, "H2H": MemcpyKind.HtoH}
_HOST, _STREAM_TRACK, _GPU_ANNOTATION, _SKIP = range(4)


# ---------------------------------------------------------------------------- finding files
def is_xplane_file(path: str) -> bool:
    return path.endswith(XPLANE_SUFFIX) and os.path.isfile(path)


def xplane_files(folder: str) -> list[str]:
    """The ``.xplane.pb`` files of a TF profile run folder, or of the newest run of a TF logdir.

    A logdir holds one sub-folder per capture under ``plugins/profile/`` (named by start time, so
    the newest sorts last); point at a run folder to read an older one. Empty when neither.
    """
    here = sorted(glob.glob(os.path.join(folder, "*" + XPLANE_SUFFIX)))
    if here:
        return here
    runs = sorted(d for d in glob.glob(os.path.join(folder, "plugins", "profile", "*"))
                  if glob.glob(os.path.join(d, "*" + XPLANE_SUFFIX)))
    return sorted(glob.glob(os.path.join(runs[-1], "*" + XPLANE_SUFFIX))) if runs else []


# ---------------------------------------------------------------------------- reading
def read_xplane(path: str) -> RankProfile:
    """One host's XSpace as one rank. Raises ``TraceError`` for unusable input."""
    try:
        with open_regular(path) as f:  # a FIFO or a device is refused, never blocks
            data = f.read()
    except OSError as exc:
        raise TraceError(path, f"unreadable ({exc.strerror or exc})") from None
    try:
        start_ns = profile_start_ns(data)
    except (IndexError, ValueError):
        raise TraceError(path, "not an XSpace protobuf (TensorFlow profiler .xplane.pb)") from None
    trace = convert(path)
    batch, processes, threads = trace_to_batch(trace, 0 if start_ns is None else start_ns)
    host = os.path.basename(path)[: -len(XPLANE_SUFFIX)]
    meta = {
        "source": os.path.basename(path),
        "format": "xplane",
        "rank": MISSING,
        "host_name": host,
        "processes": processes,
        "threads": threads,
        "profile_start_ns": start_ns,
        "device_properties": [],
    }
    return RankProfile(meta=meta, batch=batch)


def convert(path: str) -> Any:
    """xprof's ``trace_viewer`` conversion of one XSpace file: a ``trace_events_old_pb2.Trace``."""
    try:
        from xprof.convert import _pywrap_profiler_plugin as plugin
        from xprof.protobuf import trace_events_old_pb2
    except ImportError as exc:
        raise TraceError(path, f"reading TensorFlow profiles needs xprof ({exc}); "
                               "pip install -e '.[tensorflow]' in the otel-profiler clone") from None
    with _quiet_stderr() as log:
        raw, ok = plugin.xspace_to_tools_data([path], "trace_viewer", {"use_saved_result": False})
    if not ok:
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        raise TraceError(path, f"xprof could not convert it: {(text or log())[-300:].strip()}")
    return trace_events_old_pb2.Trace.FromString(raw)


class _quiet_stderr:
    """Sends file descriptor 2 to a temporary file while xprof's C++ code logs its progress."""

    def __enter__(self):
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        return self.text

    def text(self) -> str:
        self._file.seek(0)
        return self._file.read().decode(errors="replace")

    def __exit__(self, *exc: Any) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)


# ---------------------------------------------------------------------------- the time base
def profile_start_ns(data: bytes) -> int | None:
    """The ``profile_start_time`` stat (Unix-epoch ns) of the ``Task Environment`` plane, or None.

    Walks the XSpace wire format (xplane.proto: XSpace.planes = 1; XPlane.name = 2,
    stat_metadata = 5 (map<int64, XStatMetadata{id = 1, name = 2}>), stats = 6
    (XStat{metadata_id = 1, uint64_value = 3, int64_value = 4})), skipping everything else by length.
    Raises ``ValueError`` when ``data`` is not a protobuf message.
    """
    for field, plane in _fields(data):
        if field != 1 or not isinstance(plane, memoryview):
            continue
        fields = list(_fields(plane))
        name = next((bytes(v).decode(errors="replace") for f, v in fields if f == 2), "")
        if name != "Task Environment":
            continue
        stat_names = {}
        for f, entry in fields:
            if f == 5:
                kv = dict(_fields(entry))
                meta = dict(_fields(kv.get(2, memoryview(b""))))
                stat_names[kv.get(1, meta.get(1))] = bytes(meta.get(2, b"")).decode(errors="replace")
        for f, stat in fields:
            if f == 6:
                values = dict(_fields(stat))
                if stat_names.get(values.get(1)) == "profile_start_time":
                    return int(values.get(3, values.get(4, 0)))
    return None


def _fields(data: memoryview | bytes) -> Iterator[tuple[int, Any]]:
    """``(field number, value)`` of a protobuf message: varints as int, length-delimited as memoryview."""
    buf = memoryview(data)
    pos, end = 0, len(buf)
    value: int | memoryview
    while pos < end:
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > end:
                raise ValueError("truncated field")
            value, pos = buf[pos:pos + size], pos + size
        elif wire == 1:
            value, pos = int.from_bytes(buf[pos:pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(buf[pos:pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield field, value


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


# ---------------------------------------------------------------------------- mapping
def trace_to_batch(trace: Any, start_ns: int) -> tuple[EventBatch, dict[str, str], dict[str, str]]:
    """Map a trace viewer ``Trace`` to a batch; also returns process and thread names by id."""
    tracks: dict[tuple[int, int], tuple[int, int, int]] = {}  # -> (class, device, stream)
    processes, threads = {}, {}
    for did, device in trace.devices.items():
        processes[str(did)] = device.name
        gpu = _GPU_DEVICE.match(device.name)
        for rid, resource in device.resources.items():
            threads[f"{did}/{rid}"] = resource.name
            tracks[(did, rid)] = _track(device.name, gpu, resource.name)

    table = StringTable()
    rows: dict[str, list[int]] = {c: [] for c in ("kind", "subkind", "name", "start_ns", "end_ns", "pid",
                                                  "tid", "device", "stream", "correlation")}
    extra_rows, extra_keys, extra_values = [], [], []
    for e in trace.trace_events:
        cls, device, stream = tracks.get((e.device_id, e.resource_id), (_HOST, MISSING, MISSING))
        if cls == _SKIP:
            continue
        args = e.args
        kind, subkind, name = _classify(cls, e.name, e.duration_ps, args)
        row = len(rows["kind"])
        if kind == Kind.STEP:
            extra_rows.append(row)
            extra_keys.append("step")
            extra_values.append(int(args["step_num"]))
        elif "long_name" in args:
            extra_rows.append(row)
            extra_keys.append("long_name")
            extra_values.append(args["long_name"])
        start = start_ns + e.timestamp_ps // 1000
        for col, value in (("kind", kind), ("subkind", subkind), ("name", table.intern(name)),
                           ("start_ns", start), ("end_ns", start + e.duration_ps // 1000),
                           ("pid", e.device_id), ("tid", e.resource_id), ("device", device),
                           ("stream", stream), ("correlation", _int(args.get("correlation_id")))):
            rows[col].append(value)
    n = len(rows["kind"])
    columns = {c: np.full(n, MISSING if dt.kind == "i" else 0, dt) for c, dt in COLUMNS.items()}
    for col, values in rows.items():
        columns[col] = np.asarray(values, COLUMNS[col]) if n else columns[col]
    key_ids = [table.intern(k) for k in extra_keys]
    batch = EventBatch(columns, table.strings, np.asarray(extra_rows, np.int64),
                       np.asarray(key_ids, np.int32), extra_values)
    return batch.sorted_by_start(), processes, threads


def _track(device_name: str, gpu: re.Match | None, line: str) -> tuple[int, int, int]:
    if gpu is None:
        return (_HOST, MISSING, MISSING) if device_name.startswith("/host:") else (_SKIP, MISSING, MISSING)
    stream = _STREAM.match(line)
    if stream:
        return _STREAM_TRACK, int(gpu.group(1)), int(stream.group(1))
    if line in _DERIVED_GPU_LINES:
        return _GPU_ANNOTATION, int(gpu.group(1)), MISSING
    return _SKIP, MISSING, MISSING


def _classify(cls: int, name: str, duration_ps: int, args: Any) -> tuple[int, int, str]:
    """``(kind, subkind, name)`` of one event on a track of class ``cls``."""
    if cls == _STREAM_TRACK:
        if name.startswith("Memcpy"):
            direction = next((k for tag, k in _COPY_DIRECTION.items() if tag in name), MemcpyKind.UNKNOWN)
            return Kind.MEMCPY, int(direction), name
        if name.startswith("Memset"):
            return Kind.MEMSET, 0, name
        return Kind.KERNEL, 0, name
    if cls == _GPU_ANNOTATION:
        return Kind.GPU_USER_ANNOTATION, 0, name
    if "step_num" in args and _int(args["step_num"]) >= 0:
        return Kind.STEP, 0, f"ProfilerStep#{int(args['step_num'])}"
    if _API_CALL.match(name):
        return (Kind.DRIVER if not name.startswith("cuda") and name.startswith("cu") else Kind.RUNTIME), 0, name
    if duration_ps == 0:
        return Kind.INSTANT, 0, name
    return Kind.CPU_OP, 0, name


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return MISSING
