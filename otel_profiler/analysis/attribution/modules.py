"""The ``nn.Module`` hierarchy of a trace recorded with ``torch.profiler.profile(with_modules=True)``
or ``with_stack=True``: every module call is a ``python_function`` event named ``nn.Module: <Class>_<n>``
(in windows this profiler captured live: ``nn.Module: <attribute path> (<Class>)``, and the outermost
module by its class, ``cuda_tracer.capture.module_names``).

Definitions:

- A module's *parent* is the innermost module call on the same (rank, pid, tid) that encloses it
  in time; its *path* is the names from the outermost module down (``Model_0/Encoder_0/Linear_3``).
  Rows are per path, so the same module called at each step is one row with ``calls`` > 1.
- **CPU time**: the sum of the call durations (the module's forward, as the profiler saw it).
- A kernel belongs to the innermost module call enclosing its *launch call* on the launch call's
  thread. **Self GPU time** is the time of such kernels, **total GPU time** adds those of the
  modules inside it. Self GPU times sum to at most the kernel total; kernels launched outside any
  module (the backward pass runs on autograd threads without module events, optimizer steps, or
  kernels with no launch call in the trace) are counted under ``outside``.
"""

from __future__ import annotations

import numpy as np

from cuda_tracer.model.correlate import Correlation, correlate
from cuda_tracer.model.events import EventBatch, Kind

from ..summary_schema.sections import Modules, ModuleRow, ModuleTypeRow
from .operators import _inclusive, _top_kernels
from .time_nesting import depths, parents

PREFIX = "nn.Module: "
TOP_KERNELS = 3


def module_rows(batch: EventBatch) -> np.ndarray:
    """Rows of the ``nn.Module: …`` python_function events."""
    ids = [i for i, s in enumerate(batch.strings) if s.startswith(PREFIX)]
    if not ids:
        return np.zeros(0, np.int64)
    py = np.flatnonzero(batch.kind == Kind.PYTHON_FUNCTION)
    return py[np.isin(batch.name[py], np.asarray(ids, np.int64))]


def _paths(batch: EventBatch, mods: np.ndarray, parent: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The distinct paths and, per module call, the index of its path (parents resolved first)."""
    depth = depths(parent)
    path_of = np.full(len(mods), -1, np.int64)
    names = [s[len(PREFIX):] for s in batch.names(mods)]
    index: dict[str, int] = {}
    paths: list[str] = []
    for i in np.argsort(depth, kind="stable").tolist():
        p = parent[i]
        text = names[i] if p < 0 else f"{paths[path_of[p]]}/{names[i]}"
        if text not in index:
            index[text] = len(paths)
            paths.append(text)
        path_of[i] = index[text]
    return paths, path_of


def modules(batch: EventBatch, corr: Correlation | None = None, top_kernels: int = TOP_KERNELS
            ) -> Modules:
    """``{calls, kernel_total_us, attributed_us, outside: {kernels, gpu_us}, by_path: [{path, name,
    depth, parent, calls, cpu_us, self_gpu_us, total_gpu_us, kernels, top_kernels}], by_type: [{type,
    calls, self_gpu_us, kernels}]}``; ``by_path`` in tree order (each module after its parent,
    siblings by total GPU time); empty without module events."""
    mods = module_rows(batch)
    if not len(mods):
        return {}
    corr = corr if corr is not None else correlate(batch)
    is_kernel = batch.kind[corr.gpu_rows] == Kind.KERNEL
    krows, klaunch = corr.gpu_rows[is_kernel], corr.launch_of_gpu[is_kernel]
    launched = np.flatnonzero(klaunch >= 0)
    launches, where = np.unique(klaunch[launched], return_inverse=True)
    parent, launch_mod = parents(batch, mods, launches)
    kmod = np.full(len(krows), -1, np.int64)
    kmod[launched] = launch_mod[where.reshape(-1)]
    paths, path_of = _paths(batch, mods, parent)
    n = len(paths)
    kdur = batch.duration_ns[krows].astype(np.float64)
    inside = kmod >= 0
    self_call = np.zeros(len(mods))
    np.add.at(self_call, kmod[inside], kdur[inside])
    total_call = _inclusive(self_call, parent)
    # Total per path: a path's calls never nest in a call of the same path except through
    # recursion, where only the outermost call counts (no double counting).
    outer = np.ones(len(mods), bool)
    anc = parent.copy()
    while (anc >= 0).any():
        live = anc >= 0
        outer[live & (path_of[np.maximum(anc, 0)] == path_of)] = False
        anc[live] = parent[anc[live]]
    dur = batch.duration_ns[mods].astype(np.float64)
    calls = np.bincount(path_of, minlength=n)
    cpu = np.bincount(path_of[outer], weights=dur[outer], minlength=n)
    self_gpu = np.bincount(path_of, weights=self_call, minlength=n)
    total_gpu = np.bincount(path_of[outer], weights=total_call[outer], minlength=n)
    kcount = np.bincount(path_of[kmod[inside]], minlength=n)
    top = _top_kernels(batch, krows[inside], kdur[inside], path_of[kmod[inside]], top_kernels)
    rows: list[ModuleRow] = [
        {"path": p, "name": p.rsplit("/", 1)[-1], "depth": p.count("/"),
         "parent": p.rsplit("/", 1)[0] if "/" in p else None, "calls": int(calls[i]),
         "cpu_us": float(cpu[i]) / 1e3, "self_gpu_us": float(self_gpu[i]) / 1e3,
         "total_gpu_us": float(total_gpu[i]) / 1e3,
         "kernels": int(kcount[i]), "top_kernels": top.get(i, [])} for i, p in enumerate(paths)]
    return {"calls": int(len(mods)), "kernel_total_us": float(kdur.sum()) / 1e3,
            "attributed_us": float(kdur[inside].sum()) / 1e3,
            "outside": {"kernels": int((~inside).sum()), "gpu_us": float(kdur[~inside].sum()) / 1e3},
            "by_path": _tree_order(rows), "by_type": _by_type(rows)}


def module_class(name: str) -> str:
    """The class of a module call's name: ``layer4.1.conv2 (Conv2d)``, ``Conv2d_3`` and ``Conv2d``
    are each a ``Conv2d``."""
    if name.endswith(")") and " (" in name:
        return name[name.rindex(" (") + 2:-1]
    base, _, num = name.rpartition("_")
    return base if base and num.isdigit() else name


def _by_type(rows: list[ModuleRow]) -> list[ModuleTypeRow]:
    """Rows per module class (``module_class``), by self GPU time."""
    out: dict[str, ModuleTypeRow] = {}
    for r in rows:
        kind = module_class(r["name"])
        t = out.setdefault(kind, {"type": kind, "calls": 0, "cpu_us": 0.0, "self_gpu_us": 0.0, "kernels": 0})
        t["calls"] += r["calls"]
        t["cpu_us"] += r["cpu_us"]
        t["self_gpu_us"] += r["self_gpu_us"]
        t["kernels"] += r["kernels"]
    return sorted(out.values(), key=lambda t: (-t["self_gpu_us"], t["type"]))


def _tree_order(rows: list[ModuleRow]) -> list[ModuleRow]:
    children: dict[str | None, list[ModuleRow]] = {}
    for r in rows:
        children.setdefault(r["parent"], []).append(r)
    out: list[ModuleRow] = []
    stack = sorted(children.get(None, []), key=lambda r: (r["total_gpu_us"], r["cpu_us"]))
    while stack:
        r = stack.pop()
        out.append(r)
        stack.extend(sorted(children.get(r["path"], []), key=lambda c: (c["total_gpu_us"], c["cpu_us"])))
    return out
