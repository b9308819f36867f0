"""The ranks' own summary sections on the client: each rank's section arrives compressed and is
written at once to a private temporary file (``SectionFile``), so the client's memory does not
grow with the number of ranks; the document's ``ranks`` (``LazyRanks``) reads them back one at a
time when it is written.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import zlib
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO

from ..analysis.summary_schema import RankSection

log = logging.getLogger(__name__)


class SectionFile(Mapping[str, bytes]):
    """Rank -> compressed section, the bytes kept in an unnamed temporary file (created private to
    the user, in their temporary folder, and gone when it is closed or the process ends). Where
    that file cannot be made or written (no usable temporary folder, a full disk), the sections
    are kept in memory instead, after one warning."""

    def __init__(self) -> None:
        self._file: BinaryIO | None = None
        try:
            self._file = tempfile.TemporaryFile(prefix="otel-profiler-ranks-", buffering=0)
        except OSError as exc:
            self._give_up(exc)
        self._where: dict[str, tuple[int, int] | bytes] = {}
        self._end = 0

    def _give_up(self, exc: OSError) -> None:
        log.warning("the ranks' sections are kept in memory: no temporary file for them (%s)", exc)
        if self._file is not None:
            self._file.close()
        self._file = None

    def put(self, rank: str, packed: bytes) -> None:
        if self._file is not None:
            try:
                written = 0
                while written < len(packed):
                    written += os.pwrite(self._file.fileno(), packed[written:], self._end + written)
                self._where[rank] = (self._end, len(packed))
                self._end += len(packed)
                return
            except OSError as exc:
                self._where = {r: self[r] for r in self._where}  # read back while the file is there
                self._give_up(exc)
        self._where[rank] = packed

    def __getitem__(self, rank: str) -> bytes:
        where = self._where[rank]
        if isinstance(where, bytes):
            return where
        offset, size = where
        assert self._file is not None
        return os.pread(self._file.fileno(), size, offset)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


class LazyRanks(dict):
    """The document's ``ranks``: each rank's section kept compressed (in memory or in a
    ``SectionFile``) until it is read (``[]``, ``get``, ``items``, ``values``), and a JSON writer
    (``json``'s indented encoder reads ``items()``) decompresses one section at a time."""

    def __init__(self, sections: Mapping[str, bytes]) -> None:
        super().__init__(dict.fromkeys(sections))
        self._packed = sections

    def __getitem__(self, key: str) -> RankSection:
        return json.loads(zlib.decompress(self._packed[key]))

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self._packed else default

    def items(self):
        return ((k, self[k]) for k in self._packed)

    def values(self):
        return (self[k] for k in self._packed)

    def __iter__(self):
        return iter(self._packed)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, dict) and dict(self.items()) == dict(other.items())

    __hash__ = None
