"""The typed JSON schema of Kineto / Chrome trace files (msgspec) and the decoders built on it.

Only the fields the reader uses are declared, so everything else is skipped while parsing instead
of becoming Python objects:

- one struct per trace-event phase (``"ph"`` is the tag), so flow events, about a third of a GPU
  trace, decode to empty objects; a file with another phase, or an event without one, is read with
  the loose ``Event`` schema instead (one more decode, same result);
- ``args`` stays raw JSON text (``msgspec.Raw``) until the event's kind is known, then the args of
  all events of a group of kinds are decoded in one call (``decode_args``) into the narrow struct
  that group needs: most events need two ids, GPU ops a dozen fields.

Timestamps stay their JSON text (``msgspec.Raw``) until ``trace_times`` turns a chunk's worth into
exact integer nanoseconds at once (``time_values`` gives the exact ``int``/``Decimal`` values for
the rare chunk that needs them; never a float).

The annotations are evaluated as the structs are made (no ``from __future__ import annotations``):
the decoders made at import would otherwise evaluate each from its text, a third of the import.
"""

from decimal import Decimal
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Sequence, Union

import msgspec
import numpy as np

from cuda_tracer.model.events import MISSING


class HostArgs(msgspec.Struct, gc=False):
    """The ``args`` fields read from CPU-side events: the ids that link them to GPU work, the
    parameters of a collective (``record_param_comms``) and the Python call stack (``with_stack``)."""

    external_id: Any = msgspec.field(default=MISSING, name="External id")
    external_id_legacy: Any = msgspec.field(default=MISSING, name="external id")
    correlation: Any = MISSING
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    dtype: Any = None
    call_stack: Any = msgspec.field(default=None, name="Call stack")


class GpuArgs(HostArgs, gc=False):
    """The ``args`` fields read from GPU ops (kernels, copies, sets, syncs, GPU annotations)."""

    device: Any = MISSING
    stream: Any = MISSING
    bytes: Any = None
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(default=MISSING, name="registers per thread")
    shared_memory: Any = msgspec.field(default=MISSING, name="shared memory")
    graph_id: Any = msgspec.field(default=MISSING, name="graph id")
    sync_kind: Any = msgspec.field(default=None, name="cuda_sync_kind")
    wait_on_stream: Any = None
    wait_on_event_record: Any = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")
    wait_on_event_id: Any = msgspec.field(default=None, name="wait_on_cuda_event_id")


class MemoryArgs(HostArgs, gc=False):
    """The ``args`` fields read from ``[memory]`` instant events (allocator activity)."""

    mem_bytes: Any = msgspec.field(default=MISSING, name="Bytes")
    mem_device_id: Any = msgspec.field(default=MISSING, name="Device Id")
    mem_device_type: Any = msgspec.field(default=None, name="Device Type")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")


class ShapeArgs(msgspec.Struct, gc=False):
    """The ``args`` fields of an operator recorded with ``record_shapes`` (and ``with_flops``): its
    inputs' shapes (a list per tensor, nested for a tensor list, ``[]`` for a scalar), their types,
    the values of its non-tensor inputs, and Kineto's own FLOP estimate. Decoded only for the
    operators whose args hold ``Input Dims``."""

    dims: Any = msgspec.field(default=None, name="Input Dims")
    dims_legacy: Any = msgspec.field(default=None, name="Input dims")
    types: Any = msgspec.field(default=None, name="Input type")
    concrete: Any = msgspec.field(default=None, name="Concrete Inputs")
    flops: Any = None


class MetadataArgs(msgspec.Struct, gc=False):
    """The ``args`` of ``"M"`` metadata events (``process_name``, ``thread_name``)."""

    name: Any = None


NO_ARGS = msgspec.Raw(b"{}")
NO_TIME = msgspec.Raw(b"null")
ZERO_TIME = msgspec.Raw(b"0")


class EventFields(msgspec.Struct, gc=False):
    """The fields read from a trace event. ``args`` stays raw JSON text until the event's kind is
    known: it is then decoded in one batch per kind into the narrow struct that kind needs (most
    events need two ids, a few need a dozen fields), which keeps the decoded objects small and few."""

    cat: Any = None
    name: Any = None
    pid: Any = MISSING
    tid: Any = MISSING
    ts: msgspec.Raw = NO_TIME  # the number's text: trace_times converts all of them at once
    dur: msgspec.Raw = ZERO_TIME
    args: msgspec.Raw = NO_ARGS


class Event(EventFields, gc=False):
    """An event of any phase, or none: the schema for files the tagged one below rejects."""

    ph: Any = None


# The usual schema: one struct per phase ("ph" is the tag), so that flow events, about a third of a
# GPU trace, decode to empty objects. A phase outside this list, or an event without one, makes the
# whole file take the loose ``Event`` schema instead (one more decode, same result).
class Complete(EventFields, gc=False, tag_field="ph", tag="X"):
    pass


class Instant(EventFields, gc=False, tag_field="ph", tag="i"):
    pass


class GlobalInstant(EventFields, gc=False, tag_field="ph", tag="I"):
    pass


class Metadata(EventFields, gc=False, tag_field="ph", tag="M"):
    pass


def _unread_phase(phase: str) -> type:
    return msgspec.defstruct(f"_Phase_{phase}", [], gc=False, tag_field="ph", tag=phase)


_UNREAD_PHASES = "sftBECbnePNODRc"  # flows, begin/end, counters, async, objects, marks, context
_TAGGED_TYPES: tuple[type[msgspec.Struct], ...] = (Complete, Instant, GlobalInstant, Metadata,
                                                   *map(_unread_phase, _UNREAD_PHASES))
if TYPE_CHECKING:  # a union made at run time: any of those structs to the type checker
    TAGGED_EVENT = Any
else:
    TAGGED_EVENT = Union[_TAGGED_TYPES]


class TraceFile(msgspec.Struct, gc=False):
    traceEvents: list[Event] | None = None
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    trace_id: Any = None
    host_name: Any = None
    record_shapes: Any = None
    with_stack: Any = None
    profile_memory: Any = None


class TaggedTraceFile(TraceFile, gc=False):
    traceEvents: list[TAGGED_EVENT] | None = None


TAGGED_DECODER = msgspec.json.Decoder(TaggedTraceFile | list[TAGGED_EVENT])
LOOSE_DECODER = msgspec.json.Decoder(TraceFile | list[Event])
TAGGED_EVENTS = msgspec.json.Decoder(list[TAGGED_EVENT])  # a piece of the event list (trace_stream)
LOOSE_EVENTS = msgspec.json.Decoder(list[Event])

# One decoder per group of kinds; each reads only the args fields that group needs.
HOST_ARGS = msgspec.json.Decoder(list[HostArgs])
GPU_ARGS = msgspec.json.Decoder(list[GpuArgs])
MEMORY_ARGS = msgspec.json.Decoder(list[MemoryArgs])
SHAPE_ARG = msgspec.json.Decoder(ShapeArgs)
METADATA_ARGS = msgspec.json.Decoder(MetadataArgs)
_ENCODER = msgspec.json.Encoder()


_TIME_VALUES = msgspec.json.Decoder(list[Union[int, Decimal, None]])
_TIME_VALUE = msgspec.json.Decoder(Union[int, Decimal, None])
UNUSABLE_TIME = object()
"""A time that is no number (a string, a list): dropped with its event, as any unusable time."""


def time_values(texts: Sequence[Any]) -> list[Any]:
    """Timestamps as exact ``int``/``Decimal``/None values (the per-value path); texts that are no
    number become ``UNUSABLE_TIME``. Values that are not ``msgspec.Raw`` pass unchanged."""
    if not texts or type(texts[0]) is not msgspec.Raw:
        return list(texts)
    try:
        values = _TIME_VALUES.decode(b"[" + b",".join(texts) + b"]")
        if len(values) == len(texts):
            return values
    except (msgspec.MsgspecError, TypeError):
        pass
    return [_time_value(t) for t in texts]


def _time_value(text: Any) -> Any:
    if type(text) is not msgspec.Raw:
        return text
    try:
        return _TIME_VALUE.decode(text)
    except msgspec.MsgspecError:
        return UNUSABLE_TIME


def decode_args(raw_args: tuple, rows: np.ndarray, decoder: msgspec.json.Decoder) -> list:
    """The args of ``rows`` decoded in one call. An args that is not a JSON object (null, a string,
    a list) reads as an empty one: the event is kept, only its args are lost."""
    try:
        args = decoder.decode(_ENCODER.encode(list(map(raw_args.__getitem__, rows.tolist()))))
        if len(args) == len(rows):  # a Raw holding other than one value would shift the rest
            return args
    except (msgspec.MsgspecError, TypeError, ValueError):
        pass
    return [_decode_one(raw_args[i], decoder) for i in rows.tolist()]


def _decode_one(raw: msgspec.Raw, decoder: msgspec.json.Decoder) -> Any:
    try:
        decoded = decoder.decode(b"[" + bytes(raw) + b"]")
        if len(decoded) == 1:
            return decoded[0]
    except (msgspec.MsgspecError, TypeError, ValueError):
        pass
    return decoder.decode(b"[{}]")[0]


PHASE_CODE: dict[Any, int] = {p: i for i, p in enumerate("XiIMsftBEC", start=1)}  # 0: anything else
_PHASE_CODE_OF_TYPE = {t: PHASE_CODE.get(t.__struct_config__.tag, 0) for t in _TAGGED_TYPES}


def phase_codes(events: list[Any]) -> np.ndarray:
    """Each event's ``PHASE_CODE``: from its type when decoded tagged, else from its ``ph``."""
    try:
        return np.fromiter(map(_PHASE_CODE_OF_TYPE.__getitem__, map(type, events)), np.uint8,
                           len(events))
    except KeyError:  # loosely decoded events carry it as a field
        pass
    try:
        return np.fromiter(map(PHASE_CODE.get, map(attrgetter("ph"), events), repeat(0)), np.uint8,
                           len(events))
    except TypeError:  # an unhashable phase value
        return np.array([PHASE_CODE.get(e.ph, 0) if isinstance(e.ph, str) else 0 for e in events],
                        np.uint8)


def operator_inputs(text: str) -> ShapeArgs | None:
    """An operator's ``shape_args`` (the side table's JSON text of its args, kept by
    ``columns.operator_shapes``) decoded: its inputs' shapes, types, concrete values and Kineto's
    FLOP estimate; None when the text is not a JSON object."""
    try:
        args = SHAPE_ARG.decode(text)
    except (msgspec.MsgspecError, ValueError):
        return None
    if args.dims is None:
        args.dims = args.dims_legacy
    return args
