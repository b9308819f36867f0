"""Module calls named by attribute path in live windows (``cuda_tracer.capture.module_names``),
checked against torch's own record of which module each ``nn.Module: <Class>_<k>`` call was (the
module pointers of its event tree), for a model whose call order is not its construction order and
a window that starts inside a forward pass; a live run's summary with the paths; one name per class
from the names; nothing left behind for torch.compile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_tracer.capture import module_names
from cuda_tracer.loading import load_profile
from otel_profiler.analysis.attribution.modules import module_class
from otel_profiler.analysis.summary import summarize

torch = pytest.importorskip("torch")
nn = torch.nn
from torch.profiler import ProfilerActivity, profile  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "module_paths.py"


def _torch_names(prof, model) -> dict[str, str]:
    """torch's name of each module call -> the attribute path of the module it was, from the
    module pointer torch keeps with each call in its event tree."""
    paths = {id(m): path for path, m in model.named_modules()}
    out: dict[str, str] = {}

    def walk(event) -> None:
        module = getattr(getattr(event, "extra_fields", None), "module", None)
        if module is not None:
            out[event.name] = paths[module.self_ptr]
        for child in event.children:
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    return out


class Starter(nn.Module):
    """Starts the window in the middle of the forward pass, the first time it is called."""

    def __init__(self, state: dict) -> None:
        super().__init__()
        self.state = state

    def forward(self, x):
        if not self.state:
            self.state["prof"] = prof = profile(activities=[ProfilerActivity.CPU], with_stack=True)
            prof.start()
            self.state["order"] = order = module_names.ModuleCallOrder()
            order.start()
        return x * 2


class Net(nn.Module):
    def __init__(self, state: dict) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.inner = nn.Sequential(nn.Linear(8, 8), Starter(state), nn.Linear(8, 8))
        self.post = nn.Sequential(nn.Linear(8, 8))  # a Sequential first called after `inner`'s call began
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(2)])

    def forward(self, x):
        x = self.post(self.inner(self.pre(x)))
        for block in reversed(self.blocks):  # called in the reverse of their construction
            x = block(x)
        return x


def test_names_match_the_modules_torch_recorded_for_each_call():
    state: dict = {}
    net = Net(state)
    for _ in range(3):
        net(torch.randn(4, 8)).sum().backward()
    state["prof"].stop()
    ours = state["order"].stop()
    theirs = _torch_names(state["prof"], net)
    assert set(ours) == {name for name in theirs if name.startswith(module_names.PREFIX)}
    for name, path in theirs.items():
        expected = "Net" if path == "" else f"{path} ({name[len(module_names.PREFIX):].rsplit('_', 1)[0]})"
        assert ours[name] == module_names.PREFIX + expected, (name, ours[name], path)
    assert ours["nn.Module: Sequential_0"] == "nn.Module: inner (Sequential)"  # in progress at the start
    assert ours["nn.Module: Linear_1"] != "nn.Module: blocks.0.0 (Linear)"  # call order, not construction
    assert not torch.nn.modules.module._global_forward_pre_hooks  # the hook went with the window


def test_modules_called_from_two_threads_keep_torchs_names():
    import threading

    order = module_names.ModuleCallOrder()
    layer = nn.Linear(4, 4)
    order.start()
    layer(torch.randn(2, 4))
    worker = threading.Thread(target=lambda: nn.ReLU()(torch.randn(2, 4)))
    worker.start()
    worker.join()
    assert order.stop() == {}


def test_a_compiling_job_takes_every_window_hook_away():
    from cuda_tracer.capture import kineto

    order = module_names.ModuleCallOrder()
    order.start()
    assert torch.nn.modules.module._global_forward_pre_hooks
    saved = kineto._compiling_job
    try:
        kineto.compiling_job()
        assert not torch.nn.modules.module._global_forward_pre_hooks
    finally:
        kineto._compiling_job = saved
    nn.Linear(2, 2)(torch.randn(1, 2))
    assert order.stop() == {}  # the call after the compile was not seen


def test_a_live_run_names_modules_by_attribute_path(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(OTEL_PROFILER_ENABLED="true", OTEL_PROFILER_PROFILE_DIR=str(tmp_path / "prof"),
               OTEL_PROFILER_ACTIVITIES="cpu_op", OTEL_PROFILER_SUMMARY_AT_EXIT="false",
               OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none")
    out = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    view = summarize(load_profile([str(tmp_path / "prof")]))["operators"]["modules"]
    paths = {r["path"] for r in view["by_path"]}
    assert {"Net", "Net/layer1 (Sequential)", "Net/layer1 (Sequential)/layer1.0 (Block)",
            "Net/layer1 (Sequential)/layer1.0 (Block)/layer1.0.conv2 (Conv2d)", "Net/stem (Conv2d)",
            "Net/head (Linear)"} <= paths, paths
    types = {t["type"]: t["calls"] for t in view["by_type"]}
    assert set(types) == {"Net", "Sequential", "Block", "Conv2d", "Linear"}
    assert types["Conv2d"] == 5 * types["Net"]  # stem and four in the blocks, per forward pass


@pytest.mark.parametrize("name, cls", [("layer4.1.conv2 (Conv2d)", "Conv2d"), ("Conv2d_3", "Conv2d"),
                                       ("Net", "Net"), ("Net_1", "Net"), ("encoder.layers.0 (Layer_2)", "Layer_2")])
def test_the_class_of_a_module_call_name(name, cls):
    assert module_class(name) == cls


def test_a_module_made_each_step_is_not_kept_alive_by_the_window():
    import gc
    import weakref

    order = module_names.ModuleCallOrder()
    order.start()
    loss = nn.MSELoss()
    loss(torch.randn(2), torch.randn(2))
    gone = weakref.ref(loss)
    del loss
    gc.collect()
    assert gone() is None  # the window holds no reference to it
    assert order.stop() == {}  # and a module gone by the stop keeps torch's name


def test_a_window_started_deeper_than_torch_reads_keeps_torchs_names(monkeypatch):
    monkeypatch.setattr(module_names, "MAX_FRAMES", 1)  # as if the stack were deeper than torch reads
    order = module_names.ModuleCallOrder()
    order.start()
    nn.Linear(2, 2)(torch.randn(1, 2))
    assert order.stop() == {}
