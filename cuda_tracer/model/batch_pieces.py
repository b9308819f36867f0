"""One rank's batch as pieces of whole steps, in time order, for work that is done piece by piece
(``otel-profiler export`` builds and encodes the spans of one piece at a time, so its memory holds
one piece's spans, not all of them).

Each row is placed by its anchor time: its start, except for a GPU op with a known launch call,
which goes with its launch (a kernel that runs after the next step began still belongs with the
call that queued it). The rows are cut only where a step begins, into pieces of at least
``PIECE_ROWS`` rows (the last may be smaller); within a piece the rows keep the batch's order. A
batch without two steps, or not larger than one piece, is one piece.

Given a window length, a cut is also kept out of every window of rows outside the steps (a
consumer groups those by window, and one split in two would become two groups), until a piece
reaches twice ``PIECE_ROWS``: then memory comes first and the window is cut at a step.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from cuda_tracer.model.correlate import correlate
from cuda_tracer.model.events import EventBatch, Kind

PIECE_ROWS = 250_000


def anchor_times(batch: EventBatch) -> np.ndarray:
    """Each row's start, or for a GPU op with a known launch call that call's start."""
    times = batch.start_ns.copy()
    corr = correlate(batch)
    linked = corr.launch_of_gpu >= 0
    times[corr.gpu_rows[linked]] = batch.start_ns[corr.launch_of_gpu[linked]]
    return times


def step_pieces(batch: EventBatch, piece_rows: int = PIECE_ROWS,
                window_ns: int | None = None) -> Iterator[EventBatch]:
    """The batch in pieces of whole steps (see the module docstring). ``window_ns``: rows outside
    every step are grouped by the consumer into windows of this length (``t // window_ns``); cuts
    then keep such a window whole while a piece is under twice ``piece_rows``."""
    rows = np.flatnonzero(batch.kind == Kind.STEP)
    rows = rows[np.argsort(batch.start_ns[rows], kind="stable")]
    steps, step_ends = batch.start_ns[rows], batch.end_ns[rows]
    if len(batch) <= piece_rows or len(steps) < 2:
        yield batch
        return
    times = anchor_times(batch)
    order = np.argsort(times, kind="stable")
    times = times[order]
    bounds = np.searchsorted(times, steps, side="left")  # where each step's rows begin
    whole = _window_kept_whole(times, steps, step_ends, bounds, window_ns) if window_ns else \
        np.ones(len(bounds), bool)
    del times
    cuts, last = [], 0
    for b, keeps_windows in zip(bounds.tolist(), whole.tolist()):
        if b - last >= (piece_rows if keeps_windows else 2 * piece_rows):
            cuts.append(b)
            last = b
    if len(order) - last < piece_rows // 4 and cuts:  # no small tail piece: join it to the last
        cuts.pop()
    for lo, hi in zip([0, *cuts], [*cuts, len(order)]):
        yield batch.take(np.sort(order[lo:hi]))


def _window_kept_whole(times: np.ndarray, steps: np.ndarray, step_ends: np.ndarray,
                       bounds: np.ndarray, window_ns: int) -> np.ndarray:
    """Which cuts at ``bounds`` (the start of each step in the sorted ``times``) leave every window
    of rows outside the steps on one side. The rows after the steps before a cut go with the piece
    after it (a consumer holds them until it knows no step of theirs is still open), so a cut's
    window side is drawn where those steps end."""
    i = np.searchsorted(steps, times, side="right") - 1
    outside = (i < 0) | (times >= step_ends[np.maximum(i, 0)])
    window = times // window_ns
    positions = np.arange(len(times))
    last_out = np.maximum.accumulate(np.where(outside, positions, -1))  # last outside row at or before
    next_out = np.minimum.accumulate(np.where(outside, positions, len(times))[::-1])[::-1]
    closed = np.searchsorted(times, np.r_[steps[0], np.maximum.accumulate(step_ends)[:-1]], side="left")
    edge = np.minimum(closed, bounds)  # where the rows of the piece after the cut begin
    before = last_out[np.maximum(edge - 1, 0)]
    after = next_out[np.minimum(edge, len(times) - 1)]
    split = (edge > 0) & (before >= 0) & (after < len(times))
    split[split] = window[before[split]] == window[after[split]]
    return ~split
