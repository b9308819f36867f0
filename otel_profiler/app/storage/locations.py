"""Where things are: whether a store is a local folder or an fsspec URL, the local folder that mirrors
a remote store, and the app's own folder inside a store (database, report cache, incoming uploads).
The storage room's ground: it imports nothing else of the app."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from ...shared.upload import shown_url

APP_FOLDER = ".otel-profiler-app"
"""The app's own folder inside a store (database, report cache); the store scan skips it."""


def app_folder(store: str) -> Path:
    """The app's folder in ``store``, made user-only on first use."""
    folder = Path(store) / APP_FOLDER
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def is_remote(store: str) -> bool:
    """Whether ``store`` is an fsspec URL rather than a local folder (``file://`` is local)."""
    return "://" in store and not store.startswith("file://")


def local_path(store: str) -> str:
    """A local store as a path (``file://`` taken off)."""
    return store[len("file://"):] if store.startswith("file://") else store


def mirror_folder(url: str) -> str:
    """The local folder that mirrors the remote store ``url`` (under ``$XDG_CACHE_HOME``, else
    ``~/.cache``): the same for ``serve``, ``users`` and ``teams`` on this machine."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = url.rstrip("/")
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", shown_url(key).split("://", 1)[-1])[:60].strip("-.")
    return os.path.join(cache, "otel-profiler", "stores", f"{readable}-{hashlib.sha256(key.encode()).hexdigest()[:12]}")
