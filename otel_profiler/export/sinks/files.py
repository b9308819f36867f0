"""File sinks: OTLP JSON lines, length-delimited protobuf files, and the spool for undelivered requests.

- JSON lines: one OTLP/JSON ``ExportTraceServiceRequest`` per line, the format of the OpenTelemetry
  Collector's ``file`` exporter (its ``otlpjsonfile`` receiver reads it back).
- ``.pb`` and spool files: length-delimited ``ExportTraceServiceRequest`` messages (varint length,
  then the message), as protobuf's ``writeDelimitedTo`` writes them.
- The spool keeps requests the endpoint did not take, up to ``max_bytes`` per process; past the
  limit or on a write error (full disk) the request is dropped and counted, with one warning. Files
  are named ``spool-<pid>-<seq>.pb`` (ranks can share a folder); ``drain`` sends the process's own
  files oldest first once the endpoint answers again and deletes what was delivered. A spool folder
  it creates is user-only (0700) and its files 0600, like profile folders: spans carry code names.
"""

from __future__ import annotations

import glob
import os
import threading
from typing import Callable, Iterator

from cuda_tracer.private_files import make_private_dir, open_private

from ..otlp import read_delimited, write_delimited


class DelimitedFile:
    """Appends length-delimited requests to one file."""

    def __init__(self, path: str) -> None:
        self.path = path
        make_private_dir(os.path.dirname(os.path.abspath(path)))
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
        make_private_dir(os.path.dirname(os.path.abspath(path)))
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
    return sorted(files, key=lambda p: (os.path.getmtime(p), p))


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
        self._file = None
        self._file_path = ""
        self._file_bytes = 0
        self._seq = 0
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
            try:
                if self._file is None or self._file_bytes >= self.ROLL_BYTES:
                    self._roll()
                n = write_delimited(self._file, request)
                self._file.flush()
            except OSError as exc:
                self._warn_once("error", f"cannot write OTLP spool {self.folder} "
                                         f"({exc.strerror or exc}); undelivered spans are dropped")
                self._close_file(truncate_to=self._file_bytes)
                return f"spool not writable ({exc.strerror or exc.__class__.__name__})"
            self._file_bytes += n
            self.size += n
            return None

    def _roll(self) -> None:
        self._close_file()
        make_private_dir(self.folder)
        self._seq += 1
        self._file_path = os.path.join(self.folder, f"spool-{os.getpid()}-{self._seq:06d}.pb")
        self._file = open_private(self._file_path, "ab")
        self._file_bytes = 0

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
        prefix = f"spool-{os.getpid()}-"
        return [p for p in spool_files(self.folder) if os.path.basename(p).startswith(prefix)] \
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
            n, _, stopped = drain_file(path, lambda r: SENT if send(r) == SENT else DOWN)
            sent += n
            if stopped:
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


def drain_file(path: str, send: Callable[[bytes], str]) -> tuple[int, int, bool]:
    """Send the requests of one delimited file; delete it when all went, else keep what did not
    (rewritten atomically; on a write error the file stays as it was: sent twice later, never
    lost). Returns (sent, kept, stopped: the endpoint was down)."""
    with open(path, "rb") as f:
        data = f.read()
    requests: list[bytes] = []
    try:
        for r in read_delimited(data):
            requests.append(r)
    except ValueError:
        pass  # a truncated tail (crash mid-write): keep what parses
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
    elif sent:
        tmp = path + ".tmp"
        try:
            with open_private(tmp, "wb") as f:
                for request in kept:
                    write_delimited(f, request)
            os.replace(tmp, path)
        except OSError:
            try:
                os.remove(tmp)
            except OSError:
                pass
    return sent, len(kept), stopped
