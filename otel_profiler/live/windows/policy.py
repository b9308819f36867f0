"""When detailed capture runs: the profiling-window policy, kept free of I/O so it is easy to test.

The session asks ``want(step, now_ns)`` at every step boundary and opens or closes the detailed
source accordingly. A window is wanted while any of these holds:

- ``range``: ``OTEL_PROFILER_STEPS=A:B`` and ``A <= step < B``;
- ``every``: ``OTEL_PROFILER_EVERY_STEPS=N`` and ``step % N < WINDOW_STEPS``;
- ``duration``: fewer than ``OTEL_PROFILER_DURATION_S`` seconds since the session began;
- ``signal`` / ``trigger``: SIGUSR2 or the trigger socket asked for one (``request``); the next
  ``WINDOW_STEPS`` steps;
- ``remote``: a capture request of the Profiler app for this run (``live.remote_capture``): the
  same steps on every rank;
- ``retry``: a window's capture was lost (torch's Python tracer failed as it stopped); as many steps
  as it lost, from the next one on (``retry``);
- ``slow``: a step took more than ``SLOW_STEP_FACTOR`` × the median of the recent uncaptured steps;
  its ``WINDOW_STEPS`` successors are captured so the slowness is seen while it lasts. Within a
  budget, so that a job that stalls now and then is not profiled all the time: at most
  ``SLOW_SHARE`` of the steps seen and of the wall time since the start in slow windows, and at
  least ``SLOW_COOLDOWN_STEPS`` steps between the end of one slow window and the next (the first
  slow window needs only the cool-down).
"""

from __future__ import annotations

import collections
import statistics

SLOW_HISTORY = 50
SLOW_MIN_HISTORY = 5
SLOW_SHARE = 0.01
"""The most the slow-step trigger may capture: this share of the steps seen and of the wall time."""
SLOW_COOLDOWN_STEPS = 100
"""Steps that must pass after a slow window before the next one may open."""


class WindowPolicy:
    def __init__(self, step_range: tuple[int, int] | None = None, every: int = 0, window_steps: int = 5,
                 duration_s: float = 0.0, slow_factor: float = 0.0, start_ns: int = 0) -> None:
        self.step_range = step_range
        self.every = every
        self.window_steps = window_steps
        self.duration_ns = int(duration_s * 1e9)
        self.slow_factor = slow_factor
        self.start_ns = start_ns
        self._demanded: str | None = None  # who asked; set from signal handlers and the trigger thread
        self._until: dict[str, int] = {}
        self._remote: list[tuple[int, int]] = []  # [first, end) of the app's capture requests
        self._history: collections.deque[int] = collections.deque(maxlen=SLOW_HISTORY)
        self._reason: str | None = None  # what the last want() answered
        self._steps_seen = 0
        self._slow_steps = 0  # steps captured by slow windows, and their time
        self._slow_ns = 0
        self._slow_ends_at = -SLOW_COOLDOWN_STEPS  # step at which the last slow window ends

    def request(self, via: str = "trigger") -> None:
        """Ask for a window starting at the next step boundary (signal- and thread-safe); ``via``:
        ``signal`` or ``trigger``, the window's reason."""
        self._demanded = via

    def retry(self, step: int, steps: int) -> None:
        """Capture ``steps`` steps from ``step`` on, in place of a window whose capture was lost."""
        self._until["retry"] = step + steps

    def remote(self, first_step: int, steps: int) -> None:
        """Capture steps ``first_step`` to ``first_step + steps - 1`` (thread-safe: the poll thread
        calls it; one list append)."""
        self._remote = [r for r in self._remote[-7:]] + [(first_step, first_step + steps)]

    @property
    def steps_seen(self) -> int:
        """Steps finished so far (this process trains once it is above 0)."""
        return self._steps_seen

    def recent_step_s(self) -> float | None:
        """The median of the recent uncaptured steps' times, in seconds (None before any)."""
        history = list(self._history)
        return statistics.median(history) / 1e9 if history else None

    def want(self, step: int, now_ns: int) -> str | None:
        """The reason to capture step ``step`` in detail, or None."""
        via, self._demanded = self._demanded, None
        if via:
            self._until[via] = step + self.window_steps
        if self.duration_ns and now_ns - self.start_ns < self.duration_ns:
            return "duration"
        if self.step_range and self.step_range[0] <= step < self.step_range[1]:
            return "range"
        if self.every and step % self.every < self.window_steps:
            return "every"
        if any(first <= step < end for first, end in self._remote):
            return "remote"
        self._reason = None
        for reason, until in self._until.items():
            if step < until:
                self._reason = reason
                return reason
        return None

    def step_finished(self, step: int, duration_ns: int, captured: bool, now_ns: int | None = None) -> None:
        """Feed a finished step's duration; a slow one opens a ``slow`` window for its successors."""
        self._steps_seen += 1
        if captured and self._reason == "slow":
            self._slow_steps += 1
            self._slow_ns += duration_ns
        if captured:  # captured steps carry the profiler's own cost
            return
        history = self._history
        if (self.slow_factor and len(history) >= SLOW_MIN_HISTORY
                and duration_ns > self.slow_factor * statistics.median(history)
                and self._slow_budget_left(step, now_ns)):
            self._until["slow"] = self._slow_ends_at = step + 1 + self.window_steps
        history.append(duration_ns)

    def _slow_budget_left(self, step: int, now_ns: int | None) -> bool:
        """May a slow window of ``window_steps`` open after ``step``? (cool-down, step and time share)"""
        if step - self._slow_ends_at < SLOW_COOLDOWN_STEPS:
            return False
        if not self._slow_steps:  # the first one is free: a short job still sees its slow step
            return True
        if self._slow_steps + self.window_steps > SLOW_SHARE * self._steps_seen:
            return False
        return now_ns is None or self._slow_ns <= SLOW_SHARE * (now_ns - self.start_ns)
