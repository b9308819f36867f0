"""The text and CSV tables of the summary's answers beyond time: FLOPs and MFU (``flops``),
communication hidden behind computation (``communication``) and compiled code (``compiled``).

Each function gives the tables of one section for ``console.tables`` (empty rows: the section is
folded into the "not in this profile" line)."""

from __future__ import annotations

from typing import Any

from ..analysis.summary_schema import Summary
from .table import Table


def _pct(fraction: Any) -> Any:
    return None if fraction is None else 100.0 * fraction


def flops_tables(summary: Summary, top: int | None) -> list[Table]:
    f = summary.get("flops") or {}
    if not f.get("operators"):
        return [Table("FLOPs and MFU", ("Class",), [], "operator input shapes (record_shapes) for FLOPs")]
    peak = f.get("peak")
    where = (f"peak {peak['device']} {peak['dtype']}: {peak['tflops']:g} TFLOP/s, {peak['tb_per_s']:g} TB/s"
             if peak else "unknown device: no MFU (set OTEL_PROFILER_PEAK_TFLOPS)")
    mfu = f.get("mfu")
    mfu_text = f"MFU {100.0 * mfu:.2f}%" if mfu is not None else "MFU -"
    out = [Table(f"FLOPs by class ({mfu_text}; {where})",
                 ("Class", "TFLOPs", "GB moved", "GPU (us)", "TFLOP/s"),
                 [(name, c["flops"] / 1e12, c["bytes"] / 1e9, c["gpu_us"], c["tflops_per_s"])
                  for name, c in f["by_class"].items() if c["flops"] or c["bytes"]], "FLOPs")]
    rows = f["by_operator"][:top]
    out.append(Table(f"FLOPs by operator and shape (top {len(rows)} by GPU time)",
                     ("GPU (us)", "Calls", "TFLOPs", "TFLOP/s", "TB/s", "FLOPs/byte", "Bound", "Operator", "Shapes"),
                     [(r["gpu_us"], r["calls"], r["flops"] / 1e12, r["tflops_per_s"], r["tb_per_s"],
                       r["intensity"], r["bound"] or "-", r["name"], r["shapes"]) for r in rows], "FLOPs"))
    steps = [s for s in f.get("by_step", []) if s.get("mfu") is not None]
    if steps:
        out.append(Table("MFU per step", ("Rank", "Step", "Duration (us)", "TFLOPs", "MFU %"),
                         [(s["rank"], s["step"], s["duration_us"], s["flops"] / 1e12, _pct(s["mfu"]))
                          for s in steps[:top]], "steps"))
    return out


def communication_tables(summary: Summary, top: int | None) -> list[Table]:
    c = summary.get("communication") or {}
    if not c.get("kernels"):
        return [Table("Communication and computation overlap", ("Collective",), [], "communication kernels")]
    title = (f"Communication hidden behind computation ({c['overlap_pct']:.1f}% overlapped; "
             f"{c['exposed_us']:,.1f} us of {c['total_us']:,.1f} us exposed)")
    out = [Table(title, ("Collective", "Device", "Stream", "Kernels", "Total (us)", "Exposed (us)", "Overlap %"),
                 [(r["collective"], r["device"], r["stream"], r["kernels"], r["total_us"], r["exposed_us"],
                   r["overlap_pct"]) for r in c.get("by_collective", [])[:top]], "communication kernels")]
    steps = c.get("by_step") or []
    if steps:
        out.append(Table("Exposed communication per step",
                         ("Step", "Step (us)", "Communication (us)", "Exposed (us)", "Exposed % of step"),
                         [(s["step"], s["step_us"], s["total_us"], s["exposed_us"], s["exposed_pct_of_step"])
                          for s in steps[:top]], "steps"))
    return out


def compiled_tables(summary: Summary, top: int | None) -> list[Table]:
    c = summary.get("compiled") or {}
    regions = c.get("regions") or []
    if not regions:
        return [Table("Compiled regions (torch.compile)", ("Region",), [], "compiled regions (torch.compile)")]
    dynamo = c.get("dynamo") or {}
    lookups = dynamo.get("cache_lookups") or {}
    recompiles = (dynamo.get("recompilations") or {}).get("count", 0)
    out = [Table(f"Compiled regions (Triton {c['triton_gpu_us']:,.1f} us, library {c['extern_gpu_us']:,.1f} us, "
                 f"outside {c['outside_gpu_us']:,.1f} us of GPU; {lookups.get('count', 0)} cache lookups, "
                 f"{recompiles} recompilations)",
                 ("Region", "Pass", "Calls", "CPU (us)", "GPU (us)", "Kernels"),
                 [(r["name"], r["pass"], r["calls"], r["cpu_us"], r["gpu_us"], len(r["kernels"]))
                  for r in regions[:top]], "compiled regions")]
    kernels = sorted(((r["name"], k) for r in regions for k in r["kernels"]), key=lambda rk: -rk[1]["gpu_us"])
    if kernels:
        out.append(Table("Kernels of compiled regions", ("GPU (us)", "Calls", "Kind", "Fused operations", "Region", "Kernel"),
                         [(k["gpu_us"], k["calls"], k["kind"], ", ".join(k["fused_ops"]) or "-", region, k["name"])
                          for region, k in kernels[:top]], "kernels"))
    return out
