"""The session's window part on its own: ``DetailedWindows`` driven step by step with real Kineto capture
(torch on the CPU), its ``WindowState`` as the rank metadata lists it, and the fence around a torch scope."""

from __future__ import annotations

import warnings
from time import perf_counter_ns

import pytest

from cuda_tracer.model.events import Kind
from otel_profiler.live.windows.capture import DetailedWindows, window_event
from otel_profiler.live.windows.policy import WindowPolicy
from otel_profiler.live.windows.state import DEFERRED_PART, WindowState


def _windows(step_range: tuple[int, int], part_steps: int) -> DetailedWindows:
    return DetailedWindows(WindowPolicy(step_range=step_range), frozenset({"cpu_op"}), part_steps, rank=lambda: 3)


def _run(windows: DetailedWindows, torch, steps: range) -> None:
    for step in steps:
        windows.update(step, perf_counter_ns())
        torch.ones(4).sum()


def test_a_window_is_captured_in_parts_and_listed_once_closed():
    torch = pytest.importorskip("torch")
    windows = _windows((1, 6), part_steps=2)
    _run(windows, torch, range(8))
    parts = [capture for capture, window in windows.finished if window is None]
    (closing,) = [(capture, window) for capture, window in windows.finished if window is not None]
    assert len(parts) == 2 and closing[0] is not None  # steps 1-2, 3-4, then 5 with the close
    ops = sum(capture.to_batch().of_kind(Kind.CPU_OP).names().count("aten::ones")
              for capture in parts + [closing[0]])
    assert ops == 5  # one per captured step: no gap, no overlap between parts
    (meta,) = windows.meta()
    assert list(meta) == ["reason", "first_step", "start_ns", "captured", "parts", "end_ns", "last_step"]
    assert (meta["reason"], meta["first_step"], meta["last_step"], meta["parts"], meta["captured"]) == \
        ("range", 1, 5, 3, True)
    assert windows.window is None and not windows.source_running()


def test_a_hand_over_inside_a_torch_scope_waits_for_the_safe_point():
    torch = pytest.importorskip("torch")
    windows = _windows((0, 10), part_steps=2)
    _run(windows, torch, range(2))
    windows.torch_scope_entered()  # the optimizer's step scope opened while the source ran
    windows.update(2, perf_counter_ns())  # the part is due, but the restart would land in the scope
    assert windows.window is not None and windows.window.deferred == DEFERRED_PART and windows.waiting
    assert not windows.finished
    windows.torch_scope_left()
    windows.safe_point(2)
    assert not windows.waiting and windows.source_running()
    assert len(windows.finished) == 1 and windows.window.parts == 2
    windows.close(3)
    assert windows.meta()[0]["last_step"] == 2


def test_the_window_event_carries_reason_and_steps():
    window = WindowState(reason="demand", first_step=4, start_ns=1_000, part_first_step=4)
    open_event = window_event(window, rank=2)  # still open: ends where it starts, last step -1
    assert open_event.columns["end_ns"][0] == 1_000 and open_event.extra_value == ["demand", 4, -1]
    window.end_ns, window.last_step = 5_000, 8
    event = window_event(window, rank=2)
    assert event.columns["rank"][0] == 2 and event.columns["end_ns"][0] == 5_000
    assert event.extra_value == ["demand", 4, 8]
    assert "deferred" not in window.as_meta() and "part_first_step" not in window.as_meta()


def test_a_window_lost_to_torchs_python_tracer_is_captured_again_in_the_steps_after_it():
    torch = pytest.importorskip("torch")
    windows = _windows((1, 4), part_steps=10)
    _run(windows, torch, range(2))
    assert windows.source.records_modules

    def failing_stop() -> None:  # as torch 2.4 to 2.6 stop when a thread was inside a C call
        raise RuntimeError('!stack.empty() INTERNAL ASSERT FAILED at "../torch/csrc/autograd/profiler_python.cpp":969, '
                           "please report a bug to PyTorch. Python replay stack is empty.")

    windows.source._prof.stop = failing_stop
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(windows, torch, range(2, 10))
    assert [str(w.message) for w in caught if "Python tracer failed" in str(w.message)]
    lost, retry = windows.meta()
    assert (lost["reason"], lost["first_step"], lost["last_step"]) == ("range", 1, 3)
    assert (retry["reason"], retry["first_step"], retry["last_step"], retry["captured"]) == ("retry", 4, 6, True)
    (capture,) = [c for c, w in windows.finished if w is not None and w.reason == "retry"]
    batch = capture.to_batch()
    assert batch.of_kind(Kind.CPU_OP).names().count("aten::ones") == 3  # steps 4 to 6, and no more
    assert not batch.of_kind(Kind.PYTHON_FUNCTION).names()  # the retry records no module calls
    assert not windows.backed_off and windows.window is None
