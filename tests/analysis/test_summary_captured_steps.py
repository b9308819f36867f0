"""Which steps a live run captured in detail: the summary lists them (``steps.captured``) and a note
says that the step after each window holds the work of closing it (a user comparing step times with
their own timer sees why that one is slower)."""

from __future__ import annotations

from otel_profiler.analysis.summary import _rank_meta, complete


def _summary(*metas: dict) -> dict:
    out = {"ranks_meta": [_rank_meta(m) for m in metas], "steps": {"count": 40}, "memory": {}, "devices": {},
           "launch": {"orphan_gpu_ops": 0}}
    complete(out, [])
    return out


def _window(first: int, last: int, captured: bool = True) -> dict:
    return {"reason": "steps", "first_step": first, "last_step": last, "captured": captured, "parts": 1}


def test_the_captured_steps_are_listed_and_the_step_after_each_window_is_named():
    summary = _summary({"windows": [_window(1, 10), _window(20, 22), _window(30, 31, captured=False)]},
                       {"windows": [_window(1, 10), _window(23, 24)]})
    assert summary["steps"]["captured"] == [[1, 10], [20, 24]]
    assert ("steps 1-10, 20-24 were captured in detail (operators, kernels); the step after each window "
            "(11, 25) also holds the profiler's work of closing it, so compare step times outside them"
            ) in summary["notes"]


def test_a_profile_without_windows_says_nothing_of_them():
    summary = _summary({"windows": []}, {})
    assert "captured" not in summary["steps"]
    assert not any("captured in detail" in note for note in summary["notes"])
