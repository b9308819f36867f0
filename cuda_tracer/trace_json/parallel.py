"""One large trace read by several processes: this process decompresses the text and cuts it into
pieces at event boundaries (``trace_stream``); forked reader processes decode and convert the
pieces into columns (``trace_convert.convert_part``), which come back in file order.

Used for a single file whose text is at least ``MIN_PARALLEL_TEXT`` (smaller ones are read faster
by one process than the pool starts), from a single-threaded process where forking is safe. At most
two pieces per reader are in flight, so memory holds the columns and a few pieces.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from typing import Callable

import msgspec

from cuda_tracer.profile import TraceError
from cuda_tracer.trace_json.assemble import Part
from cuda_tracer.trace_json.schema import TraceFile
from cuda_tracer.trace_json.stream import read_stream

MIN_PARALLEL_TEXT = 48 << 20


def can_fork() -> bool:
    """Reader processes can be forked: the platform has fork and this process one thread."""
    return hasattr(os, "fork") and threading.active_count() == 1


def convert_piece(piece: bytes) -> Part | str:
    """In a reader process: one piece's events as columns, or what makes them unusable."""
    from cuda_tracer.trace_json.convert import convert_part  # imported by the parent before the fork: no cost
    from cuda_tracer.trace_json.stream import decode_events

    try:
        events = decode_events(piece)
    except msgspec.ValidationError as exc:
        return f"not a Chrome/Kineto trace ({exc})"
    except (msgspec.DecodeError, RecursionError) as exc:
        return f"invalid JSON ({exc})"
    del piece
    return convert_part(events)


def read_parallel(path: str, chunks, workers: int,
                  convert: Callable[[bytes], Part | str] = convert_piece) -> tuple[TraceFile, list[Part]]:
    """The file's fields and its pieces' ``Part``s, in file order. Raises ``TraceError``."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    pending: deque = deque()
    parts: list[Part] = []

    def take_oldest() -> None:
        result = pending.popleft().result()
        if isinstance(result, str):
            raise TraceError(path, result)
        parts.append(result)

    def submit(piece: bytes) -> None:
        pending.append(pool.submit(convert, piece))
        while len(pending) > 2 * workers:
            take_oldest()

    try:
        doc = read_stream(path, chunks, submit, decode=False)
        while pending:
            take_oldest()
    except BrokenProcessPool:
        raise TraceError(path, "not read: a reader process was killed (out of memory?)") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return doc, parts
