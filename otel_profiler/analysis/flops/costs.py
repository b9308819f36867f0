"""The ``flops`` section of a summary: FLOPs and bytes per GPU operation, achieved rates, MFU.

Definitions:

- An operator's cost (FLOPs, bytes read and written, class) comes from its recorded input shapes and
  types (``record_shapes``) through ``formulas.op_cost``; operators without shapes or a formula cost
  nothing. Where costed operators nest (``aten::convolution`` > ``aten::cudnn_convolution``), the
  outermost counts and the inner ones are left out, so each piece of work counts once.
- Its GPU time is the time of the kernels it launched, itself or through its descendants (the
  operator view's attribution: kernel -> launch call -> innermost operator, then up to the nearest
  costed operator).
- Achieved TFLOP/s and TB/s divide by that GPU time; arithmetic intensity is FLOPs per byte; an
  operator is ``compute``-bound when its intensity reaches the device's ridge point (peak FLOP/s
  over peak bandwidth), else ``memory``-bound.
- The peak comes from ``peaks.peak_for`` for the trace's device name and the data type that did most
  of the FLOPs, or from the overrides given; MFU is the FLOPs done inside the profiled steps over
  the steps' time times the peak of each device that ran kernels (over the whole window when the
  profile has no steps). No peak: rates are shown, ``peak`` and ``mfu`` are ``None``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from cuda_tracer.model.correlate import Correlation
from cuda_tracer.model.events import EventBatch, Kind
from cuda_tracer.trace_json.schema import operator_inputs

from ..attribution.operators import attribution
from .formulas import OpCost, dtype_of, op_cost
from .result import PeakOverride, flops_result

if TYPE_CHECKING:  # (the summary's types: a span export need not import them, 10 ms)
    from ..summary_schema.sections import Flops, FlopsFigures, FlopsOperatorFigures, FlopsStepFigures, FlopsTotals

CLASSES = ("gemm", "conv", "attention", "elementwise", "other")
_ENCODE = msgspec.json.Encoder().encode
_MAX_COUNT = 1e30  # FLOPs or bytes of one call beyond any machine: a corrupt shape


@dataclass
class _Costed:
    """The counted operators of a batch: their rows, each one's call (an index into ``calls``: one
    per distinct operator name and inputs, with its cost, data type and shapes text) and GPU time."""

    rows: np.ndarray
    call: np.ndarray
    calls: list[tuple[str, OpCost, str, str]]  # (name, cost, dtype, shapes)
    gpu_ns: np.ndarray

    @property
    def flops(self) -> np.ndarray:
        """Each counted operator's FLOPs."""
        unit = np.asarray([cost.flops for _, cost, _, _ in self.calls], np.float64)
        return unit[self.call] if len(self.calls) else np.zeros(0)


def _costs(batch: EventBatch, corr: Correlation) -> _Costed:
    texts = batch.extra("shape_args")
    ops, krows, kop, parent = attribution(batch, corr)
    call = np.full(len(ops), -1, np.int64)
    calls: list[tuple[str, OpCost, str, str]] = []
    if texts:
        index = dict(zip(ops.tolist(), range(len(ops))))
        strings, names = batch.strings, batch.name
        seen: dict[bytes, int] = {}  # a step repeats its calls: one formula for each distinct one
        for row, text in texts.items():
            i = index.get(row)
            args = operator_inputs(text) if i is not None else None
            if i is None or args is None or not isinstance(args.dims, list):
                continue
            name = strings[names[row]]
            key = _ENCODE((name, args.dims, args.types, args.concrete))
            found = seen.get(key)
            if found is None:
                cost = _cost(name, args.dims, args.types, args.concrete)
                found = seen[key] = len(calls) if cost is not None else -1
                if cost is not None:
                    calls.append((name, *cost))
            call[i] = found
    costed = call >= 0
    nearest = _nearest_costed(costed, parent)
    above = np.where(parent >= 0, nearest[np.maximum(parent, 0)], -1)  # nearest costed ancestor
    counted = costed & (above < 0)
    owner = _outermost(nearest, counted, parent)
    gpu = np.zeros(len(ops))
    has = (kop >= 0)
    if has.any():
        k_owner = owner[kop[has]]
        ok = k_owner >= 0
        np.add.at(gpu, k_owner[ok], batch.duration_ns[krows[has][ok]].astype(np.float64))
    keep = np.flatnonzero(counted)
    return _Costed(ops[keep], call[keep], calls, gpu[keep])


def _cost(name: str, dims: list, types: Any, concrete: Any) -> tuple[OpCost, str, str] | None:
    """(cost, data type, shapes text) of one operator call, or None: no formula, or shapes the
    formula cannot read."""
    types = types if isinstance(types, list) else []
    try:
        cost = op_cost(name, dims, types, concrete if isinstance(concrete, list) else None)
    except (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError, OverflowError, RecursionError):
        return None
    if cost is None or not (0 <= cost.flops < _MAX_COUNT and 0 <= cost.bytes < _MAX_COUNT):
        return None  # no formula, or shapes no tensor has (negative, or beyond any machine)
    return cost, dtype_of(types), _shape_key(dims)


def _nearest_costed(costed: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """For each operator: the index of the nearest costed operator at or above it, or -1."""
    nearest = np.where(costed, np.arange(len(costed)), -1)
    up = parent.copy()
    pending = np.flatnonzero((nearest < 0) & (up >= 0))
    while len(pending):  # one level per pass; the loop ends at the deepest nesting
        found = nearest[up[pending]]
        done = found >= 0
        nearest[pending[done]] = found[done]
        up[pending] = parent[up[pending]]
        pending = pending[~done]
        pending = pending[up[pending] >= 0]
    return nearest


def _outermost(nearest: np.ndarray, counted: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """For each operator: the counted costed operator its work belongs to (the outermost costed one
    at or above it), or -1."""
    owner = nearest.copy()
    while True:
        inner = np.flatnonzero((owner >= 0) & ~counted[np.maximum(owner, 0)])
        if not len(inner):
            return owner
        above = parent[owner[inner]]
        owner[inner] = np.where(above >= 0, nearest[np.maximum(above, 0)], -1)


def _shape_key(dims: list) -> str:
    """The input shapes as one short text: ``[141, 512] x [512, 512]`` (scalars left out)."""
    shown = [d for d in dims if isinstance(d, list) and d]
    return " x ".join(str(d) for d in shown)[:200]


def flops_figures(batch: EventBatch, corr: Correlation) -> FlopsFigures:
    """The figures of the ``flops`` section that add up across ranks: FLOPs, bytes and GPU time by
    class and by operator and shape (every row), FLOPs by data type, the steps, the devices of each
    rank and the window; ``flops_result`` makes the section of them."""
    c = _costs(batch, corr)
    used, times = np.unique(c.call, return_counts=True)
    gpu_us = np.bincount(np.searchsorted(used, c.call), weights=c.gpu_ns, minlength=len(used)) / 1e3
    by_class: dict[str, FlopsTotals] = {name: {"flops": 0.0, "bytes": 0.0, "gpu_us": 0.0} for name in CLASSES}
    groups: dict[tuple[str, str], FlopsOperatorFigures] = {}
    flops_by_dtype: dict[str, float] = {}
    for k, n, g_us in zip(used.tolist(), times.tolist(), gpu_us.tolist()):
        name, cost, dtype, shapes = c.calls[k]
        flops, nbytes = cost.flops * n, cost.bytes * n
        cls = by_class[cost.op_class if cost.op_class in by_class else "other"]
        cls["flops"] += flops
        cls["bytes"] += nbytes
        cls["gpu_us"] += g_us
        flops_by_dtype[dtype] = flops_by_dtype.get(dtype, 0.0) + flops
        g = groups.setdefault((name, shapes), {"name": name, "shapes": shapes, "dtype": dtype,
                                               "class": cost.op_class, "calls": 0, "flops": 0.0,
                                               "bytes": 0.0, "gpu_us": 0.0})
        g["calls"] += n
        g["flops"] += flops
        g["bytes"] += nbytes
        g["gpu_us"] += g_us
    window = [int(batch.start_ns.min()), int(batch.end_ns.max())] if len(batch) else None
    return {"operators": len(c.rows), "by_class": by_class, "by_operator": list(groups.values()),
            "dtypes": flops_by_dtype, "by_step": _step_flops(batch, c),
            "gpus": {str(rank): n for rank, n in _gpus(batch).items()}, "window_ns": window}


def operator_flops(batch: EventBatch, corr: Correlation) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """The counted operators' rows, each one's FLOPs, and the FLOPs by data type (for the peak):
    what a step's root span and the step metrics add up over the operators inside the step."""
    if not batch.extra("shape_args"):  # recorded without shapes: nothing to count
        return np.zeros(0, np.int64), np.zeros(0), {}
    c = _costs(batch, corr)
    flops = c.flops
    per_call: list[float] = (np.bincount(c.call, weights=flops, minlength=len(c.calls)).tolist()
                             if len(c.call) else [])
    by_dtype: dict[str, float] = {}
    for (_, _, dtype, _), f in zip(c.calls, per_call):
        by_dtype[dtype] = by_dtype.get(dtype, 0.0) + float(f)
    return c.rows, flops, by_dtype


def flops_section(batch: EventBatch, corr: Correlation, device_names: list[str],
                  override: PeakOverride | None = None, every_row: bool = False) -> Flops:
    """The ``flops`` section (see the module docstring) of one batch (one rank, or all of them);
    ``every_row``: every operator row, not the top ``result.TOP_OPERATORS``."""
    return flops_result(flops_figures(batch, corr), device_names, override, every_row)


def _gpus(batch: EventBatch) -> dict[int, int]:
    """Per rank: how many devices ran kernels."""
    rows = np.flatnonzero(batch.kind == Kind.KERNEL)
    pairs = set(zip(batch.rank[rows].tolist(), batch.device[rows].tolist()))
    return dict(Counter(rank for rank, _ in pairs))


def _step_flops(batch: EventBatch, c: _Costed) -> list[FlopsStepFigures]:
    """Per step: its FLOPs (the costed operators that start inside it, on its rank) and duration."""
    steps = np.flatnonzero(batch.kind == Kind.STEP)
    numbers = batch.extra("step")
    out: list[FlopsStepFigures] = []
    start = batch.start_ns[c.rows]
    flops = c.flops
    for r in steps.tolist():
        inside = (start >= batch.start_ns[r]) & (start < batch.end_ns[r]) & (batch.rank[c.rows] == batch.rank[r])
        out.append({"step": numbers.get(r, -1), "rank": int(batch.rank[r]),
                    "duration_us": float(batch.end_ns[r] - batch.start_ns[r]) / 1e3,
                    "flops": float(flops[inside].sum())})
    out.sort(key=lambda s: (s["rank"], s["step"]))
    return out
