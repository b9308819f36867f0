"""CPU utilization over time and the compute resources a live run keeps in its profile folder: the
samples of a real training loop (bounded, the process's share below the machine's scale), the
compute resources read from this machine (CPU model from /proc/cpuinfo, cores, memory, torch),
the instance type from the platform's variable, and what a trace file's metadata gives instead."""

from __future__ import annotations

import os
import time

import pytest

from cuda_tracer.loading import load_profile
from otel_profiler import api
from otel_profiler.analysis.host.compute import compute_overview, cpu_timelines
from otel_profiler.analysis.summary import summarize
from otel_profiler.live.samples import host_samples
from otel_profiler.live.samples.compute import compute_resources, instance_type

from conftest import trace

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


def train_for(folder, seconds: float, **options) -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(256, 256)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with api.Profiler(profile_dir=str(folder), activities="cpu_op", steps="1:3", summary_at_exit=False,
                      signal=False, auto_steps=False, **options):
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            opt.zero_grad()
            model(torch.randn(256, 256)).sum().backward()
            opt.step()
            api.step()


def test_a_profiled_run_keeps_cpu_samples_and_its_compute_resources(tmp_path):
    train_for(tmp_path, 2.5, cpu_sample_s=0.2)
    profile = load_profile([str(tmp_path)])
    samples = profile.ranks[0].meta["cpu_samples"]
    assert len(samples["t"]) >= 3 and samples["interval_s"] == 0.2
    assert samples["cores"] == len(os.sched_getaffinity(0))
    assert all(0 <= v <= 100 for v in samples["system_pct"])
    assert all(0 <= v <= 100.5 for v in samples["process_pct"])
    assert max(samples["process_pct"]) > 0  # the loop kept the process busy
    assert samples["t"] == sorted(samples["t"])
    (timeline,) = cpu_timelines(profile).values()
    assert timeline["t_s"][0] == 0 and len(timeline["t_s"]) == len(samples["t"])

    (host,) = summarize(profile)["compute"]
    with open("/proc/cpuinfo") as f:
        model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    assert host["cpu_model"] == model and host["cpu_cores"]["logical"] == os.cpu_count()
    assert host["memory_bytes"] == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    import torch
    assert host["versions"]["torch"] == torch.__version__ and host["ranks"] == [0] and host["source"] == "live"


def test_a_run_shorter_than_one_interval_has_its_closing_sample(tmp_path):
    """The session's close takes the part of an interval since the last reading: a run of about a
    second under the default one-second interval (a fast machine's short example) has a sample."""
    train_for(tmp_path, 1.0, cpu_sample_s=30.0)
    samples = load_profile([str(tmp_path)]).ranks[0].meta["cpu_samples"]
    assert len(samples["t"]) == 1 and samples["interval_s"] == 30.0
    assert 0 < samples["process_pct"][0] <= 100.5  # the loop kept the process busy


def test_cpu_samples_off(tmp_path):
    train_for(tmp_path, 0.8, cpu_sample_s=0)
    assert "cpu_samples" not in load_profile([str(tmp_path)]).ranks[0].meta


def test_the_timeline_stays_bounded(monkeypatch):
    monkeypatch.setattr(host_samples, "MAX_SAMPLES", 8)
    timeline = host_samples.CpuTimeline(1e-6)
    deadline = time.monotonic() + 120
    while timeline.interval_s == 1e-6 and time.monotonic() < deadline:  # until the first halving
        timeline.maybe_sample()  # a sample counts once the CPU clock ticked (10 ms) since the last
        time.sleep(0.005)
    meta = timeline.meta()
    assert 4 <= len(meta["t"]) <= 8 and meta["interval_s"] == 2e-6
    assert len(meta["system_pct"]) == len(meta["process_pct"]) == len(meta["job_cores"]) == len(meta["t"])


def test_instance_type_from_the_platform_variable():
    assert instance_type({"SM_CURRENT_INSTANCE_TYPE": "ml.p4d.24xlarge"}) == \
        {"value": "ml.p4d.24xlarge", "source": "SM_CURRENT_INSTANCE_TYPE"}
    found = instance_type({})
    dmi = "/sys/devices/virtual/dmi/id/product_name"
    if os.path.exists(dmi) and open(dmi).read().strip():
        assert found == {"value": open(dmi).read().strip(), "source": dmi}
    else:
        assert found is None
    assert compute_resources()["instance_type"] == instance_type()


def test_compute_resources_of_a_trace_file():
    (host,) = compute_overview(load_profile([str(trace(QWEN))]))
    assert host["source"] == "trace" and host["ranks"] == [0]
    assert host["gpus"] == [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": None,
                             "memory_bytes": 85018279936}]
    assert host["versions"] == {"cuda": "12.4"} and host["driver_cuda"] == "12.9"


def test_process_cpu_share_is_a_share_of_the_usable_cores_capped_at_one():
    """One formula for the CPU timeline and the process CPU metric: CPU seconds over the cores'
    wall time, never negative, and capped at 1 (CPU times advance by clock ticks)."""
    from otel_profiler.metrics.system import process_cpu_share

    assert process_cpu_share(0.1, 0.2, 2) == pytest.approx(0.25)
    assert process_cpu_share(0.201, 0.2, 1) == 1.0
    assert process_cpu_share(-0.01, 0.2, 2) == 0.0
