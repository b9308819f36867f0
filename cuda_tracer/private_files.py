"""Files and folders only their owner can read: profiles, spools and exports carry user data.

Folders are created 0700 and files 0600 at creation (not chmod-ed afterwards), whatever the umask.
Profile and spool folders are written only when they are private: created here, or an existing
folder this user owns that no other user can write (:func:`make_private_dir`); another user's
folder, a group- or world-writable one, or a symbolic link of another user is refused with
:class:`UnsafeFolderError`, so a folder pre-created by someone else (in a shared ``/tmp``) never
receives a byte. Files are never opened through a symbolic link (``O_NOFOLLOW``), and mode
``"x"`` makes a new file only (``O_EXCL``), never writing into an existing one.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import IO, Any, Callable

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FLAGS = {"w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
          "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL}


class UnsafeFolderError(PermissionError):
    """A folder other users can own or write: nothing is written there. ``strerror`` says why."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(errno.EPERM, problem, path)


def make_private_dir(path: str) -> None:
    """Create ``path`` as 0700 (missing parents too), or accept an existing folder only if this user
    owns it and no other user can write it; else raise :class:`UnsafeFolderError`. A symbolic link
    is followed only when this user (or root) owns it. Other failures raise their ``OSError``."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    check_private_dir(path)


def check_private_dir(path: str) -> None:
    """Raise :class:`UnsafeFolderError` unless ``path`` is a folder this user owns and only this
    user can write (see :func:`make_private_dir`). The folder is checked through an open handle,
    so it cannot be swapped for another between the check and the answer."""
    fd = _open_private_dir(path)
    if fd is not None:
        os.close(fd)


def _open_private_dir(path: str) -> int | None:
    """An open handle on the private folder ``path`` (checked as :func:`check_private_dir` says), or
    None where there are no POSIX owners (Windows)."""
    if not hasattr(os, "geteuid"):  # no POSIX owners: nothing to check
        return None
    uid = os.geteuid()
    link = os.lstat(path)
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (uid, 0):
        raise UnsafeFolderError(path, f"is a symbolic link of another user (uid {link.st_uid})")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISLNK(link.st_mode) and (st.st_dev, st.st_ino) != (link.st_dev, link.st_ino):
            raise UnsafeFolderError(path, "was replaced while it was checked")
        if st.st_uid != uid:
            raise UnsafeFolderError(path, f"belongs to another user (uid {st.st_uid})")
        if st.st_mode & 0o022:
            raise UnsafeFolderError(path, f"can be written by other users (mode {stat.S_IMODE(st.st_mode):04o})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _at(folder: str, fd: int | None, name: str) -> tuple[str, dict[str, Any]]:
    """``name`` of ``folder`` as ``os.open`` takes it: relative to the checked handle ``fd``, or the
    whole path where there is none (Windows)."""
    return (name, {"dir_fd": fd}) if fd is not None else (os.path.join(folder, name), {})


def open_in_private_dir(folder: str, name: str, mode: str = "w", **kwargs: Any) -> IO:
    """:func:`open_private` of the file ``name`` in the private folder ``folder``, made through the
    handle the folder was checked by: a folder swapped meanwhile for a link or for another user's
    folder gets nothing (:class:`UnsafeFolderError`), wherever the swap's target is."""
    fd = _open_private_dir(folder)
    try:
        path, at = _at(folder, fd, name)
        return _fdopen(os.open(path, _FLAGS[mode[0]] | _NOFOLLOW | _CLOEXEC, 0o600, **at), mode, **kwargs)
    finally:
        if fd is not None:
            os.close(fd)


def write_in_private_dir(folder: str, name: str, write: Callable[[IO], None], mode: str = "w",
                         **kwargs: Any) -> str:
    """Write the file ``name`` of the private folder ``folder`` whole or not at all: ``write`` fills
    ``name.tmp``, which is then renamed; both through one checked handle on the folder (see
    :func:`open_in_private_dir`). An ``OSError`` leaves no temporary file. Returns the file's path."""
    fd = _open_private_dir(folder)
    try:
        tmp, at = _at(folder, fd, name + ".tmp")
        final, _ = _at(folder, fd, name)
        try:
            with _fdopen(os.open(tmp, _FLAGS[mode[0]] | _NOFOLLOW | _CLOEXEC, 0o600, **at), mode, **kwargs) as f:
                write(f)
            os.replace(tmp, final, **({} if fd is None else {"src_dir_fd": fd, "dst_dir_fd": fd}))
        except OSError:
            try:
                os.unlink(tmp, **at)
            except OSError:
                pass  # not made, or gone already
            raise
    finally:
        if fd is not None:
            os.close(fd)
    return os.path.join(folder, name)


def make_parent_dirs(path: str) -> None:
    """Create the missing folders above the file ``path`` as 0700 (existing ones are left as they
    are: an output file the user names may go anywhere they can write)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)


def open_private(path: str, mode: str = "w", **kwargs: Any) -> IO:
    """``open(path, mode)`` for writing ("w", "wb", "a", "ab", or "x", "xb": a new file only),
    creating the file as 0600; a symbolic link at ``path`` is refused (``OSError``, ELOOP)."""
    return _fdopen(os.open(path, _FLAGS[mode[0]] | _NOFOLLOW | _CLOEXEC, 0o600), mode, **kwargs)


def _fdopen(fd: int, mode: str, **kwargs: Any) -> IO:
    try:
        return os.fdopen(fd, mode.replace("x", "w"), **kwargs)
    except Exception:
        os.close(fd)
        raise
