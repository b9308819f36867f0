"""What the operator view (with the nn.Module hierarchy and call stacks), the memory sections and the
compute resources cost ``otel-profiler summary`` on the largest shared trace: the command's work
(read the trace, summarize, insights, render) with these sections against the same work with them
left out (what ``summary`` did before they existed), run alternately.

    python benchmarks/summary_sections.py [--repeat 7] [--format table|json]

Prints the median and the best CPU time and wall time of each and their ratios (target: <= 1.15); on
a machine shared with other work the CPU time of this process is the steadier figure, and the best of
the runs the one least disturbed by the other work.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cuda_tracer.loading import load_profile  # noqa: E402
from otel_profiler.analysis import summary as summary_module  # noqa: E402
from otel_profiler.analysis.insights import insights  # noqa: E402
from otel_profiler.report.console import render_json, render_table  # noqa: E402

LARGEST = REPO / "tests" / "data" / "traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
SECTIONS = ("operators", "modules", "memory", "compute_overview", "snapshots_in")


def command(path: str, fmt: str) -> tuple[float, float]:
    """(wall, CPU) seconds for what ``otel-profiler summary PATH --format FMT`` does."""
    t, c = time.perf_counter(), time.process_time()
    profile = load_profile([path], workers=1)
    s = summary_module.summarize(profile)
    s["insights"] = insights(profile, s, None)
    render_json(s) if fmt == "json" else render_table(s)
    return time.perf_counter() - t, time.process_time() - c


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs of each variant (default: 7)")
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="output the command renders (default: table)")
    parser.add_argument("--trace", default=str(LARGEST), help="trace file (default: df_index_resolver)")
    args = parser.parse_args()
    real = {name: getattr(summary_module, name) for name in SECTIONS}
    left_out = {"operators": lambda batch, corr=None: {}, "modules": lambda batch, corr=None: {},
                "memory": lambda batch, multi_rank=False: {}, "compute_overview": lambda profile: [],
                "snapshots_in": lambda sources: []}
    command(args.trace, args.format)  # warm-up: imports, caches
    times: dict[str, list[tuple[float, float]]] = {"with": [], "without": []}
    for _ in range(args.repeat):
        for variant in ("without", "with"):
            for name in SECTIONS:
                setattr(summary_module, name, real[name] if variant == "with" else left_out[name])
            times[variant].append(command(args.trace, args.format))
    for name in SECTIONS:
        setattr(summary_module, name, real[name])
    print(f"trace: {Path(args.trace).name}, format {args.format}, {args.repeat} runs each (median)")
    for i, clock in ((1, "CPU"), (0, "wall")):
        for name, pick in (("median", statistics.median), ("best", min)):
            without = pick(t[i] for t in times["without"])
            with_ = pick(t[i] for t in times["with"])
            print(f"{clock:>4} {name:>6}: without the operator, module, memory and compute sections {without:.3f} s, "
                  f"with {with_:.3f} s, ratio with/without: {with_ / without:.3f} (target <= 1.15)")


if __name__ == "__main__":
    main()
