"""The live Kineto source and torch's event metadata, on real torch (CPU).

torch copies Kineto's metadata into ``_KinetoEvent.metadata_json()`` only when the experimental
config sets ``expose_kineto_event_metadata``; without it live GPU events would lose bytes, grid,
block, registers and shared memory. On CPU the same flag controls the CPU ops' metadata
(``"Ev Idx": N``), which is what these tests observe. A torch without the option is simulated by
refusing it in the config's constructor: the source then reads GPU windows through torch's own
Chrome trace, whose conversion is checked here against the event-object path on the same results.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from cuda_tracer.capture import kineto, kineto_events
from cuda_tracer.model.events import Kind

torch = pytest.importorskip("torch")
import torch.profiler as tp  # noqa: E402


def train_a_little(steps: int = 3) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def capture_cpu_ops() -> tuple[kineto.KinetoSource, kineto.KinetoCapture]:
    source = kineto.KinetoSource({"cpu_op"}, rank=2)
    source.start()
    try:
        train_a_little()
    finally:
        capture = source.stop()
    return source, capture


@pytest.fixture
def torch_without_the_metadata_option(monkeypatch):
    """``_ExperimentalConfig`` as torch < 2.4 has it: no ``expose_kineto_event_metadata``."""
    real = torch._C._profiler._ExperimentalConfig

    def older(**options):
        if "expose_kineto_event_metadata" in options:
            raise TypeError("__init__() got an unexpected keyword argument 'expose_kineto_event_metadata'")
        return real(**options)

    monkeypatch.setattr(torch._C._profiler, "_ExperimentalConfig", older)


def test_without_the_flag_torch_gives_no_metadata():
    """The control: a plain torch.profiler session's events carry no metadata text."""
    with tp.profile(activities=[tp.ProfilerActivity.CPU]) as prof:
        train_a_little(1)
    ops = [e for e in prof.profiler.kineto_results.events() if e.activity_type() == "cpu_op"]
    assert ops and {e.metadata_json() for e in ops} == {""}


def test_live_source_asks_for_metadata_and_reads_it():
    source, capture = capture_cpu_ops()
    assert source.metadata_exposed and not capture.via_file
    assert capture._results is None  # copied out when the window stopped: no torch object kept
    rows = [row for row in capture._rows if row[0] == "cpu_op"]
    args = [msgspec.json.decode(kineto_events._typed(row).args) for row in rows]
    assert rows and all("Ev Idx" in a for a in args)  # the metadata reaches the converted event's args
    batch = capture.to_batch()
    ops = batch.of_kind(Kind.CPU_OP)
    assert len(ops) == len(rows) and set(ops.rank.tolist()) == {2}
    assert sorted(ops.external_id.tolist()) == sorted(a["External id"] for a in args)


def test_a_stopped_window_leaves_nothing_of_torch_for_the_garbage_collector():
    """torch.profiler objects sit in reference cycles; freed by the cyclic collector in another
    thread while the next window starts, they corrupted the heap. stop() frees them itself."""
    import gc
    import weakref

    capture_cpu_ops()  # the first window also loads what torch keeps for later ones
    gc.collect()
    gc.disable()
    try:
        source = kineto.KinetoSource({"cpu_op"})
        source.start()
        prof = weakref.ref(source._prof)
        inner = weakref.ref(source._prof.profiler)
        train_a_little(1)
        capture = source.stop()
        assert prof() is None and inner() is None
        assert len(capture.to_batch().of_kind(Kind.CPU_OP)) > 0
    finally:
        gc.enable()


def test_gpu_windows_ask_for_metadata_and_sync_events_together():
    source = kineto.KinetoSource({"kernel", "sync"})
    source._kinds = [tp.ProfilerActivity.CUDA]  # as on a machine with a GPU; nothing is started
    assert source._experimental_config() is not None
    assert source.metadata_exposed and not source.reads_through_file


def test_older_torch_reads_gpu_windows_through_the_trace_file(torch_without_the_metadata_option):
    source = kineto.KinetoSource({"kernel", "memcpy"})
    source._kinds = [tp.ProfilerActivity.CUDA]
    assert source._experimental_config() is not None  # the window still starts
    assert not source.metadata_exposed and source.reads_through_file
    cpu_only, capture = capture_cpu_ops()  # CPU ops need no metadata: read as events
    assert not cpu_only.metadata_exposed and not capture.via_file
    assert len(capture.to_batch().of_kind(Kind.CPU_OP)) > 0


def test_a_torch_whose_events_cannot_name_their_kind_reads_every_window_through_the_file(monkeypatch):
    """torch 2.11's ``_KinetoEvent`` has no ``activity_type()``: every event would be skipped, so
    the window (CPU-only here) is read through torch's trace file and keeps its operators."""
    monkeypatch.delattr(torch._C._autograd._KinetoEvent, "activity_type")
    assert not kineto.events_name_their_kind()
    source, capture = capture_cpu_ops()
    assert source.reads_through_file and capture.via_file
    batch = capture.to_batch()
    assert len(batch.of_kind(Kind.CPU_OP)) > 0
    modules = batch.of_kind(Kind.PYTHON_FUNCTION).names()  # module calls only, as from the events
    assert modules and all(name.startswith(kineto.MODULE_PREFIX) for name in modules), modules[:5]


CYCLE_WARNING_OF_TORCH_2_11 = ("Warning: Profiler clears events at the end of each cycle.Only events from the "
                               "current cycle will be reported.To keep events across cycles, set acc_events=True.")


def test_a_window_adds_no_warning_where_torch_warns_at_every_profile(monkeypatch):
    """torch 2.10 and 2.11 warn at the first ``torch.profiler.profile`` of a process started without
    ``acc_events`` (pytorch/pytorch#180348). Their check is put back here: a window warns nothing,
    and a profile of the job's own afterwards still warns once, as it would have."""
    import warnings

    import torch.profiler.profiler as torch_profiler

    monkeypatch.setattr(torch_profiler, "_WARNINGS_SHOWN", set())
    prepare = tp.profile.prepare_trace

    def prepare_as_in_torch_2_11(self):
        prepare(self)
        if not self.acc_events:
            torch_profiler._warn_once(CYCLE_WARNING_OF_TORCH_2_11)

    monkeypatch.setattr(tp.profile, "prepare_trace", prepare_as_in_torch_2_11)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        source, capture = capture_cpu_ops()
        assert seen == [], [str(w.message) for w in seen]
        with tp.profile(activities=[tp.ProfilerActivity.CPU]):  # the job's own profile
            pass
    assert [str(w.message) for w in seen] == [CYCLE_WARNING_OF_TORCH_2_11]
    assert len(capture.to_batch().of_kind(Kind.CPU_OP)) > 0


def test_the_trace_file_path_gives_the_event_path_result():
    """Both readings of one real window agree: names, kinds, ids, rank, times (µs in the file)."""
    config = torch._C._profiler._ExperimentalConfig(expose_kineto_event_metadata=True)
    with tp.profile(activities=[tp.ProfilerActivity.CPU], experimental_config=config) as prof:
        train_a_little()
    results = prof.profiler.kineto_results
    by_events = kineto.KinetoCapture(results, frozenset({"cpu_op"}), 5).to_batch()
    by_file = kineto.KinetoCapture(results, frozenset({"cpu_op"}), 5, via_file=True).to_batch()
    # The file adds Kineto's own two markers of the profiling span, which are no events of the job.
    markers = np.isin(by_file.names(), ["Iteration Start: PyTorch Profiler", "Record Window End"])
    assert markers.sum() == 2, sorted(set(by_file.names()) - set(by_events.names()))
    by_file = by_file.take(~markers)
    assert len(by_events) > 10 and len(by_file) == len(by_events)

    def rows(batch):
        order = np.lexsort((batch.external_id, batch.start_ns))
        return [(n, int(k), int(x), int(r)) for n, k, x, r in zip(
            batch.names(order), batch.kind[order], batch.external_id[order], batch.rank[order])]

    assert rows(by_file) == rows(by_events)
    gap = np.abs(np.sort(by_file.start_ns) - np.sort(by_events.start_ns))
    assert gap.max() <= 1_000  # the file keeps µs with three decimals at most
