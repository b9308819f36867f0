"""What an export counts: every batch received, span built, exported, spooled and dropped, every
request sent, spooled and dropped, and the levels of the spool and the network queue. In the
exporter process they live in shared memory (``exporter_state``), so the training process reads
them even after the exporter process was killed; ``otel-profiler export`` keeps them in a list."""

from __future__ import annotations

from typing import Any

COUNTERS = (
    "batches_received", "batches_finished", "batches_failed",
    "spans_built", "spans_exported", "spans_rejected", "spans_spooled", "spans_dropped",
    "requests_sent", "requests_failed_attempts", "requests_spooled", "requests_dropped",
    "spool_requests_delivered", "file_bytes_written",
    "metric_snapshots_received", "metric_requests_sent", "metric_requests_failed",
    "metric_points_exported", "metric_points_rejected", "metric_points_dropped",
    # levels, not counts: what the spool holds now, what waits for the network now
    "spool_bytes", "requests_pending", "spans_pending",
)


class Counters:
    """Named integer counters in a list (the CLI) or a shared array (the exporter process)."""

    def __init__(self, storage: Any = None) -> None:
        self._s = storage if storage is not None else [0] * len(COUNTERS)
        self._index = {name: i for i, name in enumerate(COUNTERS)}

    def add(self, name: str, n: int = 1) -> None:
        self._s[self._index[name]] += n

    def set(self, name: str, value: int) -> None:
        self._s[self._index[name]] = value

    def get(self, name: str) -> int:
        return int(self._s[self._index[name]])

    def snapshot(self) -> dict[str, int]:
        return {name: int(self._s[i]) for i, name in enumerate(COUNTERS)}
