"""The HTML report's flame graph data: the stack model (``analysis.attribution.stacks``) as a tree of
call stacks with, per node, the GPU time, operators' CPU time and GPU operations (launches) of
everything under it, in nanoseconds and counts, exact.

Each node is one stack of the model (its innermost frame, under the node of its caller), merged over
ranks. A trace can hold hundreds of thousands of distinct stacks, so the page holds at most
``MAX_FLAME_NODES``: the nodes with the largest share of any of the three figures (a node's share
never exceeds its caller's, so a kept node's callers are kept). What a left-out node held stays in
its caller's figures (shown as the caller's own part), and the page says how many were left out.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from cuda_tracer.model.events import EventBatch
from cuda_tracer.profile import Profile

from ..analysis.attribution.stacks import samples, stack_model
from ..names import demangle

MAX_FLAME_NODES = 20_000
"""The most call-stack nodes the report's flame graph embeds (about 50 bytes of the page each)."""
_PYTHON_FRAME = re.compile(r"^.+\(\d+\): .+$")  # ``path/file.py(123): name``, as PyTorch writes it
_KINDS = ("root", "gpu", "launch", "operator", "python", "module")


def flame_data(profile: Profile, batch: EventBatch | None = None, limit: int = MAX_FLAME_NODES) -> dict[str, Any]:
    """The flame graph's columns: per node its ``parent`` (-1 for the root, node 0), ``frame``
    (index into ``frames``), ``kind`` (index into ``kinds``), and the inclusive ``gpu_ns``,
    ``cpu_ns`` and ``launches``; nodes in depth-first order, callers before callees."""
    batch = profile.batch() if batch is None else batch
    model = stack_model(batch)
    grouped = samples(batch, model)
    size = len(model.stack_frame)
    figures = np.zeros((3, size), np.int64)
    for row, values in enumerate((grouped.gpu_ns, grouped.cpu_ns, grouped.count)):
        np.add.at(figures[row], grouped.stack, values)
    depth = _depths(model.stack_caller)
    for level in range(int(depth.max()), 0, -1):  # callees first: each adds its figures to its caller
        at = np.flatnonzero(depth == level)
        for row in range(3):
            np.add.at(figures[row], model.stack_caller[at], figures[row, at])
    used = np.count_nonzero(figures, axis=0) > 0
    used[0] = True
    nodes = np.flatnonzero(used)
    totals = figures[:, 0]
    share = (figures[:, nodes] / np.maximum(totals, 1)[:, None]).max(axis=0)
    share[nodes == 0] = np.inf
    left_out = 0
    if len(nodes) > limit:
        keep = np.zeros(len(nodes), bool)
        keep[np.argsort(-share, kind="stable")[:limit]] = True
        kept = nodes[keep]
        closed = np.zeros(size, bool)
        closed[kept] = True
        for stack in kept.tolist():  # equal shares can split a caller from its callee: keep callers
            while stack and not closed[model.stack_caller[stack]]:
                stack = int(model.stack_caller[stack])
                closed[stack] = True
        left_out = len(nodes) - int(closed.sum())
        nodes = np.flatnonzero(closed)
    nodes = _depth_first(nodes, model.stack_caller, figures[0] + figures[1])
    index = np.full(size, -1, np.int64)
    index[nodes] = np.arange(len(nodes))
    frame_ids, frame_index = np.unique(np.maximum(model.stack_frame[nodes[1:]], 0), return_inverse=True)
    kind = _node_kinds(model, nodes)
    return {
        "frames": [demangle(model.frames[f]) for f in frame_ids.tolist()],
        "kinds": list(_KINDS),
        "parent": [-1] + index[model.stack_caller[nodes[1:]]].tolist(),
        "frame": [-1] + frame_index.reshape(-1).tolist(),
        "kind": kind.tolist(),
        "gpu_ns": figures[0, nodes].tolist(), "cpu_ns": figures[1, nodes].tolist(),
        "launches": figures[2, nodes].tolist(),
        "depth": int(depth[nodes].max()),
        "count": len(nodes), "left_out": left_out, "limit": limit,
    }


def _depths(caller: np.ndarray) -> np.ndarray:
    """Each stack's number of frames (a caller's id is below its callees': the trie adds callers
    first)."""
    depth = [0] * len(caller)
    for stack, up in enumerate(caller.tolist()):
        if stack:
            depth[stack] = depth[up] + 1
    return np.array(depth, np.int64)


def _depth_first(nodes: np.ndarray, caller: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``nodes`` (the root, 0, among them) in depth-first order, heavier callees first."""
    children: dict[int, list[int]] = {}
    for stack in nodes.tolist():
        if stack:
            children.setdefault(int(caller[stack]), []).append(stack)
    out, todo = [], [0]
    while todo:
        stack = todo.pop()
        out.append(stack)
        kids = children.get(stack, [])
        kids.sort(key=lambda s: int(weight[s]))
        todo.extend(kids)  # the heaviest last, so popped first
    return np.array(out, np.int64)


def _node_kinds(model: Any, nodes: np.ndarray) -> np.ndarray:
    """Per node an index into ``_KINDS``: the GPU operation, its launch call, a Python frame, a
    module call, else an operator."""
    kind = np.full(len(nodes), _KINDS.index("operator"), np.int64)
    gpu = np.isin(nodes, model.gpu_stack)
    launch = np.isin(nodes, model.stack_caller[model.gpu_stack]) & ~np.isin(nodes, model.op_stack) & ~gpu
    texts = [model.frames[f] if f >= 0 else "" for f in model.stack_frame[nodes].tolist()]
    python = np.array([bool(_PYTHON_FRAME.match(t)) for t in texts], bool)
    module = np.array([t.startswith("nn.Module: ") for t in texts], bool)
    kind[python] = _KINDS.index("python")
    kind[module] = _KINDS.index("module")
    kind[launch] = _KINDS.index("launch")
    kind[gpu] = _KINDS.index("gpu")
    kind[nodes == 0] = _KINDS.index("root")
    return kind
