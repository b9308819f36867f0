"""Receiving an uploaded run (``PUT /api/runs/RUN_ID``, a gzip tar of a profile folder): unpacked into
the app's folder with only a profile folder's plain files, checked (readable metadata, the uploader's
team), then moved into the store in one rename. Any refusal leaves the store as it was.

An existing run the uploader may not see is answered as a free run id would be, up to the last step
(so another team's run names cannot be probed with a bad body); refusals name an archive's members as
the archive names them, never a folder of the server."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from typing import IO, Any, Callable

from cuda_tracer.model.bounded import Allowance, TooLarge, copy

from ...shared.upload import PROFILE_FILE
from ..auth.access import may_see_team
from ..auth.accounts import Caller
from .locations import app_folder
from .store import read_run, valid_run_id

MAX_FILES = 10_000


class UploadError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def store_upload(store: str, run_id: str, body: IO[bytes], caller: Caller, max_bytes: int,
                 publish: Callable[[str, str], bool] | None = None) -> None:
    """Put the uploaded run ``run_id`` into ``store``; raises ``UploadError`` (status, reason).
    ``publish(folder, run_id)`` writes it to a remote store instead (False: the run exists there)."""
    if caller.role not in ("admin", "member"):
        raise UploadError(403, "viewers may not upload runs")
    if not valid_run_id(run_id):
        raise UploadError(400, "not a run id (letters, digits and ._- only)")
    if _exists_for(caller, store, run_id):
        raise UploadError(409, _taken(run_id))
    incoming = app_folder(store) / "incoming"
    incoming.mkdir(mode=0o700, exist_ok=True)
    work = tempfile.mkdtemp(prefix="upload-", dir=incoming)
    try:
        folder = os.path.join(work, run_id)
        os.mkdir(folder, 0o700)
        _unpack(body, folder, max_bytes)
        facts = read_run(work, run_id, "upload")
        if facts is None or facts.status == "corrupt":
            raise UploadError(400, f"not a profile folder ({facts.reason if facts else 'no rank-N.json metadata'})")
        if not may_see_team(caller, facts.team):
            raise UploadError(403, f"the run's ml.team is {facts.team!r}; you may upload runs of {caller.team!r} only")
        if publish is not None:
            _publish(publish, folder, run_id)
            return
        target = os.path.join(store, run_id)
        if os.path.lexists(target):  # a run the uploader may not see: taken, said only now
            raise UploadError(409, _taken(run_id))
        try:
            os.rename(folder, target)  # atomic; never over a run (an empty folder: checked just above)
        except OSError:
            raise UploadError(409, _taken(run_id)) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _exists_for(caller: Caller, store: str, run_id: str) -> bool:
    """Whether ``run_id`` is in the store as far as ``caller`` may know: any entry for an admin, a run
    of the caller's team for anyone else (another team's run is read as a free id, ``access``)."""
    if not os.path.lexists(os.path.join(store, run_id)):
        return False
    if caller.is_admin:
        return True
    facts = read_run(store, run_id, "existing")
    return facts is not None and may_see_team(caller, facts.team)


def _taken(run_id: str) -> str:
    return f"run {run_id!r} already exists"


def _publish(publish: Callable[[str, str], bool], folder: str, run_id: str) -> None:
    try:
        written = publish(folder, run_id)
    except Exception as exc:  # noqa: BLE001 - each filesystem raises its own errors
        raise UploadError(502, f"cannot write the run to the store ({type(exc).__name__})") from None
    if not written:
        raise UploadError(409, _taken(run_id))


def _unpack(body: IO[bytes], folder: str, max_bytes: int) -> None:
    """Unpack the gzip tar ``body`` into ``folder``: plain files with profile names only, at most
    ``max_bytes`` unpacked, and no more than ``bounded.Allowance`` allows for the compressed bytes
    read so far (checked as each chunk is written)."""
    total = 0
    counted = _Counted(body)
    allowance = Allowance("the archive", lambda: counted.count)
    try:
        with tarfile.open(fileobj=counted, mode="r|gz") as archive:
            for count, member in enumerate(archive, 1):
                name = member.name.removeprefix("./")
                if member.isdir() and name in ("", "."):
                    continue
                if not member.isfile() or not PROFILE_FILE.fullmatch(name):
                    raise UploadError(400, f"{member.name!r}: not a file of a profile folder")
                total += member.size
                if total > max_bytes or count > MAX_FILES:
                    raise UploadError(413, f"larger than the {max_bytes >> 20} MiB an upload may unpack to")
                source = archive.extractfile(member)
                if source is None:  # a plain file always has its contents; said as for any other member
                    raise UploadError(400, f"{member.name!r}: not a file of a profile folder")
                try:
                    fd = os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                except FileExistsError:
                    raise UploadError(400, f"{member.name!r}: in the archive twice") from None
                with os.fdopen(fd, "wb") as target:
                    copy(source, target, allowance, member.name)
    except TooLarge as exc:
        raise UploadError(413, str(exc)) from None
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise UploadError(400, f"not a gzip tar of a profile folder ({_reason(exc)})") from None


class _Counted(io.RawIOBase):
    """A readable body that counts the bytes read from it (the archive's compressed bytes)."""

    def __init__(self, body: IO[bytes]) -> None:
        super().__init__()
        self.body, self.count = body, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.body.read(len(buffer))
        buffer[:len(data)] = data
        self.count += len(data)
        return len(data)


def _reason(exc: BaseException) -> str:
    """``exc`` for a client: its type and message, without the file name an OSError carries (a
    folder of the server)."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{type(exc).__name__}: {exc.strerror or 'cannot write'}"
    return f"{type(exc).__name__}: {exc}"
