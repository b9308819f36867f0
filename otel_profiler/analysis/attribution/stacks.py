"""The stack model: each GPU operation's time given to the CPU call stack that launched it, and each
operator's CPU time to its own stack, with every distinct frame and stack stored once.

Definitions:

- **Scopes** are the CPU-side events that nest on a thread: operators (CPU ops, user annotations,
  ``ProfilerStep#N`` ranges, folded into ``ProfilerStep#*``) and Python frames (``python_function``
  events, ``nn.Module: <Class>_<n>`` module calls among them). A scope's caller is the innermost
  scope on the same (rank, pid, tid) that encloses it in time (``time_nesting.parents``), so Python
  frames, module calls and operators interleave as they ran.
- A **GPU operation** (kernel, memcpy, memset, sync) is linked to the runtime/driver call that
  launched it by correlation id (``cuda_tracer.model.correlate``; sync events the same way). Its stack,
  innermost first, is: the GPU operation, the launch call, then the stack of its *anchor*: the
  operator the operator view gives it (external id of the launch call, see
  ``operators.operator_of_gpu_op``), else the innermost scope enclosing the launch call on its
  thread, else nothing. A GPU operation with no launch call in the trace sits under the frame
  ``NO_LAUNCH``.
- **GPU time** is the operation's duration; **CPU time** of an operator is its self CPU time as the
  operator view defines it (its duration less that of the operators directly inside it), so CPU
  times add up to the time of the outermost operators. Python frames carry no CPU time of their own,
  nor do steps (their time outside their operators is no operator's work).

Stacks are a trie: stack id ``k`` is (frame id, caller stack id), id 0 the empty stack; frame ids
index ``frames``. ``samples`` groups the GPU operations and operators by stack and labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cuda_tracer.model.array_sets import distinct
from cuda_tracer.model.correlate import Correlation, _keys, _lookup, correlate
from cuda_tracer.model.events import LAUNCH_KINDS, MISSING, EventBatch, Kind, MemcpyKind, kinds_in

from ..breakdown import KERNEL_CLASSES, classify
from ..stats import unique_rows
from .operators import STEP_ROW, operator_of_gpu_op, operator_rows
from .time_nesting import depths, parents

NO_LAUNCH = "[no launch call in the trace]"
"""The frame above GPU operations whose launch call the trace does not hold."""
GPU_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC)
OPERATOR = 0
"""``Samples.kind`` of an operator's CPU time (GPU operations carry their ``Kind``)."""


@dataclass
class StackModel:
    """Frames, the stack trie, and per GPU operation and per operator their stack and figures."""

    frames: list[str]  # frame texts, interned once
    stack_frame: np.ndarray  # per stack id: its innermost frame id (-1 for the empty stack)
    stack_caller: np.ndarray  # per stack id: the stack id of its caller (0 for the outermost)
    gpu_rows: np.ndarray  # GPU operations, rows of the batch
    gpu_stack: np.ndarray  # per GPU operation: its stack id (the operation's own frame innermost)
    gpu_class: np.ndarray  # per GPU operation: index into KERNEL_CLASSES
    gpu_launch: np.ndarray  # per GPU operation: the row of its launch call, or -1
    op_rows: np.ndarray  # operators, rows of the batch
    op_stack: np.ndarray  # per operator: its stack id (its own frame innermost)
    op_self_ns: np.ndarray  # per operator: self CPU time

    def frames_of(self, stack_id: int) -> list[str]:
        """The frame texts of ``stack_id``, innermost first."""
        out = []
        while stack_id:
            out.append(self.frames[int(self.stack_frame[stack_id])])
            stack_id = int(self.stack_caller[stack_id])
        return out


@dataclass
class Samples:
    """One entry per distinct (stack, rank, device, stream, kind, class, copy direction, group):
    summed GPU time, CPU time and GPU operation count. Device, stream, class and copy are -1 where
    they do not apply (operators' CPU time; class and copy outside kernels and copies); ``group`` is
    the caller's grouping (``samples``' ``groups``, such as ``step_rows``), else -1."""

    stack: np.ndarray
    rank: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    kind: np.ndarray  # a GPU operation's Kind, or OPERATOR
    kernel_class: np.ndarray  # index into KERNEL_CLASSES, or -1
    copy: np.ndarray  # MemcpyKind of a memcpy, or -1
    group: np.ndarray
    gpu_ns: np.ndarray
    cpu_ns: np.ndarray
    count: np.ndarray


class _Trie:
    """Stacks as (frame id, caller stack id) pairs; equal pairs get one id."""

    def __init__(self) -> None:
        self.frame: list[np.ndarray] = [np.array([-1], np.int64)]
        self.caller: list[np.ndarray] = [np.array([0], np.int64)]
        self.size = 1

    def extend(self, frames: np.ndarray, callers: np.ndarray) -> np.ndarray:
        """The stack id of each (frame, caller) pair, adding the new pairs."""
        if not len(frames):
            return np.zeros(0, np.int64)
        pairs, index = unique_rows(np.stack([frames, callers], 1))
        self.frame.append(pairs[:, 0])
        self.caller.append(pairs[:, 1])
        first = self.size
        self.size += len(pairs)
        return first + index.reshape(-1)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.concatenate(self.frame), np.concatenate(self.caller)


def stack_model(batch: EventBatch, corr: Correlation | None = None) -> StackModel:
    """The stack model of ``batch`` (see the module docstring)."""
    corr = corr if corr is not None else correlate(batch)
    ops = operator_rows(batch)
    py = np.flatnonzero(batch.kind == Kind.PYTHON_FUNCTION)
    scopes = np.sort(np.concatenate([ops, py]))  # operators and Python frames are distinct rows
    gpu_rows, launch = _gpu_operations(batch, corr)
    launched = np.flatnonzero(launch >= 0)
    launches, where = np.unique(launch[launched], return_inverse=True)
    caller, launch_scope = parents(batch, scopes, launches)

    frames, frame_of_name = _frame_table(batch)
    scope_frame = frame_of_name[_scope_names(batch, scopes)]
    trie = _Trie()
    scope_stack = np.zeros(len(scopes), np.int64)
    depth = depths(caller)
    for level in range(int(depth.max()) + 1 if len(depth) else 0):  # callers first
        at = np.flatnonzero(depth == level)
        above = np.where(caller[at] >= 0, scope_stack[np.maximum(caller[at], 0)], 0)
        scope_stack[at] = trie.extend(scope_frame[at], above)

    anchor = np.full(len(gpu_rows), -1, np.int64)  # index into scopes
    anchor[launched] = launch_scope[where.reshape(-1)]
    by_operator = _operator_of(batch, corr, ops, gpu_rows)
    found = by_operator >= 0
    anchor[found] = np.searchsorted(scopes, ops[by_operator[found]])
    anchor_stack = np.zeros(len(gpu_rows), np.int64)
    anchored = anchor >= 0
    anchor_stack[anchored] = scope_stack[anchor[anchored]]
    no_launch = frame_of_name[len(batch.strings) + 1]
    launch_frame = np.full(len(gpu_rows), no_launch, np.int64)
    launch_frame[launched] = frame_of_name[batch.name[launches].astype(np.int64)][where.reshape(-1)]
    launch_stack = trie.extend(launch_frame, anchor_stack)
    gpu_stack = trie.extend(frame_of_name[batch.name[gpu_rows].astype(np.int64)], launch_stack)

    op_in_scopes = np.searchsorted(scopes, ops)
    stack_frame, stack_caller = trie.arrays()
    return StackModel(frames=frames, stack_frame=stack_frame, stack_caller=stack_caller,
                      gpu_rows=gpu_rows, gpu_stack=gpu_stack, gpu_class=classify(batch, gpu_rows),
                      gpu_launch=launch,
                      op_rows=ops, op_stack=scope_stack[op_in_scopes],
                      op_self_ns=_self_cpu_ns(batch, scopes, caller, op_in_scopes))


def _gpu_operations(batch: EventBatch, corr: Correlation) -> tuple[np.ndarray, np.ndarray]:
    """(rows of every kernel, memcpy, memset and sync, in row order; each one's launch call row or
    -1): the correlation's links, and sync events linked by correlation id the same way."""
    sync = np.flatnonzero(batch.kind == Kind.SYNC)
    launch_rows = np.flatnonzero(kinds_in(batch.kind, LAUNCH_KINDS))
    launch_rows = launch_rows[batch.correlation[launch_rows] != MISSING]
    sync_launch = _lookup(_keys(batch, sync, "correlation"), _keys(batch, launch_rows, "correlation"),
                          launch_rows)
    sync_launch[batch.correlation[sync] == MISSING] = -1
    rows = np.concatenate([corr.gpu_rows, sync])
    order = np.argsort(rows, kind="stable")
    return rows[order], np.concatenate([corr.launch_of_gpu, sync_launch])[order]


def _operator_of(batch: EventBatch, corr: Correlation, ops: np.ndarray, gpu_rows: np.ndarray
                 ) -> np.ndarray:
    """Per GPU operation: its operator by external id (index into ``ops``), or -1; sync events
    are left to the time nesting."""
    out = np.full(len(gpu_rows), -1, np.int64)
    if len(ops) and len(corr.gpu_rows):
        out[np.searchsorted(gpu_rows, corr.gpu_rows)] = operator_of_gpu_op(batch, corr, ops)
    return out


def _frame_table(batch: EventBatch) -> tuple[list[str], np.ndarray]:
    """(the frame texts, the frame id of each name id). Name ids past the string table:
    ``len(strings)`` is the folded ``ProfilerStep#*``, ``len(strings) + 1`` is ``NO_LAUNCH``."""
    texts = list(batch.strings) + [STEP_ROW, NO_LAUNCH]
    index: dict[str, int] = {}
    frame_of_name = np.fromiter((index.setdefault(t, len(index)) for t in texts), np.int64, len(texts))
    return list(index), frame_of_name


def _scope_names(batch: EventBatch, scopes: np.ndarray) -> np.ndarray:
    names = batch.name[scopes].astype(np.int64)
    names[batch.kind[scopes] == Kind.STEP] = len(batch.strings)
    return names


def _self_cpu_ns(batch: EventBatch, scopes: np.ndarray, caller: np.ndarray,
                 op_in_scopes: np.ndarray) -> np.ndarray:
    """Each operator's duration less those of the operators directly inside it (the nearest
    operator among its enclosing scopes is its parent)."""
    is_op = np.zeros(len(scopes), bool)
    is_op[op_in_scopes] = True
    parent = caller[op_in_scopes]
    live = np.flatnonzero(parent >= 0)
    while len(live):  # climb through Python frames to the nearest operator
        live = live[~is_op[parent[live]]]
        parent[live] = caller[parent[live]]
        live = live[parent[live] >= 0]
    duration = batch.duration_ns[scopes[op_in_scopes]]
    own = duration.copy()
    inside = parent >= 0
    np.subtract.at(own, np.searchsorted(op_in_scopes, parent[inside]), duration[inside])
    own[batch.kind[scopes[op_in_scopes]] == Kind.STEP] = 0
    return own


def samples(batch: EventBatch, model: StackModel,
            groups: tuple[np.ndarray, np.ndarray] | None = None) -> Samples:
    """The GPU operations and operators of ``model`` grouped by stack and labels, figures summed;
    ``groups`` (per GPU operation, per operator) splits them further."""
    g, o = model.gpu_rows, model.op_rows
    gpu_group, op_group = groups if groups is not None else (np.full(len(g), -1, np.int64),
                                                             np.full(len(o), -1, np.int64))
    kind = batch.kind[g].astype(np.int64)
    copy = np.where(kind == Kind.MEMCPY, batch.subkind[g].astype(np.int64), -1)
    kernel_class = np.where(kind == Kind.SYNC, -1, model.gpu_class.astype(np.int64))
    none = np.full(len(o), -1, np.int64)
    keys = np.stack([np.concatenate(c) for c in (
        (model.gpu_stack, model.op_stack), (batch.rank[g].astype(np.int64), batch.rank[o].astype(np.int64)),
        (batch.device[g].astype(np.int64), none), (batch.stream[g], none), (kind, np.full(len(o), OPERATOR, np.int64)),
        (kernel_class, none), (copy, none), (gpu_group, op_group))], 1)
    gpu = np.concatenate([batch.duration_ns[g], np.zeros(len(o), np.int64)])
    cpu = np.concatenate([np.zeros(len(g), np.int64), model.op_self_ns])
    count = np.concatenate([np.ones(len(g), np.int64), np.zeros(len(o), np.int64)])
    if not len(keys):
        empty = np.zeros(0, np.int64)
        return Samples(*([empty] * 11))
    uniq, inverse = unique_rows(keys)

    def total(values: np.ndarray) -> np.ndarray:  # exact int64 sums (bincount sums in floats)
        out = np.zeros(len(uniq), np.int64)
        np.add.at(out, inverse, values)
        return out

    c = uniq.T
    return Samples(stack=c[0], rank=c[1], device=c[2], stream=c[3], kind=c[4], kernel_class=c[5], copy=c[6],
                   group=c[7], gpu_ns=total(gpu), cpu_ns=total(cpu), count=total(count))


def step_rows(batch: EventBatch, model: StackModel) -> tuple[np.ndarray, np.ndarray]:
    """(per GPU operation, per operator) the row of the step (``Kind.STEP`` event) of its rank that
    holds the moment it began on the CPU, or -1: a GPU operation's launch call start (its own start
    when the trace has no launch call), an operator's start. Steps follow one another; where two
    overlap, the one that began last holds the moment."""
    g, o = model.gpu_rows, model.op_rows
    when_gpu = np.where(model.gpu_launch >= 0, batch.start_ns[np.maximum(model.gpu_launch, 0)],
                        batch.start_ns[g]) if len(g) else np.zeros(0, np.int64)
    rows = np.concatenate([g, o])
    when = np.concatenate([when_gpu, batch.start_ns[o]])
    out = np.full(len(rows), -1, np.int64)
    steps = np.flatnonzero(batch.kind == Kind.STEP)
    for rank in distinct(batch.rank[steps]).tolist():
        mine = steps[batch.rank[steps] == rank]
        mine = mine[np.argsort(batch.start_ns[mine], kind="stable")]
        at = np.flatnonzero(batch.rank[rows] == rank)
        candidate = np.searchsorted(batch.start_ns[mine], when[at], side="right") - 1
        step = mine[np.maximum(candidate, 0)]
        inside = (candidate >= 0) & (when[at] < batch.end_ns[step])
        out[at[inside]] = step[inside]
    return out[:len(g)], out[len(g):]


def used_frames(model: StackModel, stack_ids: np.ndarray) -> np.ndarray:
    """The frame ids, ascending, of ``stack_ids`` and all their callers."""
    used = np.zeros(len(model.stack_frame), bool)
    level = distinct(stack_ids)
    while len(level):  # the stacks, then their callers, up to the outermost
        used[level] = True
        level = distinct(model.stack_caller[level])
        level = level[~used[level]]
    frame_ids = distinct(model.stack_frame[used])
    return frame_ids[frame_ids >= 0]


def frame_paths(model: StackModel, stack_ids: np.ndarray) -> dict[int, np.ndarray]:
    """Per stack id of ``stack_ids``: its frame ids, innermost first (callers' paths computed once)."""
    paths: dict[int, np.ndarray] = {0: np.zeros(0, np.int64)}
    for stack_id in distinct(stack_ids).tolist():
        chain = []
        while stack_id not in paths:
            chain.append(stack_id)
            stack_id = int(model.stack_caller[stack_id])
        for s in reversed(chain):
            paths[s] = np.concatenate([model.stack_frame[s:s + 1], paths[int(model.stack_caller[s])]])
    return paths


def class_name(index: int) -> str:
    return KERNEL_CLASSES[index]


def copy_name(kind: int) -> str:
    return MemcpyKind(kind).name if kind != MemcpyKind.UNKNOWN else "unknown"
