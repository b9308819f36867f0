"""Which events the HTML report's timeline embeds when a profile has more than it can hold.

A page with millions of events takes minutes and gigabytes to build and open, so the timeline
holds at most ``MAX_TIMELINE_EVENTS``. When there are more, the rule is per pixel-bucket: the
profile's time range is cut into equal slices (the most, in powers of two up to the budget, for
which the rule fits the budget: far finer than a pixel at full zoom-out), and on each track

- every event at least one slice long is kept,
- of the events shorter than a slice, only the longest one starting in each slice is kept (it
  stands for the others, which would share its pixel at full view).

If the events at least one slice long are still more than the budget, only the longest
``MAX_TIMELINE_EVENTS`` events are kept. Whatever is left out is counted per track and stated on
the page, with the slice width; every event is still in the summary's figures, and in the
Perfetto/Chrome trace and the spans a user can write out instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_TIMELINE_EVENTS = 250_000
"""The most events the HTML report's timeline embeds (about 2.5 MB of the page per 100,000)."""

MAX_SLICES = 1 << 20


@dataclass
class Budget:
    keep: np.ndarray  # bool per candidate event: embedded on the timeline
    slice_ns: int  # the slice width of the rule (0: nothing was left out)
    longest_only: bool  # the slices were not enough: only the longest events were kept


def thin(track: np.ndarray, start: np.ndarray, dur: np.ndarray,
         limit: int = MAX_TIMELINE_EVENTS) -> Budget:
    """The events to embed out of ``track``/``start``/``dur`` (ns), by the module's rule."""
    n = len(track)
    if n <= limit:
        return Budget(np.ones(n, bool), 0, False)
    t0 = int(start.min())
    span = int((start + dur).max()) - t0 + 1
    slices = 1 << max(0, min(MAX_SLICES, limit).bit_length() - 1)
    keep = None
    while slices >= 1:
        width = -(-span // slices)
        keep = dur >= width
        short = np.flatnonzero(~keep)
        key = track[short].astype(np.int64) * slices + (start[short] - t0) // width
        order = np.lexsort((-dur[short], key))  # per (track, slice): the longest first
        ordered = key[order]
        first = np.ones(len(order), bool)
        first[1:] = ordered[1:] != ordered[:-1]
        keep[short[order[first]]] = True
        if int(keep.sum()) <= limit:
            return Budget(keep, width, False)
        slices //= 2
    keep = np.zeros(n, bool)
    keep[np.argsort(-dur, kind="stable")[:limit]] = True
    return Budget(keep, span, True)


def left_out_note(total: int, kept: int, budget: Budget) -> str | None:
    """One sentence for the page saying what the timeline leaves out, or None."""
    if kept == total:
        return None
    if budget.longest_only:
        rule = f"only the {kept:,} longest events are shown"
    else:
        rule = (f"on each track, of the events shorter than {_duration(budget.slice_ns)} only the "
                f"longest starting in each {_duration(budget.slice_ns)} slice is shown")
    return (f"The timeline shows {kept:,} of {total:,} events ({total - kept:,} left out, counted "
            f"per track in brackets): {rule}. Every event counts in the other tabs' figures.")


def _duration(ns: int) -> str:
    for unit, size in (("s", 10**9), ("ms", 10**6), ("µs", 10**3)):
        if ns >= size:
            return f"{ns / size:.3g} {unit}"
    return f"{ns} ns"
