"""Files and folders only their owner can read: profiles, spools and exports carry user data.

Folders are created 0700 and files 0600 at creation (not chmod-ed afterwards), whatever the umask.
"""

from __future__ import annotations

import os
from typing import IO, Any

_FLAGS = {"w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND}


def make_private_dir(path: str) -> None:
    """Create ``path`` (and missing parents) as 0700; an existing folder is left as it is."""
    os.makedirs(path, mode=0o700, exist_ok=True)


def open_private(path: str, mode: str = "w", **kwargs: Any) -> IO:
    """``open(path, mode)`` for writing ("w", "wb", "a", "ab"), creating the file as 0600."""
    fd = os.open(path, _FLAGS[mode[0]], 0o600)
    try:
        return os.fdopen(fd, mode, **kwargs)
    except Exception:
        os.close(fd)
        raise
