"""Types of the C trace scanner built from ``_scan.c`` (read by ``trace_scan.scan_piece``)."""

from typing import Any, Callable

def scan(piece: bytes | memoryview, decode_string: Callable[[bytes], str], /) -> tuple[Any, ...] | None: ...
N_ARGS: int
N_COMMON_ARGS: int
