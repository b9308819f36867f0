"""Nesting by time: the packed two-key sort gives exactly the order of the six-key one, on every
kind of input (ties, points, wide ranges that take the unpacked path); the one-pass nesting in C and
numpy's pointer jumping give the parents of a plain stack walk, on random events and on every
shared trace."""

from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import ALL_TRACES
from cuda_tracer.loading import load_profile
from cuda_tracer.model.events import LAUNCH_KINDS, kinds_in
from otel_profiler.analysis.attribution import time_nesting
from otel_profiler.analysis.attribution.operators import operator_rows
from otel_profiler.analysis.attribution.time_nesting import _start_order

try:
    from otel_profiler.analysis.attribution import _nesting
except ImportError:  # not built: the tests of the native pass skip
    _nesting = None


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("wide", [False, True])
def test_start_order_is_the_lexsort_order(seed, wide):
    rng = np.random.default_rng(seed)
    n = 5000
    thread = rng.integers(0, 2**40 if wide else 6, n)
    start = rng.integers(10**15, 10**15 + (2**40 if wide else 10**4), n)
    end = start + rng.integers(0, 50, n)  # many equal starts and ends
    is_point = rng.integers(0, 2, n).astype(bool)
    np.testing.assert_array_equal(_start_order(thread, start, end, is_point),
                                  np.lexsort((is_point, -end, start, thread)))


def test_start_order_of_nothing_is_empty():
    empty = np.zeros(0, np.int64)
    assert len(_start_order(empty, empty, empty, empty.astype(bool))) == 0


# ------------------------------------------------------------------ the one pass and the pointer jumping
def _stack_walk(thread, start, end, point) -> list[int]:
    """The parents by the definition, one event at a time: the chain of the predecessor's open
    operators, popped while they do not enclose."""
    out, stack = [], []
    for i in range(len(start)):
        if i and thread[i] != thread[i - 1]:
            stack = []
        while stack and (end[stack[-1]] < end[i] or end[stack[-1]] <= start[i]):
            stack.pop()
        out.append(stack[-1] if stack else -1)
        if not point[i]:
            stack.append(i)
    return out


def _sorted_events(seed: int, nested: bool, n: int = 3000):
    """Random events of a few threads in start order: overlapping ones, or properly nested ones."""
    rng = np.random.default_rng(seed)
    thread = np.sort(rng.integers(0, 4, n))
    start = rng.integers(0, 10**4, n)
    if nested:  # intervals cut from a random bracket sequence: every pair nested or disjoint
        start, end = _brackets(rng, n)
    else:
        end = start + rng.integers(0, 300, n)
    point = rng.integers(0, 4, n) == 0
    end = np.where(point, start, end)
    order = time_nesting._start_order(thread, start, end, point)
    return thread[order], start[order], end[order], point[order]


def _brackets(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    start, end, open_ = np.zeros(n, np.int64), np.zeros(n, np.int64), []
    t, made = 0, 0
    while made < n or open_:
        t += int(rng.integers(0, 3))
        if made < n and (not open_ or rng.random() < 0.55):
            open_.append(made)
            start[made] = t
            made += 1
        else:
            end[open_.pop()] = t
    return start, end


@pytest.mark.skipif(not time_nesting.native_nesting(), reason="the one-pass nesting is not built here")
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("nested", [False, True], ids=["overlapping", "nested"])
def test_the_one_pass_and_the_pointer_jumping_find_the_parents_the_definition_gives(seed, nested):
    thread, start, end, point = _sorted_events(seed, nested)
    native = np.empty(len(start), np.int64)
    _nesting.enclosing(thread, start, end, point.view(np.uint8), native)
    jumped = time_nesting._pointer_jumping(thread, start, end, point)
    walked = _stack_walk(thread.tolist(), start.tolist(), end.tolist(), point.tolist())
    assert native.tolist() == walked
    assert jumped.tolist() == walked
    if nested:  # there, the parent is the innermost operator enclosing the event, found by brute force
        for i in range(0, len(start), 37):
            around = [j for j in range(i) if thread[j] == thread[i] and not point[j]
                      and end[j] >= end[i] and end[j] > start[i]]
            assert walked[i] == (max(around) if around else -1)


@pytest.mark.skipif(not time_nesting.native_nesting(), reason="the one-pass nesting is not built here")
def test_every_shared_traces_operators_and_launches_nest_the_same_both_ways(monkeypatch):
    for path in ALL_TRACES:
        batch = load_profile([str(path)]).batch()
        ops = operator_rows(batch)
        launches = np.flatnonzero(kinds_in(batch.kind, LAUNCH_KINDS))
        native = time_nesting.parents(batch, ops, launches)
        monkeypatch.setenv("OTEL_PROFILER_PURE_PYTHON", "1")
        jumped = time_nesting.parents(batch, ops, launches)
        monkeypatch.delenv("OTEL_PROFILER_PURE_PYTHON")
        for a, b in zip(native, jumped):
            np.testing.assert_array_equal(a, b, err_msg=path.name)


def test_the_native_pass_refuses_arrays_of_different_lengths():
    if not time_nesting.native_nesting():
        pytest.skip("the one-pass nesting is not built here")
    five, four = np.zeros(5, np.int64), np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="differ in length"):
        _nesting.enclosing(five, five, four, np.zeros(5, np.uint8), np.empty(5, np.int64))


def test_the_nesting_is_built_where_the_tests_run_in_ci():
    """CI installs with a C compiler: a pass that failed to build must not go unnoticed."""
    if os.environ.get("CI"):
        assert time_nesting.native_nesting()


@pytest.mark.parametrize("seed", range(6))
def test_depths_count_every_enclosing_event_as_a_walk_up_the_parents_does(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    parent = np.array([rng.integers(-1, i) if i else -1 for i in range(n)], np.int64)
    shuffle = rng.permutation(n)  # parents at any index, not only earlier ones
    position = np.empty(n, np.int64)
    position[shuffle] = np.arange(n)
    parent = np.where(parent[shuffle] >= 0, position[np.maximum(parent[shuffle], 0)], -1)
    walked = []
    for i in range(n):
        depth, at = 0, parent[i]
        while at >= 0:
            depth, at = depth + 1, parent[at]
        walked.append(depth)
    assert time_nesting.depths(parent).tolist() == walked
