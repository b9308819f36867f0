"""Deterministic ids of the span model: run ids, trace ids (one per step or window and rank), root
span ids and the hashing they share. Every rank's data of a step can be found by its trace id, and a
re-export gives the same ids. Light on purpose (numpy only): the profile metrics' exemplars use the
same trace ids without importing the span model.

The run-id rule, in one place: ``OTEL_PROFILER_RUN_ID`` when set; else, for a live job, the id its
session made (``live.resource.run_id``: torchrun's or SLURM's job id, else the launcher's start
time and pid), recorded in every rank's metadata (:func:`run_id_of`); else, for files exported
together, one derived from their names (:func:`run_id_of_sources`), so the ranks of a step share a
trace id prefix; else one derived from where the events came from.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from cuda_tracer.model.events import EventBatch, Kind


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer, vectorized (uint64 arithmetic wraps)."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def hash_bytes(*parts: Any, size: int = 8) -> bytes:
    h = hashlib.blake2b(digest_size=size)
    for p in parts:
        h.update(str(p).encode("utf-8", "surrogatepass"))
        h.update(b"\x1f")
    return h.digest()


def hash64(*parts: Any) -> int:
    return int.from_bytes(hash_bytes(*parts), "big") or 1


def run_id_of(meta: Mapping[str, Any]) -> str:
    """The run id: ``meta['run_id']``, else one derived from where the events came from."""
    if meta.get("run_id"):
        return str(meta["run_id"])
    return hash_bytes(meta.get("source"), meta.get("host_name"), meta.get("pid"),
                       meta.get("profiler_window_ns"), size=8).hex()


def run_id_of_sources(sources: list[str]) -> str:
    """One run id for files exported together (their base names, in any order)."""
    names = "\n".join(sorted(os.path.basename(s) for s in sources))
    return hashlib.blake2b(names.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()  # any file name


def trace_rank(meta: Mapping[str, Any], batch: EventBatch) -> int:
    """The rank a batch's traces are derived from: ``meta['rank']``, else the batch's, else 0."""
    rank = int(meta.get("rank", -1))
    if rank < 0:
        rank = int(batch.rank[0]) if len(batch) and batch.rank[0] >= 0 else 0
    return rank


def root_span_id(hi: int, lo: int) -> int:
    """The span id of the root span of trace ``(hi, lo)`` (deterministic, like the trace id)."""
    return hash64(hi, lo, "root")


def trace_id(run_id: str, rank: int, what: str, number: int | str) -> tuple[int, int]:
    """``(hi, lo)`` of the trace of step (``what="step"``) or window ``number`` of ``rank`` (a window's
    number is ``"<window>/<first anchor ns>"``)."""
    digest = hash_bytes(run_id, what, number, size=12)
    hi = int.from_bytes(digest[:8], "big")
    lo = (int.from_bytes(digest[8:12], "big") << 32) | (rank & 0xFFFFFFFF)
    return hi, lo


def batch_steps(batch: EventBatch) -> list[tuple[int, int, int]]:
    """``(step number, start_ns, end_ns)`` of the batch's STEP events, by start time."""
    rows = np.flatnonzero(batch.kind == Kind.STEP)
    rows = rows[np.argsort(batch.start_ns[rows], kind="stable")]
    numbers = batch.extra("step")
    return [(int(numbers.get(r, i)), int(batch.start_ns[r]), int(batch.end_ns[r]))
            for i, r in enumerate(rows.tolist())]
