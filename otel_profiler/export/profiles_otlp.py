"""The stack model as OpenTelemetry profiles: ``ExportProfilesServiceRequest`` messages of the OTLP
profiles signal (``opentelemetry.proto.profiles.v1development``, development version 1: the version
the pinned Collector's OTLP receiver takes), and their delivery.

One request per rank and piece of at most ``MAX_SAMPLES`` samples holds a ``ProfilesDictionary``
(strings, functions, locations, stacks, attributes, links; entry 0 of each table is the empty one,
as the format asks) and three profiles, one per sample type: ``gpu_time`` (ns), ``cpu_time`` (ns)
and ``launches`` (count). Samples are those of ``analysis.attribution.stacks.samples`` split by step: a sample
of a step links (``Link``) to that step's trace and its root span, the ids the span pipeline gives
it (``shared.ids``), so a backend can go from a step's trace to its profile. Attributes are the
pprof file's labels (``kind``, ``rank``, ``device``, ``stream``, ``kernel_class``, ``copy``).

:class:`ProfilesSender` sends them to the OTLP endpoint of the spans (gRPC ``ProfilesService`` or
HTTP ``/v1development/profiles``) through :class:`export.delivery.Delivery`, with its retries and
close deadline; profiles are not spooled: what is not delivered is counted and said in one line
(the profile folder keeps the trace, ``otel-profiler export --format otlp-profiles`` sends it).
The target and what a sender needs are in ``export.profiles_target``; whether the settings ask for
profiles, and the exporter process's sender, in ``export.profiles_config``.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator

import numpy as np

from cuda_tracer.model.array_sets import distinct
from cuda_tracer.model.events import EventBatch, Kind

from ..analysis.attribution.stacks import (OPERATOR, class_name, copy_name, frame_paths, samples,
                                           stack_model, step_rows, used_frames)
from ..spans.attributes import resource_attributes
from ..shared.ids import hash_bytes, root_span_id, run_id_of, trace_id, trace_rank
from ..spans.options import SpanOptions
from .pprof import KIND_LABELS, SAMPLE_TYPES, function_of_frame
from .profiles_target import ProfilesConfig

log = logging.getLogger(__name__)

MAX_SAMPLES = 20_000
"""Samples per request (a few MB at most)."""
_VALUE = {"gpu_time": "gpu_ns", "cpu_time": "cpu_ns", "launches": "count"}


def encode_requests(meta: dict[str, Any], batch: EventBatch, options: SpanOptions
                    ) -> Iterator[tuple[bytes, int]]:
    """The serialized requests of one rank's ``batch`` and the sample count of each (gpu_time
    and launches samples once: they share their stacks)."""
    from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as service

    model = stack_model(batch)
    grouped = samples(batch, model, step_rows(batch, model))
    if not len(grouped.stack):
        return
    run_id = options.run_id or run_id_of(meta)
    rank = trace_rank(meta, batch)
    resource = resource_attributes(meta, options, run_id, rank)
    order = np.argsort(grouped.group, kind="stable")
    t0 = int(batch.start_ns.min())
    for first in range(0, len(order), MAX_SAMPLES):
        piece = order[first:first + MAX_SAMPLES]
        request = service.ExportProfilesServiceRequest()
        _Encoder(request, batch, model, grouped, run_id, rank).fill(piece, resource, t0,
                                                                    int(batch.end_ns.max()) - t0)
        yield request.SerializeToString(), len(piece)


class _Encoder:
    """Fills one request: dictionary tables (interned), then the three profiles."""

    def __init__(self, request: Any, batch: EventBatch, model: Any, grouped: Any, run_id: str,
                 rank: int) -> None:
        self.request, self.batch, self.model, self.grouped = request, batch, model, grouped
        self.run_id, self.rank = run_id, rank
        self.d = request.dictionary
        for table in (self.d.mapping_table, self.d.location_table, self.d.function_table,
                      self.d.link_table, self.d.attribute_table, self.d.stack_table):
            table.add()  # entry 0: the empty one
        self.d.string_table.append("")
        self._strings: dict[str, int] = {"": 0}
        self._attributes: dict[tuple[str, str], int] = {}
        self._links: dict[int, int] = {-1: 0}
        self._steps = self._step_numbers()

    def string(self, text: str) -> int:
        index = self._strings.get(text)
        if index is None:
            index = self._strings[text] = len(self.d.string_table)
            self.d.string_table.append(text)
        return index

    def attribute(self, key: str, value: str) -> int:
        index = self._attributes.get((key, value))
        if index is None:
            index = self._attributes[(key, value)] = len(self.d.attribute_table)
            self.d.attribute_table.add(key_strindex=self.string(key)).value.string_value = value
        return index

    def link(self, step_row: int) -> int:
        """The link of the step at ``step_row``: its trace and root span, as the spans have them."""
        index = self._links.get(step_row)
        if index is None:
            hi, lo = trace_id(self.run_id, self.rank, "step", self._steps[step_row])
            index = self._links[step_row] = len(self.d.link_table)
            self.d.link_table.add(trace_id=hi.to_bytes(8, "big") + lo.to_bytes(8, "big"),
                                  span_id=root_span_id(hi, lo).to_bytes(8, "big"))
        return index

    def _step_numbers(self) -> dict[int, int]:
        """Step row -> its number, by ``shared.ids.batch_steps``' rule (the recorded number, else
        the step's place by start time)."""
        rows = np.flatnonzero(self.batch.kind == Kind.STEP)
        rows = rows[np.argsort(self.batch.start_ns[rows], kind="stable")]
        numbers = self.batch.extra("step")
        return {r: int(numbers.get(r, i)) for i, r in enumerate(rows.tolist())}

    def fill(self, piece: np.ndarray, resource: dict[str, Any], t0: int, duration: int) -> None:
        g = self.grouped
        stack_of = self._stacks(g.stack[piece])
        scope_profiles = self.request.resource_profiles.add()
        for key, value in resource.items():
            _set_any(scope_profiles.resource.attributes.add(key=key).value, value)
        scope = scope_profiles.scope_profiles.add()
        scope.scope.name = "otel-profiler"
        attributes = [self._attributes_of(int(i)) for i in piece.tolist()]
        links = [self.link(int(s)) for s in g.group[piece].tolist()]
        for type_, unit in SAMPLE_TYPES:
            values = getattr(g, _VALUE[type_])[piece]
            profile = scope.profiles.add(time_unix_nano=t0, duration_nano=duration, period=1)
            profile.sample_type.type_strindex = profile.period_type.type_strindex = self.string(type_)
            profile.sample_type.unit_strindex = profile.period_type.unit_strindex = self.string(unit)
            profile.profile_id = hash_bytes(self.run_id, self.rank, t0, int(piece[0]), type_, size=16)
            for k in np.flatnonzero(values).tolist():
                profile.samples.add(stack_index=stack_of[int(g.stack[piece[k]])],
                                    attribute_indices=attributes[k], link_index=links[k],
                                    values=[int(values[k])])

    def _stacks(self, stack_ids: np.ndarray) -> dict[int, int]:
        """Functions, locations and stacks of ``stack_ids``; returns each one's stack index."""
        location_of_frame = {}
        for frame_id in used_frames(self.model, stack_ids).tolist():
            text = self.model.frames[frame_id]
            name, filename, line = function_of_frame(text)
            self.d.function_table.add(name_strindex=self.string(name), system_name_strindex=self.string(text),
                                      filename_strindex=self.string(filename), start_line=line)
            location = self.d.location_table.add()
            location.lines.add(function_index=len(self.d.function_table) - 1, line=line)
            location_of_frame[frame_id] = len(self.d.location_table) - 1
        out = {}
        paths = frame_paths(self.model, stack_ids)  # the samples' stacks and their callers'
        for stack_id in distinct(stack_ids).tolist():
            self.d.stack_table.add(location_indices=[location_of_frame[f] for f in paths[stack_id].tolist()])
            out[stack_id] = len(self.d.stack_table) - 1
        return out

    def _attributes_of(self, i: int) -> list[int]:
        g = self.grouped
        kind = int(g.kind[i])
        out = [self.attribute("kind", KIND_LABELS[kind]), self.attribute("rank", str(int(g.rank[i])))]
        if kind != OPERATOR:
            out += [self.attribute("device", str(int(g.device[i]))), self.attribute("stream", str(int(g.stream[i])))]
        if g.kernel_class[i] >= 0:
            out.append(self.attribute("kernel_class", class_name(int(g.kernel_class[i]))))
        if g.copy[i] >= 0:
            out.append(self.attribute("copy", copy_name(int(g.copy[i]))))
        return out


def _set_any(value: Any, python: Any) -> None:
    if isinstance(python, bool):
        value.bool_value = python
    elif isinstance(python, int):
        value.int_value = python
    elif isinstance(python, float):
        value.double_value = python
    else:
        value.string_value = str(python)


class ProfilesSender:
    """Encodes batches' profiles and delivers them (``threaded``: from a sending thread of their
    own). Counters use the span pipeline's names: ``spans_*`` there count profile samples."""

    def __init__(self, config: ProfilesConfig, warn: Callable[[str], None], threaded: bool = False,
                 closing_deadline: Callable[[], float | None] = lambda: None) -> None:
        from .delivery import Delivery
        from .pipeline import Counters
        from .sinks import open_sink

        self.config, self._warn = config, warn
        self._warned: set[str] = set()
        self.counters = Counters()
        self.sink = open_sink(config.target)
        self.delivery = Delivery(self.sink, None, self.counters, config.retry_s, config.probe_s,
                                 config.target.describe() + " (profiles)", self._warn_once, closing_deadline)
        if threaded:
            self.delivery.threaded()
        self.samples = 0

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self._warn(message.replace("spans", "profiles").replace("spooling to (no spool: dropping)",
                                                                    "dropping them"))

    def handle(self, meta: dict[str, Any], batch: EventBatch) -> int:
        """Encode and hand over the profiles of one rank's batch; returns the samples."""
        n = 0
        for request, count in encode_requests(meta, batch, self.config.options):
            self.delivery.put(request, count)
            n += count
        self.samples += n
        return n

    def close(self, network_deadline: float | None = None) -> dict[str, int]:
        """Send what is pending until ``network_deadline`` (monotonic), count the rest as lost;
        returns ``samples``, ``delivered``, ``lost``."""
        self.delivery.finish(network_deadline)
        try:
            self.sink.close()
        except Exception:
            log.debug("closing the profiles sink failed", exc_info=True)
        c = self.counters.snapshot()
        return {"samples": self.samples, "delivered": c["spans_exported"],
                "lost": c["spans_dropped"] + c["spans_spooled"] + c["spans_rejected"]}

    def handle_safely(self, meta: dict[str, Any], batch: EventBatch) -> None:
        """``handle``, a failure costing one warning per kind (never the spans)."""
        try:
            self.handle(meta, batch)
        except Exception as exc:
            self._warn_once("encode:" + exc.__class__.__name__,
                            f"profiles export failed ({exc.__class__.__name__}: {exc})"[:240])

    def close_and_report(self, network_deadline: float | None) -> None:
        """``close``, then one line when samples were not delivered. Never raises."""
        try:
            totals = self.close(network_deadline)
        except Exception:
            log.debug("closing the profiles export failed; nothing to report", exc_info=True)
            return
        if totals["lost"]:
            self._warn(f"profiles export: {totals['lost']} of {totals['samples']} samples not delivered; "
                       "`otel-profiler export FOLDER --format otlp-profiles` sends them from the profile folder")

