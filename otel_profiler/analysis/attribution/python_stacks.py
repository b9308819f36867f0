"""Operators' call stacks from ``python_function`` events (``with_stack=True`` in current PyTorch,
which records each Python frame as an event instead of a ``Call stack`` string per operator).

An operator's stack is the chain of ``python_function`` events that enclose its start on its own
thread, innermost first, nested by time as operators are (``time_nesting.parents``). The chains are
kept as a trie: each Python event's stack is a pair (its frame name, its caller's stack id), so
equal stacks get one id without building a string per event, and only the most frequent stacks of
each operator name are spelled out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from cuda_tracer.model.events import EventBatch, Kind

from .time_nesting import depths, parents

if TYPE_CHECKING:  # (the summary's types: a span export need not import them, 10 ms)
    from ..summary_schema.sections import CallStack

MAX_FRAMES = 64
"""Frames kept per stack, innermost first (deeper callers are cut off)."""


def stack_ids(batch: EventBatch, ops: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """(each operator's stack id, the trie). Stack id 0 is the empty stack (no enclosing Python
    event); the trie's entry ``k`` is ``(frame name id, caller stack id)`` of stack id ``k``.
    """
    py = np.flatnonzero(batch.kind == Kind.PYTHON_FUNCTION)
    trie: list[tuple[int, int]] = [(-1, 0)]
    if not len(py) or not len(ops):
        return np.zeros(len(ops), np.int64), trie
    caller, innermost = parents(batch, py, ops)
    depth = depths(caller)
    stack = np.zeros(len(py), np.int64)
    names = batch.name[py].astype(np.int64)
    for level in range(int(depth.max()) + 1):  # callers first: their ids exist when needed
        at = np.flatnonzero(depth == level)
        above = np.where(caller[at] >= 0, stack[np.maximum(caller[at], 0)], 0)
        pairs, index = np.unique(np.stack([names[at], above], 1), axis=0, return_inverse=True)
        stack[at] = len(trie) + index.reshape(-1)
        trie.extend(map(tuple, pairs.tolist()))
    return np.where(innermost >= 0, stack[np.maximum(innermost, 0)], 0), trie


def frames(batch: EventBatch, trie: list[tuple[int, int]], stack_id: int) -> list[str]:
    """The frame names of ``stack_id``, innermost first (at most ``MAX_FRAMES``)."""
    out: list[str] = []
    while stack_id and len(out) < MAX_FRAMES:
        name, stack_id = trie[stack_id]
        out.append(batch.strings[name])
    return out


def top_stacks(batch: EventBatch, ops: np.ndarray, inverse: np.ndarray, top: int) -> dict[int, list[CallStack]]:
    """Per operator name index (``inverse``): its ``top`` most frequent Python stacks,
    ``[{stack: [frames, innermost first], calls}]``; names whose operators have none are absent."""
    ids, trie = stack_ids(batch, ops)
    found = ids > 0
    if not found.any():
        return {}
    pairs, calls = np.unique(np.stack([inverse[found], ids[found]], 1), axis=0, return_counts=True)
    order = np.lexsort((pairs[:, 1], -calls, pairs[:, 0]))  # per name, most calls first
    out: dict[int, list[CallStack]] = {}
    for (name, stack_id), count in zip(pairs[order].tolist(), calls[order].tolist()):
        kept = out.setdefault(name, [])
        if len(kept) < top:
            kept.append({"stack": frames(batch, trie, stack_id), "calls": count})
    return out
