"""A profile store behind an fsspec URL (``s3://bucket/prefix``, ``gs://...``, ``az://...``: any fsspec
filesystem, with its package: the ``remote`` extra), mirrored into a local folder that the app reads
as a local store (its database and report cache live there too, since SQLite cannot live in a bucket).

Each scan lists the remote store once (one recursive listing) and copies a run's metadata and
summary only when its files changed (their names, sizes and ETags or modification times); a run's
event files are copied when its report is first built. A run gone from the remote store leaves the
mirror. An upload is written to the remote store (its summary last), never only to the mirror.
Credentials come from the filesystem's usual places (for S3: ``AWS_ACCESS_KEY_ID``, ``~/.aws``, an
instance role; an endpoint with ``FSSPEC_S3_ENDPOINT_URL`` or ``AWS_ENDPOINT_URL``)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
from pathlib import Path
from typing import Any

from cuda_tracer.private_files import make_private_dir, open_private

from ...shared.upload import PROFILE_FILE, shown_url
from .locations import APP_FOLDER, mirror_folder
from .store import NOT_RUNS, valid_run_id

SUMMARY_FILES = re.compile(r"rank-\d+\.json|summary\.json")
"""What a scan copies: the landing page's facts. Event files wait for the report."""
SAVE_EVERY = 200


class RemoteStoreError(Exception):
    """The remote store cannot be used (the message names it, without credentials, and why)."""


class RemoteStore:
    """The remote store at ``url`` and its local mirror (``mirror``)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.shown = shown_url(self.url)
        try:
            from fsspec.core import url_to_fs

            self.fs, self.root = url_to_fs(self.url)
        except ImportError as exc:
            raise RemoteStoreError(f"{self.shown}: needs its filesystem package ({exc}; for s3:// "
                                   "pip install -e '.[remote]' in the otel-profiler clone)") from None
        except (ValueError, TypeError) as exc:
            raise RemoteStoreError(f"{self.shown}: not a store URL fsspec can open ({exc})") from None
        self.root = self.root.rstrip("/")
        self.mirror = mirror_folder(self.url)
        make_private_dir(self.mirror)
        make_private_dir(os.path.join(self.mirror, APP_FOLDER))
        self._signatures_file = Path(self.mirror, APP_FOLDER, "remote-signatures.json")
        self._fetching = threading.Lock()

    def check(self) -> None:
        """Raise ``RemoteStoreError`` unless the store can be listed now."""
        try:
            self.fs.invalidate_cache()
            if not self.fs.isdir(self.root):
                raise RemoteStoreError(f"{self.shown}: no such store (not a folder or bucket prefix)")
        except RemoteStoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - each filesystem raises its own errors
            raise RemoteStoreError(f"{self.shown}: cannot list the store ({_first_line(exc)})") from None

    def _listing(self) -> dict[str, dict[str, dict[str, Any]]]:
        """{run id: {file name: its listing entry}} of the profile files directly in each run folder."""
        self.fs.invalidate_cache()
        runs: dict[str, dict[str, dict[str, Any]]] = {}
        for path, info in self.fs.find(self.root, detail=True).items():
            parts = path[len(self.root):].strip("/").split("/")
            if len(parts) != 2 or parts[0] in NOT_RUNS or not valid_run_id(parts[0]):
                continue
            if PROFILE_FILE.fullmatch(parts[1]) and info.get("type", "file") == "file":
                runs.setdefault(parts[0], {})[parts[1]] = info
        return runs

    def sync(self) -> None:
        """Bring the mirror in step with the remote store (raises the filesystem's errors)."""
        listing = self._listing()
        known = self._signatures()
        copied = 0
        for run_id, files in listing.items():
            signature = _signature(files)
            if known.get(run_id) != signature:
                self._copy_run(run_id, files)
                known[run_id] = signature
                copied += 1
                if copied % SAVE_EVERY == 0:  # a long first copy resumes where it stopped
                    self._save(known)
        for run_id in [r for r in known if r not in listing]:
            shutil.rmtree(os.path.join(self.mirror, run_id), ignore_errors=True)
            del known[run_id]
        self._save(known)

    def _copy_run(self, run_id: str, files: dict[str, dict[str, Any]]) -> None:
        """Copy the run's metadata and summary; drop mirrored files that changed or left."""
        folder = os.path.join(self.mirror, run_id)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        for name in os.listdir(folder):
            if name not in files or not SUMMARY_FILES.fullmatch(name):
                os.remove(os.path.join(folder, name))  # event files come again with the report
        for name in sorted(files, key=lambda n: n == "summary.json"):
            if SUMMARY_FILES.fullmatch(name):
                self._get(run_id, name)

    def _get(self, run_id: str, name: str) -> None:
        target = os.path.join(self.mirror, run_id, name)
        tmp = f"{target}.part"
        self.fs.get_file(f"{self.root}/{run_id}/{name}", tmp)
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)

    def fetch_events(self, run_id: str) -> None:
        """Copy the run's event files and memory snapshots that the mirror lacks (before its report
        is built); raises the filesystem's errors."""
        with self._fetching:
            self.fs.invalidate_cache()
            remote = self.fs.ls(f"{self.root}/{run_id}", detail=False)
        folder = os.path.join(self.mirror, run_id)
        for path in remote:
            name = path.rstrip("/").rsplit("/", 1)[-1]
            if PROFILE_FILE.fullmatch(name) and not os.path.exists(os.path.join(folder, name)):
                self._get(run_id, name)

    def publish(self, folder: str, run_id: str) -> bool:
        """Write the uploaded run ``folder`` to the remote store as ``run_id`` (event files first, the
        summary last); False when the store holds that run already."""
        target = f"{self.root}/{run_id}"
        self.fs.invalidate_cache()
        if self.fs.exists(target):
            return False
        order = {"summary.json": 2}
        for name in sorted(os.listdir(folder), key=lambda n: (order.get(n, 1 if n.endswith(".json") else 0), n)):
            self.fs.put_file(os.path.join(folder, name), f"{target}/{name}")
        return True

    def _signatures(self) -> dict[str, str]:
        try:
            doc = json.loads(self._signatures_file.read_text(encoding="utf-8"))
            return doc if isinstance(doc, dict) else {}
        except (OSError, ValueError):
            return {}

    def _save(self, signatures: dict[str, str]) -> None:
        tmp = self._signatures_file.with_suffix(".tmp")
        with open_private(str(tmp), "w", encoding="utf-8") as f:
            json.dump(signatures, f)
        os.replace(tmp, self._signatures_file)


def _signature(files: dict[str, dict[str, Any]]) -> str:
    """What changes when a run's remote files do: names, sizes, ETags (else modification times)."""
    parts = []
    for name in sorted(files):
        info = files[name]
        stamp = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified") or ""
        parts.append(f"{name}:{info.get('size')}:{stamp}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"{type(exc).__name__}: {text}"[:300]
