"""Opening what a user names as a trace file, safely.

- Only regular files are read: a FIFO, a device (``/dev/zero``), a socket or a folder is refused with
  one clear error before anything can block or stream forever (the file is opened non-blocking and
  checked with ``fstat``, so a path swapped for a FIFO after the check is refused too).
- A gzip file's text is bounded: it may decompress to at most ``MAX_EXPANSION`` times its
  compressed size (real Kineto traces compress 7 to 30 times), and never less than
  ``MIN_TEXT_LIMIT``. The bound holds for every part read so far, not only for the whole file:
  past ``MIN_TEXT_LIMIT`` of text, the text read may not exceed ``MAX_EXPANSION`` times the
  compressed bytes read, so a gzip bomb is refused after about ``MIN_TEXT_LIMIT`` of text (what
  was parsed of it is little), not after its whole allowance. ``max_text_bytes`` (the command
  line's ``--max-json-mb``) sets one limit for the whole text explicitly instead. Gzip is
  decompressed by ISA-L (``isal``) when it is installed.
- A UTF-8 byte-order mark at the start of the text is dropped (JSON parsers refuse it; some
  Windows tools write one).
"""

from __future__ import annotations

import errno
import gzip
import os
import stat
import zlib
from typing import TYPE_CHECKING, BinaryIO, Callable, Generator

from cuda_tracer.profile import TraceError

if TYPE_CHECKING:  # the type checker sees the standard library's reader; ISA-L's has its interface
    from gzip import GzipFile
    from zlib import error as _IsalError
else:
    try:  # ISA-L's gzip reader: the same results, about three times faster than zlib's
        from isal.igzip import GzipFile
        from isal.isal_zlib import error as _IsalError
    except ImportError:  # pragma: no cover - isal is a dependency; zlib still reads every file
        GzipFile = gzip.GzipFile
        _IsalError = zlib.error
_GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile, _IsalError)

MAX_EXPANSION = 100
"""The most JSON text per byte of gzip a trace file may hold, unless set explicitly."""

MIN_TEXT_LIMIT = 64 << 20
"""Small gzip files may always decompress to this much."""

_BOM = b"\xef\xbb\xbf"

CHUNK_BYTES = 8 << 20
"""Text is decompressed (and, when streamed, decoded) this many bytes at a time."""

FIRST_CHUNK_BYTES = 2 << 20
"""The first chunk is smaller: a reader that scans the text in another thread starts on it
sooner (it waited for 16 MB to be decompressed before: a tenth of a 53 MB file's read)."""

_NOT_REGULAR = ((stat.S_ISDIR, "is a directory, not a trace file"),
                (stat.S_ISFIFO, "is a FIFO (named pipe), not a regular file: only files are read"),
                (stat.S_ISCHR, "is a character device, not a regular file: only files are read"),
                (stat.S_ISBLK, "is a block device, not a regular file: only files are read"),
                (stat.S_ISSOCK, "is a socket, not a regular file: only files are read"))


def _check_regular(path: str, mode: int) -> None:
    if not stat.S_ISREG(mode):
        problem = next((p for test, p in _NOT_REGULAR if test(mode)), "is not a regular file")
        raise TraceError(path, problem)


def open_regular(path: str) -> BinaryIO:
    """``open(path, "rb")`` for a regular file only; raises ``TraceError`` for anything else,
    without blocking (a FIFO with no writer would block a plain ``open``)."""
    try:
        _check_regular(path, os.stat(path).st_mode)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceError(path, "is a directory, not a trace file") from None
    except PermissionError:
        raise TraceError(path, "cannot read (permission denied)") from None
    except OSError as exc:
        raise TraceError(path, read_problem(exc)) from None
    try:
        _check_regular(path, os.fstat(fd).st_mode)  # the path may have changed since the stat
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_problem(exc: OSError) -> str:
    """What an ``OSError`` from opening or reading a file means, as its error line says it."""
    if exc.errno == errno.ELOOP:
        return "too many levels of symbolic links (a symlink loop)"
    return f"cannot read ({exc.strerror or exc})"


def text_limit(compressed_bytes: int, max_text_bytes: int | None = None) -> int:
    """The most text a gzip file of ``compressed_bytes`` may decompress to."""
    if max_text_bytes:
        return max_text_bytes
    return max(MIN_TEXT_LIMIT, MAX_EXPANSION * compressed_bytes)


def text_size(path: str) -> int:
    """Bytes of JSON text in a trace file, without reading it: a gzip file's own record of it (its
    last four bytes, the size modulo 4 GiB, so not below 8 bytes per compressed byte for files that
    large) within the limit, else the file size; 0 for a file that cannot be read."""
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            if f.read(2) != b"\x1f\x8b" or size < 18:
                return size
            f.seek(-4, os.SEEK_END)
            recorded = int.from_bytes(f.read(4), "little")
        return min(max(recorded, size, 8 * size if size > 2**28 else 0), text_limit(size))
    except (OSError, TraceError):
        return 0


def is_gzip(f: BinaryIO) -> bool:
    head = f.read(2)
    f.seek(0)
    return head == b"\x1f\x8b"


def text_chunks(path: str, max_text_bytes: int | None = None, chunk_bytes: int = CHUNK_BYTES,
                progress: Callable[[int], None] | None = None) -> Generator[bytes, None, None]:
    """The file's JSON text in chunks of at most ``chunk_bytes``, gunzipped when it is gzip (by
    content, not by name). Raises ``TraceError`` for an unreadable file, corrupt gzip data, or text
    beyond the limit (see the module docstring). ``progress`` is called with each count of the
    file's own bytes read (compressed bytes for gzip)."""
    with open_regular(path) as f:
        done = 0

        def report() -> None:
            nonlocal done
            if progress is not None:
                now = f.tell()
                progress(now - done)
                done = now

        try:
            first_bytes = min(chunk_bytes, FIRST_CHUNK_BYTES)
            if not is_gzip(f):
                first = True
                while chunk := f.read(first_bytes if first else chunk_bytes):
                    report()
                    if first and chunk.startswith(_BOM):
                        chunk = chunk[len(_BOM):]
                    first = False
                    yield chunk
                return
            limit = text_limit(os.fstat(f.fileno()).st_size, max_text_bytes)
            total = 0
            with GzipFile(fileobj=f, mode="rb") as z:
                while chunk := z.read(min(chunk_bytes if total else first_bytes, limit + 1 - total)):
                    if not total and chunk.startswith(_BOM):
                        chunk, total = chunk[len(_BOM):], len(_BOM)
                    total += len(chunk)
                    # the whole limit, and (not set explicitly) the limit of the part read so far
                    if total > limit or (not max_text_bytes and total > text_limit(f.tell())):
                        raise TraceError(path, _too_large(limit, max_text_bytes, total, f.tell()))
                    report()
                    yield chunk
        except _GZIP_ERRORS as exc:
            raise TraceError(path, f"corrupt or truncated gzip data ({exc})") from None
        except OSError as exc:
            raise TraceError(path, read_problem(exc)) from None


def _too_large(limit: int, explicit: int | None, text: int, compressed: int) -> str:
    mib = limit / (1 << 20)
    if explicit:
        return f"decompresses to more than {mib:,.0f} MiB of JSON (the --max-json-mb limit)"
    if text <= limit:  # refused part-way: the part read so far expands too much
        return (f"decompresses to more than {MAX_EXPANSION} times its compressed size "
                f"({text / (1 << 20):,.0f} MiB of JSON from its first {compressed / (1 << 20):,.1f} MiB; "
                "a gzip bomb?); give --max-json-mb to read it anyway")
    return (f"decompresses to more than {mib:,.0f} MiB of JSON, over {MAX_EXPANSION} times its "
            "compressed size (a gzip bomb?); give --max-json-mb to read it anyway")


def read_text(path: str, max_text_bytes: int | None = None) -> bytearray:
    """The file's whole JSON text (see ``text_chunks``); an empty file is a ``TraceError``."""
    data = bytearray()  # grown in place: no second copy of the whole text
    for chunk in text_chunks(path, max_text_bytes):
        data += chunk
    if not data or data.isspace():
        raise TraceError(path, "empty file")
    return data
