"""CuptiSource against a stand-in for cupti-python's GPU calls (tests/cupti_fakes.py) handing over real
cupti-python records (CPU only): lifecycle, buffer queue and its bounds, drops, clock math, and
graceful absence of cupti-python. The real module itself is tests/cuda_tracer/test_cupti_real_module.py's;
live capture is tests/gpu's.
"""

from __future__ import annotations

import sys
import warnings

import pytest

import cupti_records_real as f
from cuda_tracer.capture import subscriber
from cuda_tracer.capture.cupti import (BUFFER_BYTES, ClockCalibration, CuptiSource, calibrate, load_cupti,
                               read_dropped_records)
from cuda_tracer.capture.cupti_records import ACTIVITY_KIND
from cuda_tracer.model.events import Kind
from cupti_fakes import T0, FakeCupti
from cupti_fakes import isolated_from_other_profilers  # noqa: F401 (autouse fixture)


def test_capture_lifecycle_with_fake_module():
    mod = FakeCupti()
    src = CuptiSource(module=mod)
    assert src.start() and src.running
    assert mod.enabled == {ACTIVITY_KIND[a] for a in src.activities}
    mod.fill([f.api(1, T0, T0 + 10, 211), f.kernel(1, T0 + 20, T0 + 90)])
    mod.fill([f.memset(2, T0 + 100, T0 + 110)], complete=False)  # a buffer CUPTI is still filling
    batch = src.collect()
    assert mod.flushes == [0]  # collect asks only for completed buffers
    assert batch.kind.tolist() == [Kind.RUNTIME, Kind.KERNEL]
    assert batch.names()[0] == "cudaLaunchKernel"
    mod.dropped = 3
    last = src.stop()
    assert mod.flushes == [0, 1] and not mod.enabled and not src.running
    assert last.kind.tolist() == [Kind.MEMSET]  # the forced flush hands over the partial buffer
    assert mod.requested_sizes == [BUFFER_BYTES] * 2
    stats = src.stats()
    assert stats["records_converted"] == 3 and stats["cupti_dropped_records"] == 3
    assert stats["lost_records"] == 0 and stats["reason"] is None


def test_times_are_calibrated_to_epoch():
    mod = FakeCupti()
    mod.now = 1_000  # a CUPTI clock far from the epoch
    src = CuptiSource(module=mod)
    assert src.start()
    mod.fill([f.memset(1, 2_000, 3_000)])
    batch = src.collect()
    offset = src.clock.offset_ns
    assert offset > 1_600_000_000 * 10**9  # now in Unix-epoch ns
    assert batch.start_ns.tolist() == [2_000 + offset]


def test_completed_callback_only_queues_and_bounds_memory():
    mod = FakeCupti()
    src = CuptiSource(module=mod, max_pending_records=3)
    src.start()
    mod.fill([f.memset(1, T0, T0 + 1), f.memset(2, T0, T0 + 1)])
    mod.fill([f.memset(3, T0, T0 + 1), f.memset(4, T0, T0 + 1)])  # would exceed 3: dropped
    mod.activity_flush_all(0)  # CUPTI hands both buffers over on its own
    assert src.stats()["records_converted"] == 0  # nothing converted inside the callback
    assert len(src.collect()) == 2
    mod.fill([f.memset(5, T0, T0 + 1)])  # room again after draining
    assert len(src.collect()) == 1
    assert src.stats()["lost_records"] == 2


def test_pending_buffers_are_bounded_too():
    """Each pending buffer pins its memory until converted, however few records it holds."""
    mod = FakeCupti()
    src = CuptiSource(module=mod, max_pending_buffers=2)
    src.start()
    for corr in range(4):
        mod.fill([f.memset(corr, T0, T0 + 1)])
    mod.activity_flush_all(0)
    assert src.stats()["lost_records"] == 2
    assert len(src.collect()) == 2


def test_refused_kind_is_reported_and_the_rest_still_run():
    mod = FakeCupti(refuse={"MEMCPY2": 1})
    src = CuptiSource(module=mod)
    assert src.start()
    assert "MEMCPY2" in src.refused and "MEMCPY2" not in src.enabled
    assert ACTIVITY_KIND["CONCURRENT_KERNEL"] in mod.enabled


def test_another_subscriber_turns_capture_off_with_one_warning():
    mod = FakeCupti(register_status=39)  # CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
    with pytest.warns(RuntimeWarning, match="another CUPTI subscriber"):
        assert not CuptiSource(module=mod).start()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        src = CuptiSource(module=mod)
        assert not src.start()  # same reason again: no second warning
    assert "MULTIPLE_SUBSCRIBERS" in src.reason
    assert len(src.stop()) == 0


def test_nsight_environment_backs_off_before_touching_cupti(monkeypatch):
    monkeypatch.setenv("NSYS_PROFILING_SESSION_ID", "7")
    mod = FakeCupti()
    with pytest.warns(RuntimeWarning, match="Nsight Systems"):
        assert not CuptiSource(module=mod).start()
    assert mod.callbacks is None and not mod.enabled


def test_absent_cupti_python_gives_a_reason_not_a_crash(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupti", None)  # makes "import cupti" fail like a missing package
    monkeypatch.setitem(sys.modules, "cupti.cupti", None)
    module, reason = load_cupti()
    assert module is None and "cupti-python is not installed" in reason
    with pytest.warns(RuntimeWarning, match="not installed"):
        src = CuptiSource()
        assert not src.start()
    assert len(src.collect()) == 0 and src.stats()["running"] is False


def test_read_dropped_records_uses_a_size_t_out_pointer():
    mod = FakeCupti()
    mod.dropped = 17
    assert read_dropped_records(mod) == 17
    assert read_dropped_records(mod) == 0


def fake_clocks(offset: int, brackets: list[int]):
    """A CUPTI clock = wall - offset, read in the middle of wall reads ``bracket`` ns apart."""
    state = {"wall": 10**18, "i": 0, "phase": 0}

    def wall():
        if state["phase"] == 0:
            state["phase"] = 1
            return state["wall"]
        bracket = brackets[state["i"]]
        state["phase"], state["i"] = 0, state["i"] + 1
        value = state["wall"] + bracket
        state["wall"] += 10_000
        return value

    def cupti():
        bracket = brackets[state["i"]]
        return state["wall"] + bracket // 2 - offset

    return cupti, wall


def test_calibration_recovers_a_known_offset_and_picks_the_tightest_sample():
    cupti, wall = fake_clocks(offset=123_456_789, brackets=[5_000, 40, 900])
    cal = calibrate(cupti, wall, samples=3)
    assert cal.offset_ns == 123_456_789
    assert cal.uncertainty_ns == 20  # half of the 40 ns bracket
    assert cal.to_epoch(1_000) == 1_000 + 123_456_789


def test_calibration_skips_samples_where_the_wall_clock_stepped_back():
    cupti, wall = fake_clocks(offset=0, brackets=[-50, 60])
    cal = calibrate(cupti, wall, samples=2)
    assert cal == ClockCalibration(offset_ns=0, uncertainty_ns=30)
    cupti, wall = fake_clocks(offset=0, brackets=[-1])
    with pytest.raises(RuntimeError):
        calibrate(cupti, wall, samples=1)


def test_cupti_source_does_not_start_beside_any_torch_profiler_session():
    torch = pytest.importorskip("torch")
    mod = FakeCupti()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        with subscriber.own_session():  # even our own Kineto session holds CUPTI
            with pytest.warns(RuntimeWarning, match="own torch.profiler"):
                assert not CuptiSource(module=mod).start()
    assert mod.callbacks is None
