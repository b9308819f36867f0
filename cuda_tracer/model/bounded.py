"""Decompression with a bound, the one place the readers of the project's own compressed formats go
through (``.events`` files, ``EventBatch.load``; uploaded archives, ``app.storage.uploads``); gzip
trace JSON has its own text bound in ``trace_input``.

An :class:`Allowance` is what compressed input may decompress to: ``MIN_ALLOWANCE``, plus
``MAX_EXPANSION`` times the compressed bytes it comes from (real event files hold 1 to 32 times
their size; deflate itself cannot pass about 1,000). Data is charged before it is decompressed where
its size is declared (a zip member's and an ``.npy`` column's header), else chunk by chunk as it is
decompressed (never more than ``CHUNK`` past the bound), so a refusal costs little memory or disk.
A run's files share one allowance inside :func:`run_allowance` (the minimum counted once per run).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import zipfile
from typing import IO, Any, Callable, Iterator

import numpy as np

MAX_EXPANSION = 100
"""The most decompressed bytes per compressed byte, past ``MIN_ALLOWANCE``."""
MIN_ALLOWANCE = 16 << 20
"""Small inputs may always decompress to this much."""
CHUNK = 1 << 20
"""Undeclared data is decompressed and charged this many bytes at a time."""
_NUMERIC = "biuf"  # the dtype kinds of event columns (bool, integers, floats)
_READ_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}  # zipfile bounds their output per read


class TooLarge(ValueError):
    """Input that decompresses to more than its bound: the message says which and why."""


class Allowance:
    """What ``what`` (words for the refusal: "this file", "the archive") may decompress to:
    ``MIN_ALLOWANCE`` plus ``MAX_EXPANSION`` times the compressed bytes counted so far (given to
    :meth:`add_input`, or read from ``compressed`` when it is given)."""

    def __init__(self, what: str, compressed: Callable[[], int] | None = None) -> None:
        self.what = what
        self.used = 0
        self._inputs = 0
        self._compressed = compressed

    def add_input(self, compressed_bytes: int) -> None:
        self._inputs += compressed_bytes

    def limit(self) -> int:
        inputs = self._inputs + (self._compressed() if self._compressed else 0)
        return MIN_ALLOWANCE + MAX_EXPANSION * inputs

    def take(self, size: int, name: str) -> None:
        """Charge ``size`` decompressed bytes of ``name``; ``TooLarge`` when past the limit."""
        self.used += size
        if self.used > self.limit():
            raise TooLarge(f"{name}: decompresses to more than {MAX_EXPANSION} times the compressed size "
                           f"of {self.what} ({self.limit() >> 20} MiB): refused, a decompression bomb?")


_RUN: contextvars.ContextVar[Allowance | None] = contextvars.ContextVar("run_allowance", default=None)


@contextlib.contextmanager
def run_allowance(what: str = "the run's event files") -> Iterator[Allowance]:
    """One allowance for every file read inside the ``with`` (in this thread): a run's bound."""
    allowance = Allowance(what)
    token = _RUN.set(allowance)
    try:
        yield allowance
    finally:
        _RUN.reset(token)


def file_allowance(path_or_file: Any) -> Allowance:
    """The allowance of one compressed file (a path or a seekable file object): the run's when
    inside :func:`run_allowance`, else its own."""
    allowance = _RUN.get() or Allowance("this file")
    allowance.add_input(_size(path_or_file))
    return allowance


def _size(path_or_file: Any) -> int:
    if isinstance(path_or_file, (str, bytes, os.PathLike)):
        return os.path.getsize(path_or_file)
    here = path_or_file.tell()
    end = path_or_file.seek(0, os.SEEK_END)
    path_or_file.seek(here)
    return end - here


def copy(source: IO[bytes], target: IO[bytes], allowance: Allowance, name: str) -> None:
    """Copy ``source`` into ``target`` a chunk at a time, each charged before it is written."""
    while chunk := source.read(CHUNK):
        allowance.take(len(chunk), name)
        target.write(chunk)


def _member(zf: zipfile.ZipFile, name: str) -> zipfile.ZipInfo:
    """A member that may be read: one whose output zipfile bounds per read (and stops at the
    member's declared size)."""
    info = zf.getinfo(name)
    if info.compress_type not in _READ_METHODS:
        raise ValueError(f"{name}: compression method {info.compress_type} is not read (only stored and "
                         "deflate members, whose output is bounded)")
    return info


def read_member(zf: zipfile.ZipFile, name: str, allowance: Allowance) -> bytes:
    """A zip member's bytes, its declared size checked first, charged as they are read."""
    info = _member(zf, name)
    if allowance.used + info.file_size > allowance.limit():
        allowance.take(info.file_size, name)  # raises, naming the bound
    chunks = []
    with zf.open(info) as source:
        while chunk := source.read(CHUNK):
            allowance.take(len(chunk), name)
            chunks.append(chunk)
    return b"".join(chunks)


def read_npy_member(zf: zipfile.ZipFile, name: str, allowance: Allowance, rows: int | None = None) -> np.ndarray:
    """A 1-D numeric ``.npy`` zip member (``rows`` long when given). Its header is read first: the
    member's declared size must be exactly that header's data (zipfile stops there), charged before
    it is decompressed, into one buffer."""
    info = _member(zf, name)
    with zf.open(info) as source:
        version = np.lib.format.read_magic(source)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"{name}: .npy format version {version} is not read")
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = reader(source)
        if len(shape) != 1 or dtype.kind not in _NUMERIC:
            raise ValueError(f"{name}: not a column of numbers (shape {shape}, dtype {dtype})")
        if rows is not None and shape[0] != rows:
            raise ValueError(f"{name}: {shape[0]} rows where the other columns have {rows}")
        size = shape[0] * dtype.itemsize
        header = source.tell()
        if info.file_size < header + size:
            raise ValueError(f"{name}: {info.file_size - header:,} bytes of data where its header's "
                             f"{shape[0]:,} rows take {size:,}")
        if info.file_size > header + size:
            raise TooLarge(f"{name}: {info.file_size - header:,} bytes of data where its header's "
                           f"{shape[0]:,} rows take {size:,}: refused, a decompression bomb?")
        allowance.take(info.file_size, name)
        data, done = bytearray(size), 0
        while done < size:
            chunk = source.read(min(CHUNK, size - done))
            if not chunk:
                raise ValueError(f"{name}: truncated ({done:,} of {size:,} bytes)")
            data[done:done + len(chunk)] = chunk
            done += len(chunk)
    return np.frombuffer(data, dtype)
