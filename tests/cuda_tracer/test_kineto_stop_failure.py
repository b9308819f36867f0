"""When torch's Python tracer fails as a window stops (torch 2.6: ``Python replay stack is empty``),
the window is lost but capture goes on: torch's profiler left on is turned off, later windows record
operators without module calls, and the job's own profilers are not mistaken for it."""

from __future__ import annotations

import pytest

from cuda_tracer.capture import kineto, subscriber
from cuda_tracer.model.events import Kind

torch = pytest.importorskip("torch")

TRACER_FAILURE = ('!stack.empty() INTERNAL ASSERT FAILED at "/pytorch/torch/csrc/autograd/profiler_python.cpp":983, '
                  "please report a bug to PyTorch. Python replay stack is empty.")


def work() -> None:
    model = torch.nn.Linear(8, 4)
    model(torch.randn(2, 8)).sum().backward()


def test_a_failed_python_tracer_turns_module_calls_off_and_capture_goes_on():
    source = kineto.KinetoSource({"cpu_op"})
    assert source.records_modules
    source.start()
    work()

    def failing_stop() -> None:  # torch raised half-way through its stop: its profiler is still on
        raise RuntimeError(TRACER_FAILURE)

    source._prof.stop = failing_stop
    with pytest.raises(kineto.PythonTracerFailed):
        source.stop()
    assert not subscriber._torch_profiler_enabled()  # turned off: not taken for the job's own profiler
    assert kineto.other_profiler() is None
    assert not source.records_modules

    source.start()
    work()
    batch = source.stop().to_batch()
    assert len(batch.of_kind(Kind.CPU_OP)) > 0
    assert not any(n.startswith(kineto.MODULE_PREFIX) for n in batch.of_kind(Kind.PYTHON_FUNCTION).names())


def test_any_other_stop_failure_is_raised_as_it_is():
    source = kineto.KinetoSource({"cpu_op"})
    source.start()
    real_stop = source._prof.stop

    def failing_stop() -> None:
        real_stop()
        raise RuntimeError("something else")

    source._prof.stop = failing_stop
    with pytest.raises(RuntimeError, match="something else"):
        source.stop()
    assert source.records_modules
