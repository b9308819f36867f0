"""Make a trace file that torch wrote with stray bytes readable, in place and in bounded memory.

torch 2.4's Python tracer sometimes names a function from memory that was already freed (seen in a
window's trace: ``"numpy/ma/core.py(0): `\\xc3\\xe3\\xa9H\\x7f"``), so the Chrome trace it saves
holds bytes that are not UTF-8 and control characters inside strings: no JSON reader takes the
file. ``mend_trace_file`` rewrites it with each invalid UTF-8 sequence as U+FFFD and each control
character as a space. Outside strings the only control characters JSON allows are whitespace, which
a space also is, so nothing that was valid changes meaning. A stray quote or backslash in such a
name cannot be mended; the file stays unreadable and the caller says so.

Used on the live path's own temporary copy of a window's trace (``capture.kineto``), never on a
user's file.
"""

from __future__ import annotations

import codecs
import os
import tempfile

CHUNK_BYTES = 1 << 20
_CONTROL_TO_SPACE = bytes.maketrans(bytes(range(32)), b" " * 32)


def mend_trace_file(path: str) -> None:
    """Rewrite ``path`` as valid UTF-8 without raw control characters (one chunk in memory)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    fd, mended = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".mended-")
    try:
        with open(path, "rb") as source, os.fdopen(fd, "wb") as target:
            while chunk := source.read(CHUNK_BYTES):
                target.write(decoder.decode(chunk).encode("utf-8").translate(_CONTROL_TO_SPACE))
            target.write(decoder.decode(b"", final=True).encode("utf-8"))
        os.replace(mended, path)
    finally:
        if os.path.exists(mended):
            os.unlink(mended)
