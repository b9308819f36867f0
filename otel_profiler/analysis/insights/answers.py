"""Insight rules on the answers beyond time: how far from the hardware's peak the job runs (``low_mfu``)
and what compiled code costs on the host (``compiled_overhead``). Both read the summary's sections
(``flops``, ``compiled``) and stay silent when the profile lacks them (no shapes, no peak, no
compiled region)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..summary_schema import Insight
from .context import Context, insight
from .thresholds import threshold

TENSOR_CORE_MULTIPLE = 8
"""Matrix dimensions that are multiples of this keep fp16/bf16 tensor cores fully fed (NVIDIA's
matrix-multiplication performance guide); others pad or fall back to slower kernels."""
_DIMS = re.compile(r"\[([0-9, ]+)\]")


@dataclass(frozen=True)
class AnswerThresholds:
    """The thresholds of the rules on FLOPs and compiled code; ``threshold`` keeps each one's help and unit."""

    mfu_low_pct: float = threshold(
        30.0, "%", "low_mfu: model FLOPs utilization below this % of the device's peak (needs input shapes "
        "and a known device or ``OTEL_PROFILER_PEAK_TFLOPS``).")
    compiled_python_pct: float = threshold(
        30.0, "%", "compiled_overhead: Python inside compiled regions takes at least this % of their CPU time, ...")
    compiled_recompilations: int = threshold(
        1, "recompilations", "compiled_overhead: ... or the profile shows at least this many recompilations.")


def _misaligned(shapes: str) -> list[int]:
    """The last two dimensions of a GEMM's inputs that are no multiple of ``TENSOR_CORE_MULTIPLE``."""
    found: list[int] = []
    for group in _DIMS.findall(shapes):
        dims = [int(d) for d in group.split(",") if d.strip()]
        found.extend(d for d in dims[-2:] if d % TENSOR_CORE_MULTIPLE and d > 1)
    return sorted(set(found))


def _time(us: float) -> str:
    return f"{us / 1e3:,.1f} ms" if us >= 1e3 else f"{us:,.0f} µs"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


def low_mfu(ctx: Context) -> list[Insight]:
    """MFU below ``mfu_low_pct``, naming the operators and shapes that cost the most GPU time."""
    f = ctx.summary.get("flops") or {}
    mfu, peak = f.get("mfu"), f.get("peak")
    if mfu is None or peak is None or 100.0 * mfu >= ctx.th.mfu_low_pct:
        return []
    top = f["by_operator"][:3]
    named = "; ".join(f"{r['name']} {r['shapes']} ({_time(r['gpu_us'])} GPU, "
                      f"{r['tflops_per_s'] or 0:,.1f} TFLOP/s, {r['bound'] or 'unknown'}-bound)" for r in top)
    advice = []
    odd = sorted({d for r in top if r["class"] == "gemm" for d in _misaligned(r["shapes"])})
    if odd:
        advice.append(f"pad matrix dimensions {', '.join(map(str, odd[:6]))} to multiples of "
                      f"{TENSOR_CORE_MULTIPLE} (tensor cores)")
    if any(r["bound"] == "memory" and r["class"] in ("elementwise", "other") for r in top):
        advice.append("fuse memory-bound elementwise and normalisation operators (torch.compile)")
    if f["by_class"]["gemm"]["flops"] and peak["dtype"] == "fp32":
        advice.append("train in bf16 (torch.autocast) or allow TF32 (torch.backends.cuda.matmul.allow_tf32)")
    advice.append("raise the batch size while memory allows")
    return [insight(
        "low_mfu", "medium", "job", "Far from the hardware's peak",
        f"Model FLOPs utilization is {100.0 * mfu:.1f}% of {peak['device']}'s {peak['tflops']:g} TFLOP/s "
        f"({peak['dtype']}; threshold {ctx.th.mfu_low_pct:g}%). Most GPU time: {named}.",
        _sentence("; ".join(advice)), mfu=mfu, peak_tflops=peak["tflops"])]


def compiled_overhead(ctx: Context) -> list[Insight]:
    """Recompilations seen, or Python taking a large share of the compiled regions' CPU time."""
    c = ctx.summary.get("compiled") or {}
    regions = c.get("regions") or []
    if not regions:
        return []
    dynamo = c.get("dynamo") or {}
    recompiles = dynamo.get("recompilations") or {}
    count = int(recompiles.get("count") or 0)
    cpu_us = sum(r["self_cpu_us"] for r in regions)
    python_us = float(dynamo.get("python_us_in_regions") or 0.0)
    python_pct = 100.0 * python_us / cpu_us if cpu_us else 0.0
    out = []
    if count >= ctx.th.compiled_recompilations:
        ids = ", ".join(recompiles.get("ids") or [])
        out.append(insight(
            "compiled_overhead", "medium", "job", "torch.compile recompiled",
            f"{count} recompilation(s) seen ({ids}); each one compiles the frame again and keeps another "
            "graph in the cache.",
            "Find the cause with TORCH_LOGS=recompiles; mark changing sizes dynamic "
            "(torch._dynamo.mark_dynamic, dynamic=True) or keep shapes and Python values the graph "
            "depends on fixed.", recompilations=count))
    if python_pct >= ctx.th.compiled_python_pct:
        out.append(insight(
            "compiled_overhead", "low", "job", "Python time inside compiled regions",
            f"Python ran {python_us / 1e3:,.1f} ms of the compiled regions' {cpu_us / 1e3:,.1f} ms CPU time "
            f"({python_pct:.1f}%, threshold {ctx.th.compiled_python_pct:g}%).",
            "Reduce graph breaks (torch._dynamo.explain) so more of the step runs as one graph, and try "
            "mode='reduce-overhead' (CUDA graphs) for small, launch-bound steps.", python_pct=python_pct))
    return out
