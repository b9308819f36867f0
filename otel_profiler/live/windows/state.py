"""One detailed window's state, from its opening to the ``windows`` entry of the rank's metadata."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFERRED_START = "start"
"""A start waits for a safe point (``capture``)."""
DEFERRED_PART = "part"
"""A part's hand-over (and the restart) waits for a safe point."""


@dataclass
class WindowState:
    """A detailed window: why it opened, its steps and times, and what capturing it has done."""

    reason: str  # duration, range, every, signal, trigger, slow, retry or time (``policy``)
    first_step: int
    start_ns: int  # wall clock (``time_ns``)
    part_first_step: int  # the first step of the part being captured
    captured: bool = False  # the detailed source runs (or ran) for it
    parts: int = 0  # parts started so far
    deferred: str | None = None  # DEFERRED_START or DEFERRED_PART while waiting for a safe point
    end_ns: int | None = None  # set when it closes
    last_step: int | None = None  # set when it closes

    def as_meta(self) -> dict[str, Any]:
        """The window as the rank's metadata lists it (a closed window)."""
        out: dict[str, Any] = {"reason": self.reason, "first_step": self.first_step, "start_ns": self.start_ns,
                               "captured": self.captured, "parts": self.parts}
        if self.end_ns is not None:
            out["end_ns"] = self.end_ns
        if self.last_step is not None:
            out["last_step"] = self.last_step
        return out
