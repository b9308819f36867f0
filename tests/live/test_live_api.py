"""The live-capture API in-process: annotations, steps, windows, Kineto conversion, identity."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import warnings

import pytest

from cuda_tracer.model.correlate import correlate
from cuda_tracer.model.events import Kind, MemcpyKind
from cuda_tracer.capture.kineto import keep_activities
from cuda_tracer.capture.kineto_events import convert_events
from cuda_tracer.loading import load_profile
from otel_profiler import api
from otel_profiler.live.steps import markers
from otel_profiler.live.resource import attributes, distributed_position, run_id
from otel_profiler.live.session import ProfilerWarning, current
from otel_profiler.live.windows.policy import WindowPolicy

QUIET = dict(summary_at_exit=False, auto_steps=False, signal=False, steps="off")


def test_importing_the_package_or_bootstrapping_never_imports_torch_or_tensorflow(tmp_path):
    from otel_profiler.bootstrap import SITE_DIR

    code = ("import sys, otel_profiler, otel_profiler.api, otel_profiler.live.session, otel_profiler.compat.smprof;"
            "otel_profiler.annotate; print(otel_profiler.live.session.current() is not None, "
            "sorted(m for m in ('torch', 'tensorflow') if m in sys.modules))")
    plain = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    bootstrapped = dict(plain, OTEL_PROFILER_ENABLED="true", PYTHONPATH=SITE_DIR,
                        OTEL_PROFILER_PROFILE_DIR=str(tmp_path))
    for env, session in ((plain, False), (bootstrapped, True)):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"{session} []"


def _load(folder):
    profile = load_profile([folder])
    assert len(profile.ranks) == 1
    return profile.ranks[0]


def test_annotations_nest_decorate_carry_attributes_and_know_their_thread(tmp_path):
    @api.annotate("decorated")
    def work():
        return 7

    def in_thread():
        with api.annotate("threaded"):
            pass

    with api.Profiler(profile_dir=str(tmp_path), **QUIET) as prof:
        with api.annotate("outer", layer=3, tag="x"):
            with api.annotate("inner"):
                assert work() == 7
        t = threading.Thread(target=in_thread)
        t.start()
        t.join()
        handle = api.annotation_begin("begin-end")
        api.annotation_end(handle)
    assert prof.folder == str(tmp_path)
    assert current() is None
    rank = _load(tmp_path)
    b = rank.batch.of_kind(Kind.USER_ANNOTATION)
    names = b.names()
    assert sorted(names) == ["begin-end", "decorated", "inner", "outer", "threaded"]
    row = {n: i for i, n in enumerate(names)}
    outer, inner, deco = row["outer"], row["inner"], row["decorated"]
    assert b.start_ns[outer] <= b.start_ns[inner] <= b.start_ns[deco] <= b.end_ns[deco] <= b.end_ns[inner] <= b.end_ns[outer]
    assert b.extras_of(outer) == {"layer": 3, "tag": "x"}
    assert b.tid[row["threaded"]] != b.tid[outer] and b.tid[outer] == threading.get_native_id()
    assert set(b.pid.tolist()) == {os.getpid()}
    # Epoch-calibrated timestamps.
    assert abs(int(b.start_ns[outer]) - time.time_ns()) < 60e9
    assert rank.meta["format"] == "otel-profiler.live" and rank.meta["rank"] == 0


def test_steps_from_step_and_step_context(tmp_path):
    with api.Profiler(profile_dir=str(tmp_path), **QUIET):
        for _ in range(3):
            time.sleep(0.001)
            api.step()
        with api.step_context(10):
            time.sleep(0.001)
    b = _load(tmp_path).batch.of_kind(Kind.STEP)
    numbers = sorted(b.extra("step").values())
    assert numbers == [0, 1, 2, 10]
    assert (b.duration_ns >= 1_000_000).all()


def test_nothing_is_kept_without_a_session():
    markers.drain()
    with api.annotate("unseen"):
        pass
    api.step()
    assert markers.pending() == 0


def test_many_annotations_record_one_event_each():
    """What one annotate() costs is measured by benchmarks/overhead.py (beside torch.profiler's
    record_function), not asserted here: a timing budget fails on a busy machine."""
    markers.drain()
    markers.active = True
    try:
        for i in range(20000):
            with api.annotate("x"):
                pass
        assert markers.pending() == 20000
    finally:
        markers.active = False
        markers.drain()


def test_bad_settings_give_one_warning_and_no_profiling(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prof = api.Profiler(profile_dir=str(tmp_path), steps="banana", window_steps="x").start()
        with api.annotate("x"):
            pass
        assert prof.stop() is None
    ours = [w for w in caught if issubclass(w.category, ProfilerWarning)]
    assert len(ours) == 1
    assert "OTEL_PROFILER_STEPS='banana'" in str(ours[0].message)
    assert "OTEL_PROFILER_WINDOW_STEPS" in str(ours[0].message)
    assert not any(tmp_path.iterdir())


def test_window_policy():
    p = WindowPolicy(step_range=(2, 4), every=10, window_steps=2)
    assert [p.want(s, 0) for s in range(6)] == ["every", "every", "range", "range", None, None]
    assert p.want(10, 0) == "every" and p.want(12, 0) is None
    p.request("signal")
    assert [p.want(s, 0) for s in (13, 14, 15)] == ["signal", "signal", None]
    d = WindowPolicy(duration_s=1.0, start_ns=0)
    assert d.want(0, 500_000_000) == "duration" and d.want(5, 1_500_000_000) is None


def test_a_slow_step_captures_its_successors():
    p = WindowPolicy(window_steps=3, slow_factor=3.0)
    for s in range(10):
        p.step_finished(s, 1_000_000, captured=False)
        assert p.want(s + 1, 0) is None
    p.step_finished(10, 5_000_000, captured=False)
    assert [p.want(s, 0) for s in (11, 12, 13, 14)] == ["slow", "slow", "slow", None]
    # A captured step is never compared (it carries the profiler's own cost).
    q = WindowPolicy(window_steps=3, slow_factor=3.0)
    for s in range(10):
        q.step_finished(s, 1_000_000, captured=False)
    q.step_finished(10, 50_000_000, captured=True)
    assert q.want(11, 0) is None


def test_slow_windows_keep_to_their_budget_on_a_job_that_stalls_periodically():
    """A 30 ms stall every 10 steps of 10 ms: without a budget nearly every step would be captured.
    Driven as the session drives it: want() at each step's start, step_finished() at its end."""
    from otel_profiler.live.windows.policy import SLOW_COOLDOWN_STEPS, SLOW_SHARE

    p = WindowPolicy(window_steps=5, slow_factor=3.0, start_ns=0)
    now, previous, starts, captured_steps = 0, None, [], 0
    for step in range(20_000):
        reason = p.want(step, now)
        if reason == "slow":
            captured_steps += 1
            if previous != "slow":
                starts.append(step)
        previous = reason
        duration = 40_000_000 if step % 10 == 9 else 10_000_000
        now += duration
        p.step_finished(step, duration, captured=reason is not None, now_ns=now)
    openings = len(starts)
    assert all(b - a >= SLOW_COOLDOWN_STEPS for a, b in zip(starts, starts[1:]))
    assert openings >= 2  # the trigger still works
    assert captured_steps <= SLOW_SHARE * 20_000 + 5  # one window over the share at most


class FakeKinetoEvent:
    """Stands in for torch's ``_KinetoEvent`` (same method names) to test GPU conversion on CPU. Its
    metadata is what torch hands over when ``expose_kineto_event_metadata`` is set (without it the
    text is empty): tests/cuda_tracer/test_kineto_metadata.py shows on real torch that the live source sets it."""

    def __init__(self, category, name, start, dur, device, resource, corr=0, linked=0, meta=""):
        self._v = dict(activity_type=category, name=name, start_ns=start, duration_ns=dur,
                       device_index=device, device_resource_id=resource, correlation_id=corr,
                       linked_correlation_id=linked, metadata_json=meta)

    def __getattr__(self, name):
        value = self._v[name]
        return lambda: value


T0 = 1_700_000_000_000_000_000


def _fake_gpu_window():
    return [
        FakeKinetoEvent("cpu_op", "aten::mm", T0, 50_000, 4242, 4243, corr=7),
        FakeKinetoEvent("cuda_runtime", "cudaLaunchKernel", T0 + 10_000, 5_000, 4242, 4243, corr=900, linked=7,
                        meta='"cbid": 211, "correlation": 900'),
        FakeKinetoEvent("kernel", "gemm_kernel", T0 + 30_000, 20_000, 0, 7, corr=900, linked=7,
                        meta='"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 900, '
                             '"registers per thread": 64, "shared memory": 1024, "grid": [8, 4, 1], '
                             '"block": [128, 1, 1]'),
        FakeKinetoEvent("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", T0 + 60_000, 3_000, 0, 7, corr=901,
                        meta='"device": 0, "context": 1, "stream": 7, "correlation": 901, "bytes": 4096'),
        FakeKinetoEvent("cuda_sync", "Stream Sync", T0 + 70_000, 1_000, 0, 7, corr=902,
                        meta='"cuda_sync_kind": "Stream Sync", "stream": 7, "correlation": 902, "device": 0'),
    ]


def test_kineto_events_convert_like_trace_files():
    b = convert_events(_fake_gpu_window(), rank=3).batch
    kinds = dict(zip(b.names(), b.kind.tolist()))
    assert kinds == {"aten::mm": Kind.CPU_OP, "cudaLaunchKernel": Kind.RUNTIME, "gemm_kernel": Kind.KERNEL,
                     "Memcpy HtoD (Pageable -> Device)": Kind.MEMCPY, "Stream Sync": Kind.SYNC}
    k = b.names().index("gemm_kernel")
    assert (b.start_ns[k], b.end_ns[k]) == (T0 + 30_000, T0 + 50_000)
    assert (b.device[k], b.stream[k], b.correlation[k], b.external_id[k]) == (0, 7, 900, 7)
    assert (b.grid_x[k], b.grid_y[k], b.block_x[k], b.registers[k], b.shared_memory[k]) == (8, 4, 128, 64, 1024)
    m = b.names().index("Memcpy HtoD (Pageable -> Device)")
    assert b.bytes[m] == 4096 and b.subkind[m] == MemcpyKind.HtoD
    op = b.names().index("aten::mm")
    assert (b.pid[op], b.tid[op], b.external_id[op]) == (4242, 4243, 7)
    assert set(b.rank.tolist()) == {3}
    corr = correlate(b)  # launch ↔ kernel ↔ op linkage works on live batches as on files
    launch, kernel = b.names().index("cudaLaunchKernel"), k
    assert corr.launch_of_gpu[list(corr.gpu_rows).index(kernel)] == launch
    assert corr.op_of_launch[list(corr.launch_rows).index(launch)] == op
    assert corr.latency_ns[list(corr.gpu_rows).index(kernel)] == 20_000
    only_gpu = keep_activities(b, frozenset({"kernel", "memcpy"}))
    assert sorted(only_gpu.names()) == ["Memcpy HtoD (Pageable -> Device)", "gemm_kernel"]


def test_identity_from_launcher_environment():
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "TORCHELASTIC_RUN_ID": "abc",
           "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "2", "KUBERNETES_SERVICE_HOST": "10.0.0.1",
           "POD_NAME": "trainer-0", "POD_NAMESPACE": "ml"}
    assert distributed_position(env) == {"rank": 3, "local_rank": 1, "world_size": 8}
    assert run_id("", env) == "torchrun-abc"
    assert run_id("", {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "2"}) == "slurm-77-2"
    assert run_id("my run/1", env) == "my_run_1"
    from otel_profiler.config import load

    a = attributes(load({"OTEL_SERVICE_NAME": "svc", "OTEL_RESOURCE_ATTRIBUTES": "team=ml"}), env)
    assert a["service.name"] == "svc" and a["team"] == "ml"
    assert (a["ml.rank"], a["ml.local_rank"], a["ml.world_size"]) == (3, 1, 8)
    assert (a["slurm.job.id"], a["slurm.step.id"], a["ml.torchrun.run_id"]) == ("77", "2", "abc")
    assert (a["k8s.pod.name"], a["k8s.namespace.name"]) == ("trainer-0", "ml")


def test_flushes_parts_when_the_buffer_fills(tmp_path):
    with api.Profiler(profile_dir=str(tmp_path), flush_events=1000, **QUIET):
        for _ in range(3):
            for _ in range(1500):
                with api.annotate("a"):
                    pass
            deadline = time.time() + 60
            while markers.pending() >= 1000 and time.time() < deadline:
                time.sleep(0.05)
    parts = sorted(p.name for p in tmp_path.glob("rank-0.*.events"))
    assert len(parts) >= 3
    assert len(_load(tmp_path).batch.of_kind(Kind.USER_ANNOTATION)) == 4500
    meta = json.loads((tmp_path / "rank-0.json").read_text())
    assert meta["parts"] == len(parts) and meta["events"] == 4500


def test_every_written_batch_also_goes_to_the_exporter(tmp_path, monkeypatch):
    import types

    calls = []

    class FakeExporter:
        def submit(self, meta, batch):
            calls.append(("submit", meta["rank"], len(batch)))
            return True

        def close(self, timeout_s):
            calls.append(("close", timeout_s))

    fake = types.ModuleType("otel_profiler.export.exporter")
    fake.exporter_from_settings = lambda settings, default_service=None: FakeExporter()
    monkeypatch.setitem(sys.modules, "otel_profiler.export.exporter", fake)
    with api.Profiler(profile_dir=str(tmp_path), **QUIET):
        with api.annotate("a"):
            pass
    assert calls == [("submit", 0, 1), ("close", 5.0)]


def test_sigusr2_and_the_udp_trigger_open_windows_on_demand(tmp_path):
    import signal
    import socket

    from otel_profiler.cli import main as cli

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    opts = dict(QUIET, signal=True, trigger_port=port, window_steps=2, slow_step_factor=0)
    with api.Profiler(profile_dir=str(tmp_path), **opts):
        api.step()
        api.step()
        os.kill(os.getpid(), signal.SIGUSR2)
        for _ in range(4):
            api.step()
        assert cli(["trigger", "--port", str(port)]) == 0
        deadline = time.time() + 60
        while not current().policy._demanded and time.time() < deadline:
            time.sleep(0.02)
        for _ in range(4):
            api.step()
    from otel_profiler.live.windows import triggers

    assert signal.getsignal(signal.SIGUSR2) is triggers._ended  # a late request is dropped, not fatal
    os.kill(os.getpid(), signal.SIGUSR2)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    windows = json.loads((tmp_path / "rank-0.json").read_text())["windows"]
    assert [(w["reason"], w["first_step"], w["last_step"]) for w in windows] == [
        ("signal", 3, 4), ("trigger", 7, 8)]  # from the next step boundary on
    with api.Profiler(profile_dir=str(tmp_path / "again"), **opts):  # a later session takes it again
        assert signal.getsignal(signal.SIGUSR2) not in (triggers._ended, signal.SIG_DFL)


def test_backs_off_with_one_warning_when_the_user_runs_torch_profiler(tmp_path):
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            with api.Profiler(profile_dir=str(tmp_path), **dict(QUIET, steps="0:3", every_steps=2,
                                                                activities="cpu_op")):
                for _ in range(6):
                    torch.ones(4).sum()
                    api.step()
    ours = [str(w.message) for w in caught if issubclass(w.category, ProfilerWarning)]
    assert len(ours) == 1 and "torch.profiler" in ours[0], ours
    rank = _load(tmp_path)
    assert len(rank.batch.of_kind(Kind.STEP)) == 6
    assert len(rank.batch.of_kind(Kind.CPU_OP)) == 0
    assert "torch.profiler" in rank.meta["detailed_capture"]


def test_a_long_window_is_handed_over_in_parts(tmp_path):
    torch = pytest.importorskip("torch")
    opts = dict(QUIET, steps="0:10", activities="cpu_op", window_part_steps=3)
    with api.Profiler(profile_dir=str(tmp_path), **opts):
        for _ in range(12):
            torch.ones(4).sum()
            api.step()
    rank = _load(tmp_path)
    (window,) = rank.meta["windows"]
    assert (window["first_step"], window["last_step"], window["parts"]) == (0, 9, 4)  # 0-2 3-5 6-8 9
    ops = rank.batch.of_kind(Kind.CPU_OP).names()
    assert ops.count("aten::ones") == 10  # one per captured step: no gap, no overlap between parts
    assert len(rank.batch.of_kind(Kind.PROFILER)) == 1


def test_a_step_range_given_as_a_value_replaces_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_PROFILER_STEPS", "not a range")  # replaced by the value: no warning
    opts = dict(QUIET, steps=(2, 4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with api.Profiler(profile_dir=str(tmp_path), **opts):
            for _ in range(6):
                api.step()
    assert not [w for w in caught if issubclass(w.category, ProfilerWarning)]
    windows = _load(tmp_path).meta["windows"]
    assert [(w["reason"], w["first_step"], w["last_step"]) for w in windows] == [("range", 2, 3)]


@pytest.mark.parametrize("steps", [(5, 1), (1, 2, 3), ("a", "b"), (True, 4)])
def test_a_bad_step_range_value_gives_one_warning_and_no_profiling(tmp_path, steps):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prof = api.Profiler(profile_dir=str(tmp_path), **dict(QUIET, steps=steps)).start()
        assert prof.stop() is None
    ours = [str(w.message) for w in caught if issubclass(w.category, ProfilerWarning)]
    assert len(ours) == 1 and f"steps={steps!r}" in ours[0], ours
    assert not any(tmp_path.iterdir())
