"""The span budget: which events of a trace become individual spans and which are counted in
aggregate spans (the longest annotations, the costliest GPU work with its launch calls, and the
CPU ops enclosing kept launches), as the span model's docstring states.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cuda_tracer.model.array_sets import distinct
from cuda_tracer.model.events import EventBatch, Kind


@dataclass(frozen=True)
class EventRows:
    """The batch rows that may become spans, by role."""

    annotations: np.ndarray  # user annotations (CPU side)
    gpu_annotations: np.ndarray
    calls: np.ndarray  # runtime and driver calls
    device: np.ndarray  # GPU ops and GPU-side syncs
    launch_of_device: np.ndarray  # per device row: its launch call's row, -1: none


def select(batch: EventBatch, budget: int, trace_row: np.ndarray, n_traces: int, rows: EventRows,
           reserved: np.ndarray) -> np.ndarray:
    """Boolean per batch row: exported as an individual span (else aggregated). ``reserved``: room
    per trace kept free (for CPU-op context)."""
    call_rows, device_rows, launch_of = rows.calls, rows.device, rows.launch_of_device
    keep = np.zeros(len(batch), bool)
    duration = batch.duration_ns
    # Annotations: the longest ``budget // 2`` of a trace are spans, the rest aggregated.
    annotations = np.concatenate([rows.annotations, rows.gpu_annotations])
    annotation_trace = trace_row[annotations]
    order = np.lexsort((-duration[annotations], annotation_trace))
    ordered_trace = annotation_trace[order]
    rank_in_trace = np.arange(len(order)) - np.searchsorted(ordered_trace, ordered_trace, side="left")
    keep[annotations[order[rank_in_trace < budget // 2]]] = True
    dropped_annotations = annotations[~keep[annotations]]
    launched = np.zeros(len(batch), bool)
    launched[launch_of[launch_of >= 0]] = True
    lone_calls = call_rows[~launched[call_rows]]
    units = np.concatenate([device_rows, lone_calls])
    unit_launch = np.concatenate([launch_of, np.full(len(lone_calls), -1, np.int64)])
    if not len(units):
        return keep
    unit_trace = trace_row[units]
    # Reserve: one aggregate per distinct (trace, kind, name) of units, launch calls and dropped
    # annotations.
    may_aggregate = np.concatenate([units, call_rows, dropped_annotations])
    key = (trace_row[may_aggregate] << 40) | (batch.kind[may_aggregate].astype(np.int64) << 32) | \
        batch.name[may_aggregate].astype(np.int64)
    distinct_keys = distinct(key)
    reserve = np.bincount((distinct_keys >> 40).astype(np.int64), minlength=n_traces)
    fixed = 1 + np.bincount(trace_row[annotations[keep[annotations]]], minlength=n_traces)
    available = np.maximum(budget - fixed - reserve - reserved, 0)

    order = np.lexsort((-duration[units], unit_trace))
    units, unit_launch, unit_trace = units[order], unit_launch[order], unit_trace[order]
    cost = np.ones(len(units), np.int64)
    with_launch = np.flatnonzero(unit_launch >= 0)
    _, first = np.unique(unit_launch[with_launch], return_index=True)
    cost[with_launch[first]] += 1
    cost_so_far = np.cumsum(cost)
    group_start = np.searchsorted(unit_trace, unit_trace, side="left")
    before = np.where(group_start > 0, cost_so_far[np.maximum(group_start - 1, 0)], 0)
    kept = (cost_so_far - before) <= available[unit_trace]
    keep[units[kept]] = True
    keep[unit_launch[kept & (unit_launch >= 0)]] = True
    return keep


def keep_launch_context(batch: EventBatch, keep: np.ndarray, parent_row: np.ndarray, trace_row: np.ndarray,
                        rows: EventRows, room: np.ndarray) -> np.ndarray:
    """Keep the CPU ops enclosing kept launch calls: each op weighs as much as the costliest GPU op
    launched inside it; the heaviest first (ancestors before descendants of equal weight), at most
    ``room`` per trace. Returns how many were kept per trace."""
    call_rows, device_rows, launch_of = rows.calls, rows.device, rows.launch_of_device
    dur = batch.duration_ns
    weight = np.zeros(len(batch), np.int64)
    calls = call_rows[keep[call_rows]]
    weight[calls] = dur[calls]
    launched = launch_of >= 0
    np.maximum.at(weight, launch_of[launched], dur[device_rows[launched]])
    ops_per_level: list[np.ndarray] = []
    weights_per_level: list[np.ndarray] = []
    cur, w = parent_row[calls], weight[calls]
    while len(cur):  # one level of nesting per pass (a chain is rarely ten deep)
        up = cur >= 0
        cur, w = cur[up], w[up]
        is_op = batch.kind[cur] == Kind.CPU_OP
        ops_per_level.append(cur[is_op])
        weights_per_level.append(w[is_op])
        cur = parent_row[cur]
    if not ops_per_level or not sum(map(len, ops_per_level)):
        return np.zeros(len(room), np.int64)
    ops, weights = np.concatenate(ops_per_level), np.concatenate(weights_per_level)
    order = np.lexsort((-weights, ops))  # per op, its heaviest chain first
    ops, weights = ops[order], weights[order]
    first = np.concatenate(([True], ops[1:] != ops[:-1]))
    ops, weights = ops[first], weights[first]
    t = trace_row[ops]
    order = np.lexsort((-batch.end_ns[ops], batch.start_ns[ops], -weights, t))
    ops, t = ops[order], t[order]
    rank = np.arange(len(ops)) - np.searchsorted(t, t, side="left")
    chosen = rank < room[t]
    keep[ops[chosen]] = True
    return np.bincount(t[chosen], minlength=len(room))
