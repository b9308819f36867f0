"""Work handed on between threads, in order: a producer runs in a background thread and what it
emits reaches the consumer through a small queue, so that the stages of reading a file overlap
(decompression, cutting and scanning pieces, converting them) where the work lets go of the GIL
(the native scanner does, for all of its pass over a piece).

A producer's error reaches the consumer where it would have in one thread; a consumer that stops
early (an error of its own, or closing the generator) stops the producer and waits for its thread,
so no thread and no open file outlive the read.
"""

from __future__ import annotations

import queue
import threading
from contextlib import closing
from typing import Any, Callable, Generator

_POLL_S = 0.05  # how often a producer waiting for room checks whether the consumer stopped


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Stopped(BaseException):
    """Raised by ``emit`` in the producer once the consumer has stopped: unwinds the producer."""


class _Done:
    def __init__(self, value: Any) -> None:
        self.value = value


def ahead(produce: Callable[[Callable[[Any], None]], Any], depth: int = 2,
          name: str = "otel-profiler-read-ahead") -> Generator[Any, None, Any]:
    """Run ``produce(emit)`` in a thread, yielding what it emits, at most ``depth`` items ahead of
    the consumer; returns (as the generator's value) what ``produce`` returned. Once the consumer
    has stopped, ``emit`` raises (a ``BaseException``, so that the producer's own handlers let it
    through), which ends the producer at its next item."""
    handoff: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def emit(item: Any) -> None:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                continue
        raise _Stopped

    def run() -> None:
        try:
            try:
                value = produce(emit)
            except _Stopped:
                return
            except BaseException as exc:  # raised in the consumer's thread instead
                emit(_Failed(exc))
                return
            emit(_Done(value))
        except _Stopped:
            pass

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = handoff.get()
            if isinstance(item, _Done):
                return item.value
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join()


def read_ahead(chunks: Generator[bytes, None, Any], depth: int = 2) -> Generator[bytes, None, Any]:
    """``chunks`` produced by a background thread (a file decompressed while the previous chunks
    are scanned); the thread closes ``chunks`` when it ends."""
    def produce(emit: Callable[[Any], None]) -> None:
        with closing(chunks):
            for chunk in chunks:
                emit(chunk)

    return ahead(produce, depth)
