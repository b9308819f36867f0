"""Renders a summary (``analysis.summary_schema``) as plain-text tables or CSV, with nsys-style columns.

The text form shows the sections the profile has and folds the ones it lacks into one line
(``not in this profile: ...``); kernel names appear in their short form (template arguments folded;
``--format json``/``csv`` carry the full and the raw names); insights are wrapped to the terminal
width, never cut. Every text (names of kernels, operators, annotations, files) is printed terminal-safe:
control characters are escaped in the table and CSV forms (``names.terminal_safe``), and written as
``\\u`` escapes in JSON (the same strings once parsed), so a name cannot send escape sequences.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import textwrap
from typing import Any, Iterable, Mapping, Sequence

from ..analysis.platform import PLATFORM_WORDS
from ..analysis.summary_schema import Insight, RankMeta, Steps, Summary, SyncApiRow, TimeStats
from ..analysis.summary_schema.sections import OperatorRow, Operators
from ..names import short_name, terminal_safe
from .answer_tables import communication_tables, compiled_tables, flops_tables
from .table import Table


_STATS = ("Total (us)", "Avg (us)", "Med (us)", "Min (us)", "Max (us)", "StdDev (us)")


def _stat_cells(s: TimeStats) -> list[float]:
    return [s["total_us"], s["avg_us"], s["med_us"], s["min_us"], s["max_us"], s["std_us"]]


def _dims(v: Any) -> str:
    return "x".join(str(d) for d in v) if isinstance(v, list) else "-"


def _rank_file(meta: RankMeta) -> str:
    return str(meta.get("file") or meta.get("source_file") or meta.get("source") or "")


def _known(value: Any) -> Any:
    """A rank or world size as given, or "-" where the trace recorded none (absent or negative)."""
    return value if isinstance(value, int) and value >= 0 else "-"


def _top(top: int | None) -> str:
    """`` (top N)`` for a title, nothing when every row is shown (``top`` None)."""
    return "" if top is None else f" (top {top})"


def _shown(top: int | None, n: int) -> str:
    return f"{n}" if top is None or top >= n else f"{top} of {n}"


def tables(summary: Summary, top: int | None = 20, full_names: bool = True) -> list[Table]:
    """The summary's sections as tables, in reading order (every section, empty or not); ``top``
    rows per table (None: all)."""
    words = PLATFORM_WORDS.get(summary.get("platform", "unknown"), PLATFORM_WORDS["unknown"])
    out: list[Table] = []
    metas = summary.get("ranks_meta") or []
    if "ranks" in summary or any(m.get("file") or m.get("source_file") for m in metas):
        out.append(Table(f"Ranks ({len(metas)})", ("Rank", "World size", "Host", "Devices", "File"),
                         [(_known(m.get("rank")), _known(m.get("world_size")), m.get("host_name") or "-",
                           ", ".join(str(d) for d in m.get("devices") or []) or "-", _rank_file(m))
                          for m in metas], "rank metadata"))
    out.append(cpu_table(summary))
    out.append(Table("GPU temporal breakdown (per device)",
                     ("Device", "Span (us)", "Busy (us)", "Idle %", "Compute %", "Non-compute %", "Ops"),
                     [(d, v["span_us"], v["busy_us"], v["idle_pct"], v["compute_pct"],
                       v["non_compute_pct"], v["ops"]) for d, v in summary["devices"].items()],
                     "GPU activity"))
    k = summary["kernels"]
    out.append(Table(
        f"GPU kernels by name ({_shown(top, len(k['by_name']))} names; "
        f"{k['count']} launches)",
        ("Time %", *_STATS[:1], "Instances", *_STATS[1:], "Grid", "Block", "Class", "Name"),
        [(r["time_pct"], r["total_us"], r["instances"], *_stat_cells(r)[1:], _dims(r.get("grid")),
          _dims(r.get("block")) + (f" (+{r['launch_configs'] - 1})" if r.get("launch_configs", 0) > 1 else ""),
          r["class"], r["name"] if full_names else r.get("short_name", r["name"]))
         for r in k["by_name"][:top]], "kernels"))
    by_class = tuple(k["by_class"].get(c, 0.0) for c in ("compute", "communication", "memory"))
    out.append(Table("GPU time by kernel class (us, summed)", ("Compute", "Communication", "Memory"),
                     [by_class] if any(by_class) else [], "kernel classes"))
    out.append(Table("Memory copies and sets",
                     ("Operation", "Count", "Bytes", "Throughput (GB/s)", *_STATS),
                     [(name, v["count"], v["bytes"], v["throughput_gbps"], *_stat_cells(v))
                      for name, v in [*summary["memcpy"].items(), ("Memset", summary["memset"])]
                      if v["count"]], "memory copies or sets"))
    out.append(Table(f"{words['api']} calls{_top(top)}",
                     ("Time %", "Total (us)", "Num Calls", *_STATS[1:], "Name"),
                     [(r["time_pct"], r["total_us"], r["calls"], *_stat_cells(r)[1:], r["name"])
                      for r in summary["runtime_api"][:top]], f"{words['api']} calls"))
    sync = summary["sync"]
    out.append(Table("Synchronization (GPU sync events; host calls that wait: syncs and blocking copies)",
                     ("Kind", "Count", *_STATS),
                     [(kind, v["count"], *_stat_cells(v)) for kind, v in sync["by_kind"].items()] +
                     [(f"{_api_label(r)} {r['name']}", r["calls"], *_stat_cells(r)) for r in sync["api"]],
                     "synchronization"))
    launch = summary["launch"]
    out.append(Table(f"Launch delay and latency ({launch['matched_gpu_ops']} linked GPU ops, "
                     f"{launch['orphan_gpu_ops']} without a launch call in the trace)",
                     ("Metric", "p50 (us)", "p90 (us)", "p99 (us)", "Max (us)", "Mean (us)"),
                     [(label, v["p50"], v["p90"], v["p99"], v["max"], v["mean"])
                      for label, v in (("launch delay (HTA)", launch["delay_us"]),
                                       ("launch latency (Nsight)", launch["latency_us"]))]
                     if launch["matched_gpu_ops"] else [], "launch calls linked to GPU ops"))
    out.append(Table("Stream idle breakdown",
                     ("Device", "Stream", "Ops", "Host wait (us)", "Kernel wait (us)", "Other (us)",
                      "Max queue"),
                     [((f"{s['rank']}:{s['device']}" if "ranks" in summary else s["device"]),
                       s["stream"], s["ops"], s["host_wait_us"], s["kernel_wait_us"], s["other_us"],
                       s["max_queue_depth"]) for s in summary["streams"]], "GPU streams"))
    for title, annotations in (("User annotations", summary["annotations"]),
                               ("GPU user annotations", summary["gpu_annotations"])):
        out.append(Table(f"{title}{_top(top)}", ("Instances", *_STATS, "Name"),
                         [(r["instances"], *_stat_cells(r), r["name"]) for r in annotations[:top]],
                         title[0].lower() + title[1:] if title.startswith("U") else title))
    out.extend(operator_tables(summary, top, full_names))
    out.extend(memory_tables(summary, top))
    out.extend(flops_tables(summary, top))
    out.extend(communication_tables(summary, top))
    out.extend(compiled_tables(summary, top))
    steps = summary["steps"]
    d = steps["duration_us"]
    out.append(Table(f"Steps ({steps['count']}{_step_origin(steps)})",
                     ("Count", "p50 (us)", "p90 (us)", "p99 (us)", "Max (us)", "Mean (us)"),
                     [(steps["count"], d["p50"], d["p90"], d["p99"], d["max"], d["mean"])]
                     if steps["count"] else [], "step markers"))
    windows = steps.get("windows") or []
    if windows:
        out.append(Table(f"Detailed windows ({len(windows)}: steps captured with operators and kernels; the step "
                         "after each also holds the work of closing it)", ("Rank", "First step", "Last step", "Reason"),
                         [(w["rank"], w["first_step"], w["last_step"], w["reason"]) for w in windows]))
    if "insights" in summary:
        out.append(Table(f"Insights ({len(summary['insights'])})",
                         ("Severity", "Scope", "Rule", "Evidence", "Recommendation"),
                         [(i["severity"], i["scope"], i["rule"], i["evidence"], i["recommendation"])
                          for i in summary["insights"]], "insights (no rule fired)"))
    return out


def _step_origin(steps: Steps) -> str:
    """Where a run's steps come from and how they are numbered, for the steps table's title: a live
    run whose steps the profiler found numbers them as the loop counts its iterations, from 0;
    ``step_context`` numbers are the program's own, and a trace file's are torch's."""
    source = steps.get("source")
    if not source:
        return ""
    if source not in ("optimizer", "backward", "step()"):
        return f", from {source}"
    numbers = [item["step"] for item in steps.get("items") or [] if item.get("step", -1) >= 0]
    unseen = "; step 0 not measured: its start was not seen" if numbers and min(numbers) > 0 else ""
    return f", from {source}; step 0 is the loop's first iteration{unseen}"


def cpu_table(summary: Summary) -> Table:
    """CPU utilization per rank while the steps ran (live runs): the machine, the training process,
    the other processes."""
    return Table("CPU utilization (machine: all its cores; process: the training process's share of "
                 "the cores it may use; others: the rest of the machine, in cores)",
                 ("Rank", "Samples", "Window", "Cores", "Machine % mean", "Machine % max",
                  "Process % mean", "Process % max", "Process cores", "Others (cores)"),
                 [(rank, u["samples"], u["window"], u["cores"], u["machine_pct"]["mean"],
                   u["machine_pct"]["max"], u["process_pct"]["mean"], u["process_pct"]["max"],
                   u["process_cores"], u["others_cores"]) for rank, u in (summary.get("cpu") or {}).items()])


def torch_ranges_table(ops: Operators, top: int | None) -> Table:
    """torch's own ranges (steps, optimizer phases, data loading, compiled code), apart from the
    operators and the user's annotations: what each marks, its time, and the GPU time of kernels
    launched in it outside any operator that was recorded."""
    rows = [r for r in ops["by_name"] if r.get("range")]
    gpu = bool(ops["kernel_total_us"])
    shown = rows[:top]
    return Table(f"torch's own ranges ({_shown(top, len(rows))} names; recorded by torch, not by your code)",
                 ("Marks", "Calls", "Total CPU (us)", *(("Self GPU (us)", "Total GPU (us)") if gpu else ()), "Name"),
                 [(r["range"], r["calls"], r["total_cpu_us"],
                   *((r["self_gpu_us"], r["total_gpu_us"]) if gpu else ()), r["name"]) for r in shown],
                 "")  # a trace without them: nothing to say


def operator_tables(summary: Summary, top: int | None, full_names: bool) -> list[Table]:
    """The operator view: operators by the GPU time of the kernels they launched, and the kernels
    of CUDA graphs and compiled regions. Without GPU work, the CPU columns only."""
    ops = summary.get("operators")
    if not ops:
        return []
    mods = ops.get("modules") or {}
    by_name = [r for r in ops["by_name"] if not r.get("range")]
    ranges = torch_ranges_table(ops, top)
    if not summary["devices"] and not ops["kernel_total_us"]:
        out = [Table(f"Operators ({_shown(top, len(by_name))} names; no GPU work recorded, so "
                     "no GPU columns)", ("Calls", "Self CPU (us)", "Total CPU (us)", "Name"),
                     [(r["calls"], r["self_cpu_us"], r["total_cpu_us"], r["name"])
                      for r in by_name[:top]], "operators (aten::*, record_function)"), ranges]
        if mods:
            rows = mods["by_path"][:top]
            out.append(Table(f"nn.Module hierarchy ({len(rows)} of {len(mods['by_path'])} modules; no GPU "
                             "columns)", ("Calls", "CPU (us)", "Module"),
                             [(r["calls"], r["cpu_us"], "  " * r["depth"] + r["name"]) for r in rows]))
        return out
    lost = ops["unattributed"]
    title = (f"Operators ({_shown(top, len(by_name))} names; "
             f"{_fmt(float(ops['attributed_us']))} of "
             f"{_fmt(float(ops['kernel_total_us']))} us of kernel time attributed")
    missing = lost["no_launch"]["kernels"] + lost["no_operator"]["kernels"]
    title += f"; {missing} kernels without an operator)" if missing else ")"

    def top_kernel(r: OperatorRow) -> str:
        if not r["top_kernels"]:
            return "-"
        k = r["top_kernels"][0]
        return k["name"] if full_names else short_name(k["name"], limit=60)

    out = [Table(title, ("GPU %", "Self GPU (us)", "Total GPU (us)", "Calls", "Self CPU (us)",
                         "Total CPU (us)", "Kernels", "Name", "Top kernel"),
                 [(r["gpu_pct"], r["self_gpu_us"], r["total_gpu_us"], r["calls"], r["self_cpu_us"],
                   r["total_cpu_us"], r["kernels"], r["name"], top_kernel(r))
                  for r in by_name[:top]], "operators (aten::*, record_function)"), ranges]
    if ops["regions"]:
        out.append(Table("Kernels of CUDA graphs and compiled regions",
                         ("Kind", "Kernels", "GPU (us)", "Region"),
                         [(r["kind"], r["kernels"], r["gpu_us"], r["name"]) for r in ops["regions"]]))
    if mods:
        rows = [r for r in mods["by_path"] if r["total_gpu_us"] or r["depth"] == 0][:top]
        out.append(Table(f"nn.Module hierarchy ({len(rows)} of {len(mods['by_path'])} modules; "
                         f"{_fmt(float(mods['attributed_us']))} us of kernel time inside modules)",
                         ("Total GPU (us)", "Self GPU (us)", "Calls", "CPU (us)", "Kernels", "Module"),
                         [(r["total_gpu_us"], r["self_gpu_us"], r["calls"], r["cpu_us"], r["kernels"],
                           "  " * r["depth"] + r["name"]) for r in rows]))
    return out


def _mib(b: Any) -> Any:
    return "-" if b is None else round(b / 2**20, 1)


def memory_tables(summary: Summary, top: int | None) -> list[Table]:
    """GPU memory: the peak per device, allocated per step with its growth, the largest allocations."""
    devices = (summary.get("memory") or {}).get("devices") or {}
    out = [Table("GPU memory (MiB; from the allocator's [memory] events)",
                 ("Device", "Peak allocated", "Reserved at peak", "Peak reserved", "Final allocated",
                  "Peak step", "Peak operator", "Allocations", "Baseline"),
                 [(k, _mib(d["peak"]["allocated_bytes"]), _mib(d["peak"]["reserved_bytes"]),
                   _mib(d["peak_reserved_bytes"]), _mib(d["final_allocated_bytes"]),
                   "-" if d["peak"]["step"] is None else d["peak"]["step"], d["peak"]["operator"] or "-",
                   d["allocations"], d["baseline"]) for k, d in devices.items()],
                 "GPU memory events (profile_memory)")]
    steps = [(k, s["step"], _mib(s["peak_allocated_bytes"]), _mib(s["end_allocated_bytes"]),
              _mib(s["growth_bytes"])) for k, d in devices.items() for s in d["steps"]]
    if steps:
        out.append(Table("GPU memory per step (MiB; growth: allocated at the step's end minus at the "
                         "end of the step before)",
                         ("Device", "Step", "Peak allocated", "Allocated at end", "Growth"), steps))
    big = [(k, _mib(a["bytes"]), "-" if a["step"] is None else a["step"], a["operator"] or "-")
           for k, d in devices.items() for a in d["largest_allocations"][:top]]
    if big:
        out.append(Table("Largest GPU allocations (MiB)", ("Device", "Size", "Step", "Operator"), big))
    return out + live_memory_tables(summary)


def live_memory_tables(summary: Summary) -> list[Table]:
    """The CPU allocator's peak (memory recorded on the host), torch.cuda peaks per step of a live
    run, and the CUDA memory snapshots of a profile folder."""
    mem = summary.get("memory") or {}
    out = []
    if mem.get("host"):
        out.append(Table("Host memory (MiB; from the CPU allocator's [memory] events)",
                         ("Device", "Peak allocated", "Final allocated", "Peak step", "Peak operator",
                          "Allocations"),
                         [(k, _mib(d["peak"]["allocated_bytes"]), _mib(d["final_allocated_bytes"]),
                           "-" if d["peak"]["step"] is None else d["peak"]["step"],
                           d["peak"]["operator"] or "-", d["allocations"]) for k, d in mem["host"].items()]))
    steps = [(m.get("rank"), s["device"], s["step"], _mib(s["peak_allocated_bytes"]),
              _mib(s["peak_reserved_bytes"]), _mib(s["allocated_bytes"]))
             for m in summary.get("ranks_meta", []) for s in (m.get("cuda_memory") or {}).get("steps", [])]
    if steps:
        out.append(Table(f"CUDA memory per step (MiB; torch.cuda peaks, last {len(steps)} steps)",
                         ("Rank", "Device", "Step", "Peak allocated", "Peak reserved", "Allocated at end"),
                         steps))
    if mem.get("snapshots"):
        out.append(Table("CUDA memory snapshots (open in pytorch.org/memory_viz)",
                         ("Rank", "Reason", "Segments", "Reserved (MiB)", "Allocated (MiB)", "File"),
                         [(s["rank"], s["reason"], s.get("segments", "-"), _mib(s.get("reserved_bytes")),
                           _mib(s.get("allocated_bytes")), s["file"] + (f" ({s['error']})" if "error" in s else ""))
                          for s in mem["snapshots"]]))
    return out


def _api_label(row: SyncApiRow) -> str:
    return {"sync": "sync call", "copy": "blocking copy"}.get(str(row.get("blocking")), "stream wait")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return terminal_safe(str(value))


def render_table(summary: Summary, top: int = 20, name_width: int = 90, width: int | None = None) -> str:
    """The text form. ``name_width``: longest cell before it is cut with ``…`` (0: never cut);
    ``width``: the width insights wrap to (default: the terminal's)."""
    width = width or max(60, shutil.get_terminal_size((100, 24)).columns)
    lines: list[str] = []
    if summary.get("notes"):
        lines.extend(terminal_safe(f"note: {n}") for n in summary["notes"])
        lines.append("")
    lacks = []
    no_gpu = not summary["devices"]
    for table in tables(summary, top, full_names=False):
        if not table.rows:
            if table.lacks and not (no_gpu and _gpu_section(table)):
                lacks.append(table.lacks)
            continue
        if table.title.startswith("Insights"):
            lines.extend(_insight_lines(summary["insights"], table.title, width))
            continue
        lines.extend(_table_lines(table, name_width))
    if lacks:
        lines.extend(textwrap.wrap("not in this profile: " + ", ".join(lacks) + ".", width,
                                   subsequent_indent="  ", break_on_hyphens=False))
    return "\n".join(lines).rstrip("\n")


_GPU_SECTIONS = {"kernels", "kernel classes", "memory copies or sets", "synchronization",
                 "launch calls linked to GPU ops", "GPU streams", "GPU user annotations", "GPU activity",
                 "GPU memory events (profile_memory)"}


def _gpu_section(table: Table) -> bool:
    """A section only GPU work fills (left out of a profile without GPU activity)."""
    return table.lacks in _GPU_SECTIONS or table.lacks.endswith("API calls")


def _table_lines(table: Table, name_width: int) -> list[str]:
    cells = [[_fmt(c) for c in row] for row in table.rows]
    if name_width:
        cells = [[c if len(c) <= name_width else c[:name_width - 1] + "…" for c in row] for row in cells]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(table.header)]
    last = len(table.header) - 1

    def line(row: Iterable[str]) -> str:
        parts = [c.ljust(widths[i]) if i == last or not _numeric(c) else c.rjust(widths[i])
                 for i, c in enumerate(row)]
        return "  ".join(parts).rstrip()

    return [terminal_safe(f"== {table.title}"), line(table.header), "  ".join("-" * w for w in widths),
            *(line(r) for r in cells), ""]


def table_text(title: str, header: Sequence[str], rows: list[Sequence[Any]], name_width: int = 90
               ) -> str:
    """One table as text, the way ``render_table`` draws each section."""
    return "\n".join(_table_lines(Table(title, header, rows), name_width))


def _insight_lines(insights: list[Insight], title: str, width: int) -> list[str]:
    lines = [f"== {title}"]
    for i in insights:
        head = terminal_safe(f"[{i['severity']}] {i['title']} ({i['rule']}, {i['scope']})")
        lines.extend(textwrap.wrap(head, width, subsequent_indent="  ", break_on_hyphens=False))
        lines.extend(textwrap.wrap(terminal_safe(i["evidence"]), width, initial_indent="    ",
                                   subsequent_indent="    ", break_on_hyphens=False))
        lines.extend(textwrap.wrap(terminal_safe(i["recommendation"]), width, initial_indent="    fix: ",
                                   subsequent_indent="         ", break_on_hyphens=False))
        lines.append("")
    return lines


def _numeric(cell: str) -> bool:
    return cell.replace(",", "").replace(".", "").replace("-", "").isdigit()


def render_csv(summary: Summary) -> str:
    """Every table, each preceded by a ``# title`` line and separated by a blank line; full names."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    every = tables(summary, top=None)
    if not summary["devices"]:
        gpu = [t for t in every if not t.rows and _gpu_section(t)]
        if gpu:
            buf.write("# left out, no GPU activity in this profile: "
                      + "; ".join(terminal_safe(t.title) for t in gpu) + "\n\n")
        every = [t for t in every if t not in gpu]
    for table in every:
        buf.write(f"# {terminal_safe(table.title)}\n")
        writer.writerow(table.header)
        writer.writerows([terminal_safe(c) if isinstance(c, str) else c for c in row] for row in table.rows)
        buf.write("\n")
    return buf.getvalue()


_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def unicode_escaped(text: str) -> str:
    """``text`` (JSON, or HTML holding JSON) with its control characters but tab and newlines, and
    its lone surrogates, written as ``\\u`` escapes: inside a JSON string the same value, and
    nothing a terminal acts on."""
    return _CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _CONTROLS.search(text) else text


def render_json(document: Mapping[str, object]) -> str:
    """Indented JSON of a document (a summary, a diff, several jobs' summaries), non-ASCII text as
    is, but control characters and lone surrogates as ``\\u`` escapes (``unicode_escaped``)."""
    return unicode_escaped(json.dumps(document, indent=1, ensure_ascii=False))
