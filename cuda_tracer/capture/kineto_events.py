"""A Kineto event object (``_KinetoEvent``) copied out of torch as plain values, and those values
turned into the trace reader's typed event, so live and file captures give identical kinds and columns.

``event_row`` runs in the training thread as a window stops and reads only what it must: the fields
every event has, and for the operators whose cost an analysis counts (``costed_operators``) their
inputs' shapes, types and concrete values, written as a trace file writes them (``Input Dims``,
``Input type``, ``Concrete Inputs``). ``rows_to_profile`` does the rest later, in any thread.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Iterable

import msgspec

from cuda_tracer.model.costed_operators import COSTED_OPERATORS
from cuda_tracer.model.events import MISSING
from cuda_tracer.profile import RankProfile
# One conversion for files and live events: the reader's typed event and its public converter.
from cuda_tracer.trace_json.files import TraceEvent, events_to_profile

log = logging.getLogger("otel_profiler." + __name__)  # a child of the otel_profiler logger

CPU_CATEGORIES = frozenset({"cpu_op", "user_annotation", "python_function", "cpu_instant_event"})


def convert_events(events: Iterable[Any], rank: int = -1) -> RankProfile:
    """``_KinetoEvent``-like objects (name(), start_ns(), ... methods) to a ``RankProfile``."""
    rows = [event_row(e) for e in events]
    return rows_to_profile([r for r in rows if r is not None], rank)


def rows_to_profile(rows: Iterable[tuple], rank: int = -1) -> RankProfile:
    """Events copied out by ``event_row`` to a ``RankProfile`` (any thread: no torch object)."""
    profile = events_to_profile([_typed(row) for row in rows], source="<kineto live>", unit="ns")
    profile.meta["format"] = "kineto-live"
    if len(profile.batch):
        profile.batch.columns["rank"][:] = rank
    profile.meta["rank"] = rank
    return profile


def event_row(e: Any) -> tuple | None:
    """One ``_KinetoEvent``'s fields as plain values, read as cheaply as torch allows (this runs
    in the training thread when a window stops; ``_typed`` does the rest later): (category, name,
    pid, tid, start ns, duration ns, correlation, linked correlation, metadata text, shapes text),
    or None for an event torch cannot describe."""
    try:
        name = e.name()
        return (e.activity_type(), name, e.device_index(), e.device_resource_id(), e.start_ns(),
                e.duration_ns(), e.correlation_id(), e.linked_correlation_id(),
                e.metadata_json() if hasattr(e, "metadata_json") else "",
                _shapes(e) if name in COSTED_OPERATORS else "")
    except Exception:  # skip it rather than lose the window
        log.debug("a Kineto event could not be read; it is skipped", exc_info=True)
        return None


def _shapes(e: Any) -> str:
    """An operator's inputs as a trace file's args hold them (without braces), or "" when this
    window recorded no shapes or this torch cannot say."""
    try:
        dims = e.shapes()
        if not dims:
            return ""
        fields = {"Input Dims": dims, "Input type": e.dtypes()}
        if hasattr(e, "concrete_inputs"):  # as the trace file writes them: text, "" for a tensor
            fields["Concrete Inputs"] = ["" if v is None else str(v) for v in e.concrete_inputs()]
        return json.dumps(fields)[1:-1]
    except Exception:  # shapes are a bonus: the event is kept without them
        log.debug("an operator's shapes could not be read; it is kept without them", exc_info=True)
        return ""


def _typed(row: tuple) -> TraceEvent:
    """A copied-out event as the trace reader's ``TraceEvent`` (``ts``, ``dur`` in integer ns)."""
    cat, name, pid, tid, start, duration, correlation, linked, metadata, shapes = row
    if shapes:
        metadata = f"{metadata}, {shapes}" if metadata else shapes
    return TraceEvent(cat=cat, name=name, pid=pid, tid=tid, ts=start, dur=max(duration, 0),
                      args=_args(cat, int(correlation or MISSING), linked, metadata))


def _args(category: str, correlation: int, linked: int, metadata: str) -> msgspec.Raw:
    """The event's ``args`` as the JSON text a trace file would hold: Kineto's metadata plus the
    correlation fields (metadata's own ``correlation`` wins unless it is missing or null; the linked
    CPU op's id is the ``External id``; a CPU op's own id is its ``External id``, after its metadata
    so that it wins)."""
    if category in CPU_CATEGORIES:
        own_id = '"External id": %d' % correlation
        if metadata and _metadata_correlation(metadata) is not _NOT_AN_OBJECT:
            return msgspec.Raw(("{" + metadata + ", " + own_id + "}").encode())
        return msgspec.Raw(("{" + own_id + "}").encode())
    fields = []
    own = _metadata_correlation(metadata) if metadata else _NOT_AN_OBJECT
    if own is not _NOT_AN_OBJECT:
        fields.append(metadata)
    if own is None or own is _NOT_AN_OBJECT:  # in JSON the last of two equal keys wins
        fields.append('"correlation": %d' % correlation)
    if linked:
        fields.append('"External id": %d' % linked)
    return msgspec.Raw(("{" + ", ".join(fields) + "}").encode())


class _MetadataCorrelation(msgspec.Struct):
    """The one field of Kineto's metadata read here; everything else is only checked and skipped."""

    correlation: Any = None


_METADATA = msgspec.json.Decoder(_MetadataCorrelation)
_NOT_AN_OBJECT = object()


def _metadata_correlation(text: str) -> Any:
    """The ``correlation`` of ``{text}`` (Kineto's metadata_json() omits the braces): None when it
    has none, ``_NOT_AN_OBJECT`` when the text is not a JSON object's inside."""
    try:
        return _METADATA.decode("{" + text + "}").correlation
    except msgspec.MsgspecError:
        return _NOT_AN_OBJECT
