"""Strings and their ids, each string stored once, in order of first use: the string table of an
``EventBatch`` (its ``name`` column and extra keys are ids into it), and of the files written from
one (pprof's)."""

from __future__ import annotations

from typing import Iterable


class StringTable:
    """``intern(s)`` gives ``s``'s id, adding it at the end the first time; ``strings`` lists them by id."""

    __slots__ = ("strings", "_ids")

    def __init__(self, first: Iterable[str] = ()) -> None:
        self.strings: list[str] = []
        self._ids: dict[str, int] = {}
        for text in first:
            self.intern(text)

    def intern(self, text: str) -> int:
        i = self._ids.get(text)
        if i is None:
            i = self._ids[text] = len(self.strings)
            self.strings.append(text)
        return i

    def id_of(self, text: str) -> int:
        """``text``'s id, or -1 when the table does not hold it."""
        return self._ids.get(text, -1)

    def __len__(self) -> int:
        return len(self.strings)
