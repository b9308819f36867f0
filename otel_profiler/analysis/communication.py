"""Communication hidden behind computation: how much collective-kernel time overlaps compute kernels.

Definitions (Holistic Trace Analysis' ``get_comm_comp_overlap``, restated; kernel classes from
``breakdown.classify``):

- **Communication time** of a device: the length of the union of its communication-kernel
  intervals, over all its streams (two collectives running at once on two streams count once).
- **Overlapped time**: the part of that union during which at least one compute kernel ran on the
  same device; **exposed time** is the rest (communication nothing hid). Copies and memsets are
  neither communication nor computation: they hide nothing.
- ``overlap_pct = 100 * overlapped / communication`` (None without communication).

A rank's figures are the sums over its devices. HTA instead merges every GPU row of the rank into
one timeline, whatever its device, so for a rank with one device (the usual one rank per GPU) its
ratio is ours; with several devices HTA counts concurrent collectives of two devices once and calls
a collective hidden by a compute kernel of another device overlapped, so its ratio can differ.
HTA's classes come from names alone over every row with a stream (``^nccl.*Kernel`` is
communication; a row not named like a copy, memset, ``dma`` or ``Sync`` is computation, so a
``Stream Wait Event`` row counts too); ours take kernels only. HTA also reads µs-rounded times and
drops the last ProfilerStep: given that view, its ratio and ours agree exactly on the test traces
(tests/analysis/test_communication_overlap.py).

Steps cut the timeline: each step's figures are the parts of the intervals inside the step.
Unions and intersections are vectorised sweeps over sorted starts (see ``_union``, ``_intersect``,
``_covered``), so the cost is a few sorts of a rank's kernels.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from cuda_tracer.model.events import EventBatch, Kind

from .breakdown import COMMUNICATION, COMPUTE, KERNEL_CLASSES, classify
from .stats import unique_rows
from .summary_schema.sections import CollectiveRow, Communication, CommunicationRank, CommunicationStep, Overlap

Intervals = tuple[np.ndarray, np.ndarray]
"""Disjoint intervals sorted by start, as (starts, ends) int64 arrays with every start < end."""

_KERNEL_OP = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
_CANONICAL = ("AllReduce", "AllGather", "ReduceScatter", "Reduce", "Broadcast", "AllToAll", "SendRecv",
              "Send", "Recv", "Gather", "Scatter", "Barrier")
_BY_KEY = sorted(((c.lower(), c) for c in _CANONICAL), key=lambda kv: -len(kv[0]))
UNKNOWN_COLLECTIVE = "other"


def empty_section() -> Communication:
    """The section of a batch without communication kernels."""
    return {"total_us": 0.0, "exposed_us": 0.0, "overlap_pct": None, "kernels": 0,
            "by_collective": [], "by_step": []}


@lru_cache(maxsize=1 << 10)
def collective_type(kernel: str) -> str:
    """A communication kernel's collective in NCCL's spelling: ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``
    -> ``AllReduce``, ``ncclKernel_AllGather_RING_LL_Sum_int8_t`` -> ``AllGather``; the word after
    ``Kernel_`` when it is none of the known types, ``other`` for a name of another form."""
    found = _KERNEL_OP.search(kernel)
    if found is None:
        return UNKNOWN_COLLECTIVE
    return _known(found.group(1)) or found.group(1)


@lru_cache(maxsize=1 << 10)
def extra_collective_type(value: str) -> str:
    """A ``collective`` extra (PyTorch's name: ``allreduce``, ``_allgather_base``,
    ``reduce_scatter_tensor_coalesced``) in the kernels' spelling (``AllReduce``, ``AllGather``,
    ``ReduceScatter``), or as it is when of no known type."""
    return _known(value) or value


def _known(word: str) -> str | None:
    """The longest known type the lowered, underscore-free word starts with."""
    key = word.lower().replace("_", "")
    return next((canonical for lowered, canonical in _BY_KEY if key.startswith(lowered)), None)


def _rank_steps(batch: EventBatch) -> list[tuple[int, int, int]]:
    """``(step, start_ns, end_ns)`` of the batch's STEP rows by start, numbered as ``summary._steps``
    numbers ``steps.items`` (the ``step`` extra, -1 where a row has none; ``shared.ids.batch_steps``
    gives the same tuples but numbers such a row by its position, so it is not used here)."""
    rows = np.flatnonzero(batch.kind == Kind.STEP)
    rows = rows[np.argsort(batch.start_ns[rows], kind="stable")]
    numbers = batch.extra("step")
    return [(int(numbers.get(r, -1)), int(batch.start_ns[r]), int(batch.end_ns[r])) for r in rows.tolist()]


def communication(batch: EventBatch, steps: list[tuple[int, int, int]] | None = None) -> Communication:
    """The communication section of one rank's batch (module docstring for the definitions)::

        {total_us, exposed_us, overlap_pct, kernels,
         by_collective: [{collective, device, stream, kernels, total_us, exposed_us, overlap_pct}],
         by_step: [{step, step_us, total_us, exposed_us, overlap_pct, exposed_pct_of_step}]}

    ``by_collective`` groups the kernels by type, device and stream (each group's time is the union of
    its own kernels, so groups on two streams may overlap each other), most exposed first.
    ``steps`` are ``(step, start_ns, end_ns)``; by default the batch's STEP rows, numbered as
    the summary's ``steps.items``; a step's figures are the parts of the intervals inside it."""
    kernels = np.flatnonzero(batch.kind == Kind.KERNEL)
    classes = classify(batch, kernels)
    comm = kernels[classes == KERNEL_CLASSES.index(COMMUNICATION)]
    if not len(comm):
        return empty_section()
    comp = kernels[classes == KERNEL_CLASSES.index(COMPUTE)]
    steps = _rank_steps(batch) if steps is None else steps
    step_lo = np.array([s[1] for s in steps], np.int64)
    step_hi = np.array([s[2] for s in steps], np.int64)
    labels, label_of = _collective_labels(batch, comm)

    total = overlapped = 0
    step_total = np.zeros(len(steps), np.int64)
    step_overlapped = np.zeros(len(steps), np.int64)
    groups: list[CollectiveRow] = []
    devices = np.stack([batch.rank[comm], batch.device[comm]], axis=1)
    for rank, device in unique_rows(devices, counts=True)[0].tolist():
        mine = (devices[:, 0] == rank) & (devices[:, 1] == device)
        rows = comm[mine]
        others = comp[(batch.rank[comp] == rank) & (batch.device[comp] == device)]
        busy = _union(batch.start_ns[others], batch.end_ns[others])
        union = _union(batch.start_ns[rows], batch.end_ns[rows])
        hidden = _intersect(union, busy)
        total += _length(union)
        overlapped += _length(hidden)
        step_total += _covered(union, step_hi) - _covered(union, step_lo)
        step_overlapped += _covered(hidden, step_hi) - _covered(hidden, step_lo)
        kinds = np.stack([label_of[mine], batch.stream[rows]], axis=1)
        for label, stream in unique_rows(kinds, counts=True)[0].tolist():
            members = rows[(kinds[:, 0] == label) & (kinds[:, 1] == stream)]
            own = _union(batch.start_ns[members], batch.end_ns[members])
            groups.append({"collective": labels[label], "device": int(device), "stream": int(stream),
                           "kernels": len(members), **_overlap(_length(own), _length(_intersect(own, busy)))})
    groups.sort(key=lambda g: (-g["exposed_us"], -g["total_us"], g["collective"], g["device"], g["stream"]))
    by_step: list[CommunicationStep] = [
        {"step": int(number), "step_us": (hi - lo) / 1e3, **_overlap(t, o),
         "exposed_pct_of_step": 100.0 * (t - o) / (hi - lo) if hi > lo else None}
        for (number, lo, hi), t, o in zip(steps, step_total.tolist(), step_overlapped.tolist())]
    return {**_overlap(total, overlapped), "kernels": len(comm), "by_collective": groups, "by_step": by_step}


def merge_ranks(sections: dict[str, Communication]) -> Communication:
    """The section of a multi-rank profile from each rank's (keyed by rank, as ``summary['ranks']``):
    times and kernels summed, ``overlap_pct`` recomputed from the sums, ``by_rank`` with each rank's
    figures, and each rank's ``by_collective`` and ``by_step`` rows with a ``rank`` added
    (``by_collective`` most exposed first, ``by_step`` by step then rank)."""
    if not sections:
        return {**empty_section(), "by_rank": []}
    by_rank: list[CommunicationRank] = []
    by_collective: list[CollectiveRow] = []
    by_step: list[CommunicationStep] = []
    total = exposed = 0.0
    kernels = 0
    for key, s in sorted(sections.items(), key=lambda kv: _rank_order(kv[0])):
        rank = int(key) if key.lstrip("-").isdigit() else key
        total += s["total_us"]
        exposed += s["exposed_us"]
        kernels += s["kernels"]
        by_rank.append({"rank": rank, "total_us": s["total_us"], "exposed_us": s["exposed_us"],
                        "overlap_pct": s["overlap_pct"]})
        by_collective.extend({"rank": rank, **row} for row in s["by_collective"])
        by_step.extend({"rank": rank, **row} for row in s["by_step"])
    by_collective.sort(key=lambda g: (-g["exposed_us"], -g["total_us"], _rank_order(str(g["rank"]))))
    by_step.sort(key=lambda g: (g["step"], _rank_order(str(g["rank"]))))
    return {"total_us": total, "exposed_us": exposed,
            "overlap_pct": 100.0 * (total - exposed) / total if total > 0 else None, "kernels": kernels,
            "by_collective": by_collective, "by_step": by_step, "by_rank": by_rank}


def _rank_order(key: str) -> tuple[int, int | str]:
    return (0, int(key)) if key.lstrip("-").isdigit() else (1, key)


def _overlap(total_ns: int, overlapped_ns: int) -> Overlap:
    return {"total_us": total_ns / 1e3, "exposed_us": (total_ns - overlapped_ns) / 1e3,
            "overlap_pct": 100.0 * overlapped_ns / total_ns if total_ns > 0 else None}


def _collective_labels(batch: EventBatch, comm: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The distinct collective types and, per communication row, the index of its own: from the
    ``collective`` extra where the row has one, else from the kernel name."""
    labels: dict[str, int] = {}
    names, first = np.unique(batch.name[comm], return_inverse=True)
    by_name = np.array([labels.setdefault(collective_type(batch.strings[n]), len(labels))
                        for n in names.tolist()], np.int64)
    label_of = by_name[first.reshape(-1)]
    extras = batch.extra("collective")
    if extras:
        at = {int(r): i for i, r in enumerate(comm.tolist())}
        for row, value in extras.items():
            i = at.get(row)
            if i is not None and isinstance(value, str) and value:
                label_of[i] = labels.setdefault(extra_collective_type(value), len(labels))
    return list(labels), label_of


def _union(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """The union of intervals as disjoint sorted ones; empty and reversed intervals are left out,
    touching ones joined."""
    keep = ends > starts
    s, e = starts[keep], ends[keep]
    if not len(s):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum.accumulate(e[order])
    first = np.flatnonzero(np.concatenate(([True], s[1:] > e[:-1])))
    last = np.append(first[1:], len(s)) - 1
    return s[first].astype(np.int64), e[last].astype(np.int64)


def _intersect(a: Intervals, b: Intervals) -> Intervals:
    """The intersection of two unions (disjoint sorted intervals), as one: each interval of ``a``
    meets a contiguous run of ``b``'s, found by binary search, and each meeting is one piece."""
    (a_s, a_e), (b_s, b_e) = a, b
    first = np.searchsorted(b_e, a_s, side="right")  # b's first interval ending after a's start
    stop = np.searchsorted(b_s, a_e, side="left")  # past b's last interval starting before a's end
    counts = np.maximum(stop - first, 0)
    n = int(counts.sum())
    ai = np.repeat(np.arange(len(a_s)), counts)
    bi = first[ai] + np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)
    s, e = np.maximum(a_s[ai], b_s[bi]), np.minimum(a_e[ai], b_e[bi])
    keep = e > s
    return s[keep], e[keep]


def _length(x: Intervals) -> int:
    return int((x[1] - x[0]).sum())


def _covered(x: Intervals, at: np.ndarray) -> np.ndarray:
    """Per time in ``at``: how much of the union ``x`` lies before it."""
    s, e = x
    cumulative = np.concatenate(([0], np.cumsum(e - s)))
    n = np.searchsorted(s, at, side="right")  # intervals starting at or before the time
    past = np.where(n > 0, np.maximum(e[np.maximum(n - 1, 0)] - at, 0), 0) if len(s) else 0
    return np.asarray(cumulative[n] - past, np.int64)
