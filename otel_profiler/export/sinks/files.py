"""File sinks: OTLP JSON lines, length-delimited protobuf files, and the spool for undelivered requests.

- JSON lines: one OTLP/JSON ``ExportTraceServiceRequest`` per line, the format of the OpenTelemetry
  Collector's ``file`` exporter (its ``otlpjsonfile`` receiver reads it back).
- ``.pb`` and spool files: length-delimited ``ExportTraceServiceRequest`` messages (varint length,
  then the message), as protobuf's ``writeDelimitedTo`` writes them.
- The spool keeps requests the endpoint did not take, up to ``max_bytes`` per process; past the
  limit or on a write error (full disk) the request is dropped and counted, with one warning. Files
  are named ``spool-<pid>-<random hex>-<seq>.pb`` (ranks can share a folder; names cannot be
  guessed) and made with ``O_EXCL | O_NOFOLLOW``; ``drain`` sends the process's own files oldest
  first once the endpoint answers again and deletes what was delivered. A spool folder is made
  user-only (0700) and its files 0600, like profile folders (spans carry code names); an existing
  folder another user owns or can write is refused (``cuda_tracer.private_files``): nothing is
  spooled there, the requests are dropped and counted, with one warning.
- A file that does not parse as length-delimited requests (truncated, a broken length prefix) is
  never deleted: what parses is sent, and the unreadable rest is set aside as ``NAME.bad``.
"""

from __future__ import annotations

import glob
import os
import secrets
import threading
from typing import IO, Callable, Iterator, NamedTuple, Protocol

from cuda_tracer.private_files import UnsafeFolderError, make_parent_dirs, make_private_dir, open_private

from ..otlp import read_delimited, varint, write_delimited

_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class FileSink(Protocol):
    """A file the spans are written to: ``write`` returns the bytes written."""

    path: str

    def write(self, data: bytes) -> int: ...

    def close(self) -> None: ...


class DelimitedFile:
    """Appends length-delimited requests to one file."""

    def __init__(self, path: str) -> None:
        self.path = path
        make_parent_dirs(path)
        self._f = open_private(path, "ab")

    def write(self, request: bytes) -> int:
        n = write_delimited(self._f, request)
        self._f.flush()
        return n

    def close(self) -> None:
        self._f.close()


class JsonLinesFile:
    """Appends OTLP/JSON lines (already encoded, newline-terminated) to one file."""

    def __init__(self, path: str) -> None:
        self.path = path
        make_parent_dirs(path)
        self._f = open_private(path, "ab")

    def write(self, lines: bytes) -> int:
        self._f.write(lines)
        self._f.flush()
        return len(lines)

    def close(self) -> None:
        self._f.close()


def spool_files(path: str) -> list[str]:
    """The spooled/``.pb`` files under ``path`` (a file or a folder), oldest first."""
    if os.path.isfile(path):
        return [path]
    files = glob.glob(os.path.join(path, "*.pb"))
    return sorted(files, key=lambda p: (_mtime(p), p))


def _mtime(path: str) -> float:
    """The modification time of ``path`` itself (a link's own; 0 when it is gone)."""
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


def read_requests(path: str) -> Iterator[bytes]:
    with open(path, "rb") as f:
        data = f.read()
    yield from read_delimited(data)


class Spool:
    """Bounded on-disk store of undelivered requests (see the module docstring). Thread-safe: the
    exporter's sending thread drains it while its main thread (or a close) spools into it; no
    lock is held while a drained request is on the network."""

    ROLL_BYTES = 64 * 1024 * 1024

    def __init__(self, folder: str, max_bytes: int, warn: Callable[[str], None]) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self._warn = warn
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = None
        self._file_path = ""
        self._file_bytes = 0
        self._seq = 0
        self._name = f"spool-{os.getpid()}-{secrets.token_hex(8)}-"  # + seq: unguessable, in order
        self._refused = ""  # why the folder is not used (another user's, writable by others)
        self.size = 0  # bytes this process spooled and has not delivered (the limit counts these)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self._warn(message)

    def put(self, request: bytes) -> str | None:
        """Spool one request; None when it was kept, else why it was dropped."""
        with self._lock:
            if self.size + len(request) + 10 > self.max_bytes:
                self._warn_once("full", f"OTLP spool {self.folder} reached its limit of "
                                        f"{self.max_bytes} bytes; further undelivered spans are dropped")
                return "spool limit reached"
            if self._refused:
                return self._refused
            try:
                if self._file is None or self._file_bytes >= self.ROLL_BYTES:
                    self._file = self._roll()
                n = write_delimited(self._file, request)
                self._file.flush()
            except UnsafeFolderError as exc:
                self._refused = f"spool folder refused ({exc.strerror})"
                self._warn_once("unsafe", f"OTLP spool {self.folder} is not used: it {exc.strerror}; nothing is "
                                          "written there, undelivered spans are dropped")
                return self._refused
            except OSError as exc:
                self._warn_once("error", f"cannot write OTLP spool {self.folder} "
                                         f"({exc.strerror or exc}); undelivered spans are dropped")
                self._close_file(truncate_to=self._file_bytes)
                return f"spool not writable ({exc.strerror or exc.__class__.__name__})"
            self._file_bytes += n
            self.size += n
            return None

    def _roll(self) -> IO[bytes]:
        """Close the spool file being written and open the next one (returned)."""
        self._close_file()
        make_private_dir(self.folder)
        self._seq += 1
        self._file_path = os.path.join(self.folder, f"{self._name}{self._seq:06d}.pb")
        self._file = open_private(self._file_path, "xb")
        self._file_bytes = 0
        return self._file

    def _close_file(self, truncate_to: int | None = None) -> None:
        if self._file is not None:
            try:
                if truncate_to is not None:
                    self._file.truncate(truncate_to)
                self._file.close()
            except OSError:
                pass
            self._file = None
            if truncate_to == 0:  # nothing in it: leave no empty file behind
                try:
                    os.remove(self._file_path)
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            self._close_file()

    def _own_files(self) -> list[str]:
        return [p for p in spool_files(self.folder) if os.path.basename(p).startswith(self._name)] \
            if os.path.isdir(self.folder) else []

    def drain(self, send: Callable[[bytes], str]) -> tuple[int, bool]:
        """Send this process's spooled requests oldest first (``send`` returns ``SENT`` or not);
        stop at the first failure. Other processes' files (other ranks share the folder, or
        earlier runs) are left to ``otel-profiler replay``. Returns (sent, all_done)."""
        with self._lock:
            self._close_file()  # new requests go to a new file, not to one being drained
            files = self._own_files()
        sent, done = 0, True
        for path in files:
            result = drain_file(path, lambda r: SENT if send(r) == SENT else DOWN)
            sent += result.sent
            if result.aside:
                self._warn_once("bad:" + path, f"OTLP spool file {path} is unreadable ({result.problem}); "
                                               f"the unreadable part is kept in {result.aside}")
            if result.stopped:
                done = False
                break
        with self._lock:
            self.size = sum(_size(p) for p in self._own_files())
        return sent, done


SENT, REFUSED, DOWN = "sent", "refused", "down"
"""What a ``drain_file`` sender says of one request: delivered; refused by the receiver (kept in
the file, the next request is tried); the endpoint cannot be reached (this and the rest are kept)."""


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class Drained(NamedTuple):
    """What :func:`drain_file` did with one file."""

    sent: int  # requests delivered
    kept: int  # requests left in the file (refused, or the endpoint went down)
    stopped: bool  # the endpoint was down
    aside: str = ""  # the file holding the part that could not be read ("" when all of it was read)
    problem: str = ""  # why that part could not be read


def parse_requests(data: bytes) -> tuple[list[bytes], int, str]:
    """The requests of a length-delimited file, the offset where reading stopped (``len(data)``
    when all was read) and why it stopped there: a truncated length prefix or message, or a piece
    that is not an OTLP trace request (its first field, ``resource_spans``, begins with 0x0A: a
    broken length prefix makes the next piece begin elsewhere)."""
    requests: list[bytes] = []
    pos = 0
    try:
        for request in read_delimited(data):
            if request and request[0] != 0x0A:
                return requests, pos, f"not an OTLP request at byte {pos} of {len(data)}"
            requests.append(request)
            pos += len(varint(len(request))) + len(request)
    except ValueError as exc:
        return requests, pos, f"{exc} at byte {pos} of {len(data)}"
    return requests, pos, ""


def _write_new(path: str, chunks: list[bytes], delimited: bool) -> None:
    """Write a new file (never an existing one, never through a link); no partial file is left."""
    try:
        with open_private(path, "xb") as f:
            for chunk in chunks:
                if delimited:
                    write_delimited(f, chunk)
                else:
                    f.write(chunk)
    except FileExistsError:
        raise
    except OSError:
        try:
            os.remove(path)
        except OSError:
            pass
        raise


def _set_aside(path: str, data: bytes) -> str:
    """Keep ``data`` (a file's unreadable part) in ``NAME.bad`` (``NAME.2.bad``, ... when taken)."""
    for n in range(1, 1000):
        dest = f"{path}.bad" if n == 1 else f"{path}.{n}.bad"
        try:
            _write_new(dest, [data], delimited=False)
            return dest
        except FileExistsError:
            continue
    raise FileExistsError(f"{path}.bad and 998 more names are taken")


def drain_file(path: str, send: Callable[[bytes], str]) -> Drained:
    """Send the requests of one delimited file; delete it when all went, else keep what did not
    (rewritten atomically; on a write error the file stays as it was: sent twice later, never
    lost). A part that cannot be read (a truncated tail, a broken length prefix) is first copied
    to ``NAME.bad`` (:func:`_set_aside`), then the requests before it are sent: nothing that was
    not sent or not read is ever deleted. A symbolic link is not read (``OSError``)."""
    with os.fdopen(os.open(path, _READ_FLAGS), "rb") as f:
        data = f.read()
    requests, end, problem = parse_requests(data)
    aside = _set_aside(path, data[end:]) if problem else ""
    kept: list[bytes] = []
    stopped = False
    for i, request in enumerate(requests):
        outcome = send(request)
        if outcome == SENT:
            continue
        kept.append(request)
        if outcome == DOWN:
            kept.extend(requests[i + 1:])
            stopped = True
            break
    sent = len(requests) - len(kept)
    if not kept:
        os.remove(path)
    elif sent or aside:
        tmp = f"{path}.{secrets.token_hex(4)}.tmp"
        try:
            _write_new(tmp, kept, delimited=True)
            os.replace(tmp, path)
        except OSError:
            pass  # the file stays as it was (what was sent goes twice; an unreadable part is also in .bad)
    return Drained(sent, len(kept), stopped, aside, problem)
