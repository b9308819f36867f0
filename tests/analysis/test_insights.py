"""Each insight rule fires on a real shared trace chosen for it and stays silent on another.

The traces were chosen by their numbers (see the comment on each case); where no shared trace crosses
a default threshold (GPU memory growth), the firing case lowers that threshold and says so.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from functools import lru_cache

import pytest

from cuda_tracer.loading import load_profile
from otel_profiler.analysis.insights import RULES, Thresholds, insights, thresholds_doc
from otel_profiler.analysis.summary import summarize

from conftest import trace

DF = "hta/df_index_resolver/df_index_resolver.json.gz"
NS = "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
RESNET = "kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
BERT = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
B200 = "tracelens/b200/eager_trace.json.gz"
RANKS = "hta/trace_filter"  # two ranks of one job, balanced (busy 44.8% / 47.1%, steps 615 / 619 ms)
LEGACY = "hta/trace_file_list/inference_rank_1.json.gz"  # kernels and runtime calls, no operators
CONTROL_8 = "hta/trace_diff/control/control.json.gz"  # rank 3 of 8 (DDP): steps 75.5-81.1 ms
MIXED = (RANKS + "/sampled_rank-1.json.gz", NS)  # rank 1 at 47% busy and 619 ms steps, rank 0 98% / 96 ms


@lru_cache(maxsize=None)
def _loaded(inputs: tuple[str, ...]):
    profile = load_profile([str(trace(i)) for i in inputs])
    return profile, summarize(profile)


def _rules(inputs, **overrides) -> set[str]:
    profile, summary = _loaded(tuple([inputs] if isinstance(inputs, str) else inputs))
    return {i["rule"] for i in insights(profile, summary, Thresholds(**overrides))}


CASES = [
    # rule, fires on (numbers), silent on (numbers), threshold overrides for the firing case
    ("low_gpu_utilization", DF, NS, {}),  # busy 57.7% vs 98.4% (threshold 70%)
    ("cpu_bottleneck", RESNET, NS, {}),  # host-wait idle 38% of span vs GPU idle 1.6%
    # step 3: 365 ms vs median 346 ms, 5.6% slower: under the 20% floor, so lowered to 5; resnet +2.8%
    ("step_outliers", DF, RESNET, {"step_outlier_min_excess_pct": 5.0}),
    ("load_balancing", MIXED, RANKS, {}),  # utilization 98.4% vs 47.1%; 44.8% vs 47.1%
    ("straggler_ranks", MIXED, RANKS, {}),  # median step 619 vs 96 ms; 615 vs 619 ms
    # allocated 4.9 -> 5.6 GiB = 2.4 points of 31.7 GiB: below SageMaker's 10 points, so lowered to 2
    ("gpu_memory_growth", DF, DF, {"memory_growth_pct_points": 2.0}),
    ("batch_size_too_small", DF, QWEN, {}),  # busy 57.7%, memory 19% vs busy 91.9%
    ("dataloader", RESNET, DF, {}),  # DataLoader __next__ 39.6% of step time vs none
    ("launch_bound", BERT, DF, {}),  # 97% kernels < 10 µs, launch 4.9 µs ≥ kernel 4.6 µs; df 15 µs kernels
    ("sync_in_step", QWEN, NS, {}),  # cudaStreamSynchronize in the step (30%) vs syncs outside steps
    ("pageable_copies", RESNET, DF, {}),  # 12 pageable HtoD copies = 100% of memcpy time vs DtoD only
    ("comm_overlap", DF, RESNET, {}),  # NCCL 20.6% of span, 0% overlapped vs no communication
    ("deep_stream_queue", NS, DF, {}),  # queue depth 1022 vs 77
    ("record_operators", LEGACY, RESNET, {}),  # no operator at all vs 23,640 operators
    ("low_mfu", BERT, DF, {}),  # MFU 0.2% of an H100's bf16 peak vs no input shapes (no FLOPs)
    ("compiled_overhead", B200, DF, {}),  # region 0/1 (a recompilation) vs compiled regions, none recompiled
]
LIVE_ONLY = {"cpu_contention", "host_bound", "dataloader_workers"}
"""Rules that read what only a live run records (CPU samples, the cores): tests/analysis/test_insights_host.py
runs real jobs for them; on every shared trace they stay silent."""


def test_every_rule_has_cases():
    assert {c[0] for c in CASES} | LIVE_ONLY == set(RULES)


@pytest.mark.parametrize("inputs", [DF, NS, RESNET, QWEN, BERT, RANKS, CONTROL_8, LEGACY])
def test_live_only_rules_stay_silent_on_trace_files(inputs):
    assert not _rules(inputs) & LIVE_ONLY


def test_ddp_jitter_of_a_few_ms_is_no_outlier():
    """Rank 3 of an 8-rank DDP job: its slowest step is 4.3 ms (5.6%) over the median. Even with no
    robust-sigma margin at all only the floors decide, and they hold it back; with floors lowered
    below its excess the same step is found (so the rule can see it)."""
    assert "step_outliers" not in _rules(CONTROL_8)
    assert "step_outliers" not in _rules(CONTROL_8, step_outlier_mads=0.0)
    low = dict(step_outlier_mads=0.0, step_outlier_min_excess_pct=1.0, step_outlier_min_excess_ms=1.0)
    (found,) = [i for i in insights(*_loaded((CONTROL_8,)), Thresholds(**low)) if i["rule"] == "step_outliers"]
    assert all(name.startswith("step ") and "ProfilerStep" not in name for name in found["metrics"]["steps"])
    assert "ProfilerStep" not in found["evidence"]


@pytest.mark.parametrize("rule,fires,silent,overrides", CASES, ids=[c[0] for c in CASES])
def test_rule_fires_and_stays_silent(rule, fires, silent, overrides):
    assert rule in _rules(fires, **overrides)
    assert rule not in _rules(silent)


def test_step_outliers_need_an_absolute_excess_too():
    """DF's slow step is 19 ms over the median (5.6%): with the relative floor lowered to 5%, an
    outlier by the absolute floor (5 ms), not when the absolute excess asked for is larger."""
    rel = {"step_outlier_min_excess_pct": 5.0}
    (found,) = [i for i in insights(*_loaded((DF,)), Thresholds(**rel)) if i["rule"] == "step_outliers"]
    excess_ms = (max(found["metrics"]["durations_us"]) - found["metrics"]["median_us"]) / 1e3
    assert 5.0 < excess_ms
    assert "step_outliers" not in _rules(DF, step_outlier_min_excess_ms=excess_ms + 0.5, **rel)
    assert "step_outliers" in _rules(DF, step_outlier_min_excess_ms=excess_ms - 0.5, **rel)
    assert found["metrics"]["steps"] == ["step 3"]


@pytest.mark.parametrize("rule,fires,silent,overrides", CASES, ids=[c[0] for c in CASES])
def test_insight_has_evidence_and_recommendation(rule, fires, silent, overrides):
    profile, summary = _loaded(tuple([fires] if isinstance(fires, str) else fires))
    found = [i for i in insights(profile, summary, Thresholds(**overrides)) if i["rule"] == rule]
    for i in found:
        assert i["severity"] in ("high", "medium", "low")
        assert len(i["evidence"]) > 30 and any(ch.isdigit() for ch in i["evidence"])
        assert len(i["recommendation"]) > 30
        json.dumps(i)  # JSON-ready


def test_thresholds_are_configurable_and_documented():
    assert "low_gpu_utilization" not in _rules(DF, gpu_util_low_pct=50.0)  # busy 57.7%
    th = Thresholds.parse(["gpu_util_low_pct=50", "queue_depth=2000"])
    assert th.gpu_util_low_pct == 50.0 and th.queue_depth == 2000
    with pytest.raises(ValueError, match="unknown threshold"):
        Thresholds.parse(["nope=1"])
    docs = thresholds_doc()
    assert all(d["meaning"] for d in docs) and len(docs) == len(Thresholds.__dataclass_fields__)


def test_summary_json_and_table_carry_insights():
    path = str(trace(RESNET))
    out = subprocess.run([sys.executable, "-m", "otel_profiler", "summary", path, "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    rules = {i["rule"] for i in json.loads(out)["insights"]}
    assert {"dataloader", "pageable_copies"} <= rules
    table = subprocess.run([sys.executable, "-m", "otel_profiler", "summary", path],
                           capture_output=True, text=True, check=True).stdout
    assert "== Insights (" in table and "pageable_copies" in table


ROCM = "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
CONTROL = "hta/trace_diff/control/control.json.gz"  # DataLoader __next__ recorded as user annotations

_SLOW_LOADER_JOB = """
import sys, time, torch
from torch.utils.data import DataLoader, Dataset
class Slow(Dataset):
    def __len__(self): return 48
    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.randn(8), torch.randn(1)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), 0.1)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True) as prof:
    for x, y in DataLoader(Slow(), batch_size=8):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step(); prof.step()
prof.export_chrome_trace(sys.argv[1])
"""


def test_dataloader_rule_finds_loader_calls_whatever_their_kind(tmp_path):
    # torch records DataLoader.__next__ as a user annotation (and, with stacks, a Python function),
    # not as an operator: a real training run whose loader sleeps 4 ms per sample.
    path = tmp_path / "slow_loader.json"
    subprocess.run([sys.executable, "-c", _SLOW_LOADER_JOB, str(path)], check=True, timeout=600,
                   capture_output=True)
    events = json.loads(path.read_text())["traceEvents"]
    kinds = {e.get("cat") for e in events if "__next__" in e.get("name", "")}
    assert "cpu_op" not in kinds and "user_annotation" in kinds
    profile = load_profile([str(path)])
    found = [i for i in insights(profile, summarize(profile)) if i["rule"] == "dataloader"]
    assert len(found) == 1
    assert found[0]["metrics"]["loading_pct"] >= 50  # 8 samples × 4 ms per step, a tiny model
    assert found[0]["metrics"]["single_process"] is True
    # A multi-process loader recorded as annotations: the calls are found (0.07 ms each), under
    # the default threshold, and over a lowered one.
    assert "dataloader" not in _rules(CONTROL)
    profile, summary = _loaded((CONTROL,))
    low = [i for i in insights(profile, summary, Thresholds(dataloader_pct=0.01)) if i["rule"] == "dataloader"]
    assert low and low[0]["evidence"].startswith("6 DataLoader __next__ calls")


def test_sync_in_step_counts_blocking_copies():
    profile, summary = _loaded((ROCM,))
    found = [i for i in insights(profile, summary, Thresholds(sync_in_step_pct=0.5))
             if i["rule"] == "sync_in_step"]
    assert found and found[0]["metrics"]["sync_calls"].get("hipMemcpyWithStream") == 2


def test_insights_page_in_docs_is_current():
    """The page's generated tables are those the code prints now, and name every threshold with its
    unit (scripts/gen_docs.py writes them; tests/repository/test_repository.py runs its --check on every page)."""
    from conftest import REPO
    from otel_profiler.analysis.insights.doc import markdown
    from otel_profiler.analysis.insights.thresholds import UNIT

    page = (REPO / "docs" / "insights.md").read_text()
    assert markdown() in page, "regenerate: python scripts/gen_docs.py"
    units = {f.name: f.metadata[UNIT] for f in dataclasses.fields(Thresholds)}
    for t in thresholds_doc():
        assert f"| `{t['name']}` | {t['default']:g} | {units[t['name']]} |" in page
    for name in RULES:
        assert f"| `{name}` |" in page

def test_every_threshold_is_declared_with_its_unit_and_help():
    """Each rule module's thresholds and the cluster's carry their help and unit as field metadata;
    a field declared without them is refused by every reader (so --help and the docs never miss one)."""
    from otel_profiler.analysis.insights.thresholds import HELP, UNIT, parse_thresholds, threshold
    from otel_profiler.analysis.insights.thresholds import thresholds_doc as documented
    from otel_profiler.cluster.stragglers import StragglerThresholds, split_thresholds

    for cls in (Thresholds, StragglerThresholds):
        for f in dataclasses.fields(cls):
            assert f.metadata[HELP] and f.metadata[UNIT], f.name
    assert [t["name"] for t in thresholds_doc()] == [f.name for f in dataclasses.fields(Thresholds)]

    @dataclasses.dataclass(frozen=True)
    class Half:
        kept: float = threshold(1.0, "%", "a documented one")
        bare: int = 3

    with pytest.raises(TypeError, match="Half.bare"):
        documented(Half)
    with pytest.raises(TypeError, match="Half.bare"):
        parse_thresholds(Half, ["kept=2"])
    stragglers, rest = split_thresholds(["excess_pct=20", "top_ranks=5", "gpu_util_low_pct=60"])
    assert (stragglers.excess_pct, stragglers.top_ranks, rest) == (20.0, 5, ["gpu_util_low_pct=60"])
    assert isinstance(stragglers.top_ranks, int)
    with pytest.raises(ValueError):
        split_thresholds(["excess_pct=lots"])
