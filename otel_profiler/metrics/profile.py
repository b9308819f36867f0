"""Profile-derived metrics: aggregates every observed ``EventBatch`` into counters, gauges and histograms.

Every figure is computed by the same functions as the summary (``analysis.breakdown``,
``cuda_tracer.model.correlate``), so the metrics of one batch equal ``summarize_batch`` of that batch:

- GPU busy ratio (gauge, latest batch) = merged GPU-op time / device span (HTA temporal breakdown);
  busy and span time are also counters, so ``rate(busy)/rate(span)`` gives it over any range.
- Kernel time by class = ``class_times`` (summed, not merged); memcpy bytes (positive sizes) and time
  per direction, throughput = bytes / copy time; sync time per kind; launch delay (HTA) and latency
  (Nsight) histograms over linked GPU ops; per-stream max queue depth (HTA).
- FLOPs per operator class (counter) and the MFU of the latest step (gauge), from the operators
  recorded with shapes, as the summary's ``flops`` section counts them (``analysis.flops``).
- Step time histogram, published at zero for the process's rank from the start (``expect_steps``);
  each step's observation carries an exemplar with the step's trace id, derived
  exactly as ``spans.trace_id(run_id, rank, "step", n)`` derives the exported ``train.step`` trace.
- GPU memory peak (allocated, reserved) per device of the latest step with ``[memory]`` events
  (``analysis.memory.allocator.step_peaks``), or of the latest step the live ``torch.cuda`` statistics of
  the rank's metadata read (``live.cuda_memory``).
- Dropped events from the batch metadata (CUPTI's dropped records, records the reader skipped).

Aggregation runs where ``observe`` is called (the session's flush thread), never in a training step.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterable

import numpy as np

from cuda_tracer.model.array_sets import distinct
from cuda_tracer.model.correlate import Correlation, correlate, queue_depths
from cuda_tracer.model.events import EventBatch, Kind, MemcpyKind, SyncKind

from . import points as m
from ..analysis.breakdown import class_times, temporal_breakdown
from ..analysis.flops.costs import flops_section
from ..analysis.flops.result import meta_device_names
from ..analysis.memory.allocator import step_peaks
from .points import HistogramValue, Point, Spec
from ..shared.ids import batch_steps, run_id_of, trace_id, trace_rank

_DROP_KEYS = ("cupti_dropped_records", "lost_records", "skipped_events")


def step_trace_hex(run_id: str, rank: int, step: int) -> str:
    """The 32-hex-digit trace id of step ``step`` of ``rank``: the id its exported spans carry."""
    hi, lo = trace_id(run_id, rank, "step", step)
    return f"{hi:016x}{lo:016x}"


def _key(spec: Spec, attrs: dict) -> tuple:
    return (spec.name, tuple(sorted(attrs.items())))


class ProfileMetrics:
    """Cumulative state of the profile-derived metrics. Thread-safe; ``points()`` is a snapshot."""

    def __init__(self, run_id: str | None = None, default_run_id: str | None = None) -> None:
        # Trace ids use the run id the span exporter uses: the configured one (OTEL_PROFILER_RUN_ID),
        # else the batch metadata's, else ``default_run_id`` (the session's, for batches without meta).
        self.run_id = run_id
        self.default_run_id = default_run_id
        self.cpu_seconds = 0.0
        self._lock = threading.Lock()
        self._values: dict[tuple, Point] = {}
        self._expected: tuple | None = None  # the step series published at zero (expect_steps)

    # ------------------------------------------------------------------ state
    def _set(self, spec: Spec, attrs: dict, value: float) -> None:
        self._values[_key(spec, attrs)] = Point(spec, attrs, float(value))

    def _add(self, spec: Spec, attrs: dict, value: float) -> None:
        point = self._values.get(_key(spec, attrs))
        if point is None:
            self._values[_key(spec, attrs)] = Point(spec, attrs, float(value))
        else:
            point.value += float(value)

    def _observe(self, spec: Spec, attrs: dict, seconds: np.ndarray,
                 exemplars: Iterable[tuple[int, str, float]] = ()) -> None:
        """Histogram observations; ``exemplars``: (index into seconds, trace id hex, unix time s)."""
        point = self._values.get(_key(spec, attrs))
        if point is None:
            point = self._values[_key(spec, attrs)] = Point(spec, attrs, HistogramValue(spec.buckets))
        h: HistogramValue = point.value
        slots = np.searchsorted(np.asarray(spec.buckets), seconds, side="left")  # le semantics
        for i, c in enumerate(np.bincount(slots, minlength=len(h.counts)).tolist()):
            h.counts[i] += c
        h.total += float(seconds.sum())
        for i, trace_hex, ts in exemplars:
            h.exemplars[int(slots[i])] = (trace_hex, float(seconds[i]), ts)

    def expect_steps(self, rank: int) -> None:
        """Publish ``rank``'s step-time histogram at zero before its first step, so that the first
        scrape sees the counter start from 0 and ``increase()``/``rate()`` count the first steps."""
        with self._lock:
            self._observe(m.STEP_DURATION, {"otel_profiler.rank": int(rank)}, np.empty(0))
        self._expected = _key(m.STEP_DURATION, {"otel_profiler.rank": int(rank)})

    def add_dropped(self, reason: str, count: float) -> None:
        if count:
            with self._lock:
                self._add(m.DROPPED, {"otel_profiler.reason": reason}, count)

    def points(self) -> list[Point]:
        with self._lock:
            out = [Point(p.spec, p.attributes, p.value.copy() if isinstance(p.value, HistogramValue)
                         else p.value) for p in self._values.values()]
        out.append(Point(m.OVERHEAD, {"otel_profiler.component": "profile"}, self.cpu_seconds))
        run_id = self.run_id or self.default_run_id
        if run_id:
            out.append(Point(m.RUN_INFO, {"otel_profiler.run.id": run_id}, 1.0))
        return out

    # ------------------------------------------------------------------ one batch
    def observe(self, batch: EventBatch, meta: dict[str, Any] | None = None) -> None:
        """Fold one batch (one rank's flushed events, or a whole trace) into the metrics."""
        t0 = time.thread_time()
        meta = meta or {}
        with self._lock:
            for reason in _DROP_KEYS:
                value = meta.get(reason)
                if isinstance(value, (int, float)) and value > 0:
                    self._add(m.DROPPED, {"otel_profiler.reason": reason}, value)
            if len(batch):
                self._observe_batch(batch, meta)
        self.cpu_seconds += time.thread_time() - t0

    def _observe_batch(self, batch: EventBatch, meta: dict[str, Any]) -> None:
        corr = correlate(batch)
        for rank in distinct(batch.rank).tolist():
            counts = np.bincount(batch.kind[batch.rank == rank], minlength=len(Kind) + 1)
            for k in Kind:
                if counts[k]:
                    self._add(m.EVENTS, {"otel_profiler.rank": rank, "otel_profiler.kind": k.name.lower()},
                              counts[k])

        for d in temporal_breakdown(batch):
            attrs = {"otel_profiler.rank": d["rank"], "gpu.device.id": d["device"]}
            self._set(m.GPU_BUSY, attrs, d["busy_us"] / d["span_us"] if d["span_us"] else 0.0)
            self._add(m.GPU_BUSY_TIME, attrs, d["busy_us"] / 1e6)
            self._add(m.GPU_SPAN_TIME, attrs, d["span_us"] / 1e6)

        gpu_rank = batch.rank[corr.gpu_rows]
        matched = corr.matched
        for rank in distinct(gpu_rank).tolist():
            mine = gpu_rank == rank
            for cls, us in class_times(batch, corr.gpu_rows[mine]).items():
                self._add(m.KERNEL_TIME, {"otel_profiler.rank": rank, "gpu.kernel.class": cls}, us / 1e6)
            linked = mine & matched
            if linked.any():
                attrs = {"otel_profiler.rank": rank}
                self._observe(m.LAUNCH_DELAY, attrs, corr.delay_ns[linked] / 1e9)
                self._observe(m.LAUNCH_LATENCY, attrs, corr.latency_ns[linked] / 1e9)

        self._transfers(batch)
        for q in queue_depths(batch, corr):
            self._set(m.QUEUE_DEPTH, {"otel_profiler.rank": q.rank, "gpu.device.id": q.device,
                                      "gpu.stream.id": q.stream}, q.max_depth)
        self._steps(batch, meta)
        self._flops(batch, corr, meta)
        for peak in step_peaks(batch):  # in step order: the latest step's peak stays
            attrs = {"otel_profiler.rank": peak["rank"], "gpu.device.id": peak["device"]}
            self._set(m.GPU_MEMORY_PEAK_ALLOCATED, attrs, peak["allocated_bytes"])
            self._set(m.GPU_MEMORY_PEAK_RESERVED, attrs, peak["reserved_bytes"])
        steps = (meta.get("cuda_memory") or {}).get("steps")  # live torch.cuda statistics win
        if steps and isinstance(meta.get("rank"), int):
            latest = steps[-1]
            attrs = {"otel_profiler.rank": meta["rank"], "gpu.device.id": latest["device"]}
            self._set(m.GPU_MEMORY_PEAK_ALLOCATED, attrs, latest["peak_allocated_bytes"])
            self._set(m.GPU_MEMORY_PEAK_RESERVED, attrs, latest["peak_reserved_bytes"])

    def _transfers(self, batch: EventBatch) -> None:
        durations = batch.duration_ns
        for rank in distinct(batch.rank).tolist():
            in_rank = batch.rank == rank
            copies = in_rank & (batch.kind == Kind.MEMCPY)
            for mk in MemcpyKind:
                rows = np.flatnonzero(copies & (batch.subkind == mk))
                if not len(rows):
                    continue
                attrs = {"otel_profiler.rank": rank,
                         "gpu.memcpy.kind": mk.name if mk != MemcpyKind.UNKNOWN else "unknown"}
                nbytes = batch.bytes[rows]
                total_bytes, seconds = int(nbytes[nbytes > 0].sum()), float(durations[rows].sum()) / 1e9
                self._add(m.MEMCPY_BYTES, attrs, total_bytes)
                self._add(m.MEMCPY_TIME, attrs, seconds)
                if seconds > 0:
                    self._set(m.MEMCPY_THROUGHPUT, attrs, total_bytes / seconds)
            syncs = in_rank & (batch.kind == Kind.SYNC)
            for sk in SyncKind:
                rows = np.flatnonzero(syncs & (batch.subkind == sk))
                if len(rows):
                    self._add(m.SYNC_TIME, {"otel_profiler.rank": rank, "gpu.sync.kind": sk.name.lower()},
                              float(durations[rows].sum()) / 1e9)

    def _flops(self, batch: EventBatch, corr: Correlation, meta: dict[str, Any]) -> None:
        if not batch.extra("shape_args"):  # no operator recorded with shapes
            return
        ranks = distinct(batch.rank).tolist()
        for rank in ranks:
            part = batch if len(ranks) == 1 else batch.take(np.flatnonzero(batch.rank == rank))
            section = flops_section(part, corr if part is batch else correlate(part),
                                    meta_device_names([meta]))
            for op_class, figures in section["by_class"].items():
                if figures["flops"]:
                    self._add(m.FLOPS, {"otel_profiler.rank": rank, "otel_profiler.op.class": op_class},
                              figures["flops"])
            measured = [mfu for s in section["by_step"] if s["flops"] and (mfu := s["mfu"]) is not None]
            if measured:  # in step order: the latest step's stays
                self._set(m.STEP_MFU, {"otel_profiler.rank": rank}, measured[-1])

    def _steps(self, batch: EventBatch, meta: dict[str, Any]) -> None:
        steps = batch_steps(batch)
        if not steps:
            return
        # The rank and run id exactly as spans.build_spans / the exporter choose them.
        rank = trace_rank(meta, batch)
        run_id = self.run_id or (run_id_of(meta) if meta else self.default_run_id)
        seconds = np.array([(e - s) / 1e9 for _, s, e in steps])
        exemplars = [(i, step_trace_hex(run_id, rank, n), e / 1e9)
                     for i, (n, _, e) in enumerate(steps)] if run_id else []
        self._observe(m.STEP_DURATION, {"otel_profiler.rank": rank}, seconds, exemplars)
        expected_key = self._expected
        expected = self._values.get(expected_key) if expected_key is not None else None
        if expected_key is not None and expected is not None and not sum(expected.value.counts):
            del self._values[expected_key]  # the rank was learned later: the zero series expected is no series
