"""The session's detailed windows: the window policy (``windows``) applied at each step boundary.

A window opens when the policy wants one, is handed over in parts of
``OTEL_PROFILER_WINDOW_PART_STEPS`` steps (bounded memory), and closes when the policy stops wanting
it; each closed window becomes a ``PROFILER`` event of its own. The detailed source is Kineto
(``torch.profiler``) when torch is imported, else CUPTI through cupti-python; another profiler
holding the process makes capture back off for the run. Mixed into ``session.Session``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np

from cuda_tracer.events import EventBatch, Kind

from ..profiler_warnings import warn

MAX_WINDOWS_IN_META = 1000


class CaptureWindows:
    """Opening, splitting and closing detailed windows (state lives in ``Session.__init__``)."""

    policy: Any
    activities: frozenset
    rank: int
    _part_steps: int
    _window: dict[str, Any] | None
    _windows: list[dict[str, Any]]
    _finished: list[tuple[Any, dict[str, Any] | None]]
    _wake: bool
    _source: Any
    _detail_off: str | None
    _backed_off: bool
    _told_no_cupti: bool

    def _update_window(self, step: int, now: int) -> None:
        reason = self.policy.want(step, now)
        window = self._window
        if reason and window is None:
            self._open_window(reason, step)
        elif not reason and window is not None:
            self._close_window(step)
        elif window is not None and window["captured"] and step - window["part_first_step"] >= self._part_steps:
            self._next_window_part(step)

    def _open_window(self, reason: str, step: int) -> None:
        window = {"reason": reason, "first_step": step, "start_ns": time.time_ns(), "captured": False,
                  "parts": 0, "part_first_step": step}
        self._window = window
        source = self._detail_source()
        if source is None:
            return
        try:
            source.start()
            window["captured"] = True
            window["parts"] = 1
        except Exception as exc:  # someone else holds the profiler: back off for good
            self._back_off(f"{exc}", announced=getattr(exc, "announced", False))

    def _next_window_part(self, step: int) -> None:
        """Hand over what a long window captured so far and go on capturing (bounded memory)."""
        window = self._window
        try:
            self._finished.append((self._source.stop(), None))
            self._wake = True
            self._source.start()
            window["parts"] += 1
            window["part_first_step"] = step
        except Exception as exc:
            window["captured"] = False
            self._back_off(f"the detailed source failed to restart ({exc})")

    def _close_window(self, step: int) -> None:
        window, self._window = self._window, None
        if window is None:
            return
        window["end_ns"] = time.time_ns()
        window["last_step"] = step - 1
        capture = None
        window.pop("part_first_step", None)
        if window["captured"] and self._source is not None and self._source.running:
            try:
                capture = self._source.stop()
            except Exception as exc:
                self._back_off(f"the detailed source failed to stop ({exc})")
        if len(self._windows) < MAX_WINDOWS_IN_META:
            self._windows.append(window)
        self._finished.append((capture, window))
        self._wake = True

    def _detail_source(self) -> Any:
        """The detailed source for a window opening now, else None (``_detail_off`` says why).

        Kineto (``torch.profiler``) when torch is imported; without torch, CUPTI through cupti-python
        for GPU activities (TensorFlow, JAX). Chosen at each window: torch may be imported later.
        CUPTI missing is said once and skips the window (a later one may use Kineto); CUPTI held by
        another profiler makes ``start`` raise, and detailed capture backs off for the run.
        """
        if self._backed_off:
            return None
        from cuda_tracer import cupti, kineto

        use_kineto = "torch" in sys.modules or not self.activities & kineto.GPU_ACTIVITIES
        self._detail_off = (kineto if use_kineto else cupti).unavailable_reason(self.activities)
        if self._detail_off is not None:
            if not use_kineto and not self._told_no_cupti:
                self._told_no_cupti = True
                warn(f"GPU capture without torch is unavailable: {self._detail_off}; "
                     "steps and annotations are still recorded")
            return None
        make = kineto.KinetoSource if use_kineto else cupti.CuptiWindowSource
        if type(self._source) is not make:
            self._source = make(self.activities, rank=self.rank)
        return self._source

    def _back_off(self, why: str, announced: bool = False) -> None:
        """Another profiler holds the process (or ours failed): no more detailed windows.
        ``announced``: the source has already warned, so the user gets one line, not two."""
        if not self._backed_off and not announced:
            warn(f"detailed GPU/op capture is off for this run: {why}; "
                 "annotations and steps are still recorded")
        self._backed_off = True
        self._detail_off = why


def window_event(window: dict[str, Any], rank: int) -> EventBatch:
    """A PROFILER event spanning one detailed window, with its reason and step range."""
    end = window.get("end_ns", window["start_ns"])
    batch = EventBatch.from_columns(["otel-profiler window", "reason", "first_step", "last_step"],
                                    kind=[Kind.PROFILER], name=[0], start_ns=[window["start_ns"]],
                                    end_ns=[end], rank=[rank], pid=[os.getpid()])
    batch.extra_row = np.zeros(3, np.int64)
    batch.extra_key = np.arange(1, 4, dtype=np.int32)
    batch.extra_value = [window["reason"], window["first_step"], window.get("last_step", -1)]
    return batch
