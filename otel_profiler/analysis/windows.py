"""The detailed windows a live run captured, as the summary lists them (``steps.windows``).

A rank's metadata lists its windows with the live policy's reasons (``live.windows.policy``); the
summary names them for a reader: ``steps`` (``OTEL_PROFILER_STEPS``), ``every``
(``OTEL_PROFILER_EVERY_STEPS``), ``slow_step``, ``trigger`` (``otel-profiler trigger --port`` or
``--pid`` through the socket), ``signal`` (SIGUSR2), ``duration`` (``OTEL_PROFILER_DURATION_S``, or
the time window of a run without steps) and ``remote``. A window whose events were lost is left
out; the window captured again in its place (``retry``) takes the lost one's reason.
"""

from __future__ import annotations

from typing import Any

SUMMARY_REASONS = {"range": "steps", "every": "every", "slow": "slow_step", "trigger": "trigger",
                   "demand": "trigger", "signal": "signal", "duration": "duration", "time": "duration",
                   "remote": "remote"}
"""The live policy's reason of a window -> the summary's (``demand``: either request, before the two
were told apart)."""


def captured_windows(windows: Any) -> list[dict[str, Any]]:
    """``[{first_step, last_step, reason}]`` of the captured windows of a rank's metadata list."""
    out: list[dict[str, Any]] = []
    lost_reason = None
    for w in windows if isinstance(windows, list) else []:
        if not (isinstance(w, dict) and isinstance(w.get("first_step"), int) and isinstance(w.get("last_step"), int)):
            continue
        reason = str(w.get("reason"))
        if reason == "retry":
            reason = lost_reason or "steps"
        if not w.get("captured"):
            lost_reason = reason
            continue
        out.append({"first_step": w["first_step"], "last_step": w["last_step"],
                    "reason": SUMMARY_REASONS.get(reason, reason)})
    return out
