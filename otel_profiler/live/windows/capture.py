"""The session's detailed windows: the window policy (``windows``) applied at each step boundary.

A window opens when the policy wants one, is handed over in parts of
``OTEL_PROFILER_WINDOW_PART_STEPS`` steps (bounded memory), and closes when the policy stops wanting
it; each closed window becomes a ``PROFILER`` event of its own. The detailed source is Kineto
(``torch.profiler``) when torch is imported, else CUPTI through cupti-python; another profiler
holding the process makes capture back off for the run. Mixed into ``session.Session``.

One rule keeps torch's heap whole: a window never starts inside a torch ``record_function`` scope
that was opened while the previous window ran. torch calls such a scope's end callback with the
context the stopped profiler gave it, and the new profiler writes the end time into the stopped
one's freed events (heap corruption: SIGSEGV or ``free(): invalid next size`` some windows later).
The optimizer hooks run inside ``Optimizer.step``'s scope, so a start that would land there
(``_start_fenced``) waits for the next safe point: the next module call or backward pass, or the
next step boundary (whose scope opened after the stop). A part handed over there waits the same
way, so long windows are handed over without a gap.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np

from cuda_tracer.model.events import EventBatch, Kind

from ...profiler_warnings import warn

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
    _step: int
    _torch_hooks: Any
    _in_torch_scope: bool  # inside the leading optimizer's step: a torch record_function scope
    _start_fenced: bool  # a start now would land in a torch scope opened while the source ran

    def _update_window(self, step: int, now: int) -> None:
        reason = self.policy.want(step, now)
        window = self._window
        if reason and window is None:
            self._open_window(reason, step)
        elif not reason and window is not None:
            self._close_window(step)
        elif window is not None and window.get("deferred"):
            self._resume_window(step)
        elif window is not None and window["captured"] and step - window["part_first_step"] >= self._part_steps:
            self._next_window_part(step)

    def _open_window(self, reason: str, step: int) -> None:
        window = {"reason": reason, "first_step": step, "start_ns": time.time_ns(), "captured": False,
                  "parts": 0, "part_first_step": step}
        self._window = window
        if self._detail_source() is not None:
            self._start_part(window, step)

    def _start_part(self, window: dict[str, Any], step: int) -> None:
        """Start capturing the next part of ``window``, or leave the start to the next safe point."""
        if self._start_fenced:
            window["deferred"] = "start"
            self._watch_for_safe_point()
            return
        window.pop("deferred", None)
        try:
            self._source.start()
        except Exception as exc:  # someone else holds the profiler: back off for good
            self._back_off(f"{exc}", announced=getattr(exc, "announced", False))
            return
        window["captured"] = True
        window["parts"] += 1
        window["part_first_step"] = step

    def _next_window_part(self, step: int) -> None:
        """Hand over what a long window captured so far and go on capturing (bounded memory)."""
        window = self._window
        if window is None:
            return
        if self._start_fenced:  # the restart would land in the scope: hand over at the safe point
            window["deferred"] = "part"
            self._watch_for_safe_point()
            return
        self._hand_over_part(window)
        self._start_part(window, step)

    def _hand_over_part(self, window: dict[str, Any]) -> None:
        try:
            self._finished.append((self._stop_source(), None))
            self._wake = True
        except Exception as exc:
            window["captured"] = False
            self._back_off(f"the detailed source failed to stop ({exc})")

    def _resume_window(self, step: int) -> None:
        """Do what waited for a safe point: a part's hand-over (and restart), or a start.

        Called at a safe point, or at the next step boundary: there a part still running is
        handed over but its restart waits again if the boundary is fenced."""
        window = self._window
        if window is None or self._backed_off:
            return
        if window.pop("deferred", None) == "part":
            if not (self._source is not None and self._source.running):
                return
            self._hand_over_part(window)
            if self._backed_off:
                return
        self._start_part(window, step)

    def safe_point(self) -> None:
        """Torch work outside any scope of the previous window (a module call, a backward pass
        returned): whatever waited for one is done now. Cheap when nothing waits."""
        window = self._window
        if window is not None and "deferred" in window and not self._start_fenced:
            self._resume_window(self._step)

    def _watch_for_safe_point(self) -> None:
        hooks = self._torch_hooks
        if hooks is not None:
            hooks.watch_module_calls()

    def _stop_source(self) -> Any:
        """Stop the detailed source; inside a torch scope, later starts in it are fenced."""
        if self._in_torch_scope:
            self._start_fenced = True
        return self._source.stop()

    def _close_window(self, step: int) -> None:
        window, self._window = self._window, None
        if window is None:
            return
        window["end_ns"] = time.time_ns()
        window["last_step"] = step - 1
        capture = None
        window.pop("part_first_step", None)
        window.pop("deferred", None)
        if window["captured"] and self._source is not None and self._source.running:
            try:
                capture = self._stop_source()
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
        from cuda_tracer.capture import cupti, kineto

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
