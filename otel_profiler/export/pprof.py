"""A profile as a gzipped pprof ``profile.proto`` file: the stack model
(``analysis.attribution.stacks``) with GPU time, operators' CPU time and GPU operation counts per
stack, for ``go tool pprof``, speedscope or Pyroscope.

The message classes are built at run time from a descriptor of the documented ``profile.proto``
schema (package ``perftools.profiles``, proto3; field numbers and types as that format defines
them) through protobuf's descriptor API and message factory, then filled and serialized by the
protobuf library.

Frames: one ``Function`` and one ``Location`` per distinct frame. A Python frame written by the
PyTorch profiler as ``path/file.py(123): name`` becomes the function ``name`` in file
``path/file.py`` at line 123; every other frame (``nn.Module: Linear_0``, ``aten::mm``,
``cudaLaunchKernel``, a kernel's demangled name) is a function of that name with no file.
"""

from __future__ import annotations

import gzip
import re
from functools import lru_cache
from typing import Any, Callable

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from cuda_tracer.model.events import Kind
from cuda_tracer.model.string_table import StringTable
from cuda_tracer.private_files import open_private
from cuda_tracer.profile import Profile

from ..analysis.attribution.stacks import (OPERATOR, Samples, StackModel, class_name, copy_name, frame_paths,
                                           samples, stack_model, used_frames)
from ..names import demangle

SAMPLE_TYPES = (("gpu_time", "nanoseconds"), ("cpu_time", "nanoseconds"), ("launches", "count"))
"""The values of each sample, in order (``default_sample_type``: GPU time)."""
KIND_LABELS = {int(Kind.KERNEL): "kernel", int(Kind.MEMCPY): "memcpy", int(Kind.MEMSET): "memset",
               int(Kind.SYNC): "sync", OPERATOR: "operator"}
_PYTHON_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<name>.+)$")

# The documented profile.proto: (message, [(field name, number, type, repeated, message type)]).
_I64, _U64, _BOOL, _STR, _MSG = (descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                                 descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
                                 descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
                                 descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                                 descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE)
_SCHEMA = (
    ("Profile", (("sample_type", 1, _MSG, True, "ValueType"), ("sample", 2, _MSG, True, "Sample"),
                 ("mapping", 3, _MSG, True, "Mapping"), ("location", 4, _MSG, True, "Location"),
                 ("function", 5, _MSG, True, "Function"), ("string_table", 6, _STR, True, None),
                 ("drop_frames", 7, _I64, False, None), ("keep_frames", 8, _I64, False, None),
                 ("time_nanos", 9, _I64, False, None), ("duration_nanos", 10, _I64, False, None),
                 ("period_type", 11, _MSG, False, "ValueType"), ("period", 12, _I64, False, None),
                 ("comment", 13, _I64, True, None), ("default_sample_type", 14, _I64, False, None))),
    ("ValueType", (("type", 1, _I64, False, None), ("unit", 2, _I64, False, None))),
    ("Sample", (("location_id", 1, _U64, True, None), ("value", 2, _I64, True, None),
                ("label", 3, _MSG, True, "Label"))),
    ("Label", (("key", 1, _I64, False, None), ("str", 2, _I64, False, None),
               ("num", 3, _I64, False, None), ("num_unit", 4, _I64, False, None))),
    ("Mapping", (("id", 1, _U64, False, None), ("memory_start", 2, _U64, False, None),
                 ("memory_limit", 3, _U64, False, None), ("file_offset", 4, _U64, False, None),
                 ("filename", 5, _I64, False, None), ("build_id", 6, _I64, False, None),
                 ("has_functions", 7, _BOOL, False, None), ("has_filenames", 8, _BOOL, False, None),
                 ("has_line_numbers", 9, _BOOL, False, None),
                 ("has_inline_frames", 10, _BOOL, False, None))),
    ("Location", (("id", 1, _U64, False, None), ("mapping_id", 2, _U64, False, None),
                  ("address", 3, _U64, False, None), ("line", 4, _MSG, True, "Line"),
                  ("is_folded", 5, _BOOL, False, None))),
    ("Line", (("function_id", 1, _U64, False, None), ("line", 2, _I64, False, None))),
    ("Function", (("id", 1, _U64, False, None), ("name", 2, _I64, False, None),
                  ("system_name", 3, _I64, False, None), ("filename", 4, _I64, False, None),
                  ("start_line", 5, _I64, False, None))),
)
_PACKAGE = "perftools.profiles"


@lru_cache(maxsize=1)
def profile_messages() -> dict[str, Any]:
    """The pprof message classes by name (``Profile``, ``Sample``, ...), built once."""
    file = descriptor_pb2.FileDescriptorProto(name="otel_profiler_pprof_profile.proto",
                                              package=_PACKAGE, syntax="proto3")
    for message, fields in _SCHEMA:
        m = file.message_type.add(name=message)
        for name, number, type_, repeated, message_type in fields:
            f = m.field.add(name=name, number=number, type=type_, label=(
                descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED if repeated
                else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL))
            if message_type:
                f.type_name = f".{_PACKAGE}.{message_type}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {message: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{message}"))
            for message, _ in _SCHEMA}


def function_of_frame(text: str) -> tuple[str, str, int]:
    """(function name, file name or "", line or 0) of a frame: ``path/file.py(123): name`` is
    ``name`` in ``path/file.py`` at line 123; any other frame is its demangled name."""
    python = _PYTHON_FRAME.match(text)
    if python:
        return python["name"], python["file"], int(python["line"])
    return demangle(text), "", 0


def encode(profile: Profile) -> tuple[bytes, dict[str, int]]:
    """The serialized (not compressed) pprof profile of ``profile``, and its totals: ``gpu_ns``,
    ``cpu_ns``, ``launches``, ``samples``, ``frames``."""
    batch = profile.batch()
    model = stack_model(batch)
    grouped = samples(batch, model)
    messages = profile_messages()
    table = StringTable([""])  # pprof's index 0 is the empty string
    strings = table.intern
    out = messages["Profile"]()
    for type_, unit in SAMPLE_TYPES:
        out.sample_type.add(type=strings(type_), unit=strings(unit))
    out.default_sample_type = strings(SAMPLE_TYPES[0][0])
    out.period_type.type, out.period_type.unit = strings(SAMPLE_TYPES[0][0]), strings(SAMPLE_TYPES[0][1])
    out.period = 1
    out.mapping.add(id=1, filename=strings("otel-profiler"), has_functions=True, has_filenames=True,
                    has_line_numbers=True)
    location_of_frame = _locations(out, model, grouped, strings)
    _samples(out, model, grouped, location_of_frame, strings)
    if len(batch):
        out.time_nanos = int(batch.start_ns.min())
        out.duration_nanos = int(batch.end_ns.max() - batch.start_ns.min())
    out.comment.append(strings(f"otel-profiler: {len(profile.ranks)} rank(s) from "
                               + ", ".join(profile.sources)))
    out.string_table.extend(table.strings)
    totals = {"gpu_ns": int(grouped.gpu_ns.sum()), "cpu_ns": int(grouped.cpu_ns.sum()),
              "launches": int(grouped.count.sum()), "samples": len(grouped.stack),
              "frames": len(out.location)}
    return out.SerializeToString(), totals


def write(profile: Profile, path: str) -> dict[str, int]:
    """Write the gzipped pprof profile of ``profile`` to ``path`` (readable by its owner only, as
    the profile it comes from); returns its totals (``encode``). Raises ``OSError``."""
    data, totals = encode(profile)
    with open_private(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6,
                                                        mtime=0) as f:
        f.write(data)
    return totals


def _locations(out: Any, model: StackModel, grouped: Samples, strings: Callable[[str], int]) -> np.ndarray:
    """Add a Function and a Location for each frame the samples' stacks use; returns the location
    id of each frame id (0 where unused)."""
    frame_ids = used_frames(model, grouped.stack)
    location_of_frame = np.zeros(len(model.frames), np.int64)
    for number, frame_id in enumerate(frame_ids.tolist(), 1):
        text = model.frames[frame_id]
        name, filename, line = function_of_frame(text)
        function = out.function.add(id=number, name=strings(name), system_name=strings(text),
                                    filename=strings(filename), start_line=line)
        location = out.location.add(id=number, mapping_id=1)
        location.line.add(function_id=function.id, line=line)
        location_of_frame[frame_id] = number
    return location_of_frame


def _samples(out: Any, model: StackModel, grouped: Samples, location_of_frame: np.ndarray,
             strings: Callable[[str], int]) -> None:
    """Add one Sample per entry of ``grouped``: its stack's locations innermost first, its values
    in ``SAMPLE_TYPES`` order and its labels."""
    paths = frame_paths(model, grouped.stack)

    keys = {name: strings(name) for name in ("rank", "device", "stream", "kind", "kernel_class", "copy")}
    kind_text = {k: strings(v) for k, v in KIND_LABELS.items()}
    columns = zip(grouped.stack.tolist(), grouped.rank.tolist(), grouped.device.tolist(),
                  grouped.stream.tolist(), grouped.kind.tolist(), grouped.kernel_class.tolist(),
                  grouped.copy.tolist(), grouped.gpu_ns.tolist(), grouped.cpu_ns.tolist(),
                  grouped.count.tolist())
    for stack, rank, device, stream, kind, klass, copy, gpu, cpu, count in columns:
        sample = out.sample.add(location_id=location_of_frame[paths[stack]].tolist(),
                                value=(gpu, cpu, count))
        labels = sample.label
        labels.add(key=keys["kind"], str=kind_text[kind])
        labels.add(key=keys["rank"], str=strings(str(rank)))
        if kind != OPERATOR:
            labels.add(key=keys["device"], str=strings(str(device)))
            labels.add(key=keys["stream"], str=strings(str(stream)))
        if klass >= 0:
            labels.add(key=keys["kernel_class"], str=strings(class_name(klass)))
        if copy >= 0:
            labels.add(key=keys["copy"], str=strings(copy_name(copy)))
