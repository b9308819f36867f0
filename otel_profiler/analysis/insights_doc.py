"""The insight rules and their thresholds as a Markdown page (``docs/insights.md``)::

    python -m otel_profiler.analysis.insights_doc > docs/insights.md
"""

from __future__ import annotations

import inspect

from .insights import RULES, thresholds_doc


def markdown() -> str:
    lines = ["# Insights: rules and thresholds", "",
             "`otel-profiler summary` and `otel-profiler report` run every rule below on a profile; a "
             "rule that fires gives a finding with its evidence (the numbers) and a recommendation. "
             "Rules whose data a trace lacks (steps, CPU-side events, memory samples, several ranks) "
             "stay silent. Override any threshold with `--threshold NAME=VALUE` (repeatable), e.g. "
             "`otel-profiler report trace.json.gz -o report.html --threshold gpu_util_low_pct=60`.", "",
             "This page is generated: `python -m otel_profiler.analysis.insights_doc > docs/insights.md`.",
             "", "Steps are named `step N` (the trace's `ProfilerStep#N`). A step is an outlier only when "
             "it is slower than the median by more than 3 robust sigmas *and* by both floors: "
             "`step_outlier_min_excess_pct` of the median and `step_outlier_min_excess_ms` ms, so a "
             "few ms of jitter (as under DDP: 4.7 ms against a 2.74 ms median) is no finding. A rank's "
             "first `warmup_steps` steps are named warm-up; when only they are slow the finding is low "
             "severity.", "",
             "The host rules (`cpu_contention`, `host_bound`) read the CPU samples a live run keeps "
             "(`otel-profiler run`, zero-code; `OTEL_PROFILER_CPU_SAMPLE_S`), taken while the steps ran: "
             "the machine's busy share, the training process's CPU in cores, and what that leaves for "
             "other processes. The samples do not record which other processes ran (the operating "
             "system's per-process CPU times are read for the training process only), so the "
             "contention finding says how much CPU the others took, not who they were; the job's own "
             "DataLoader workers count among them. A training loop's thread alone wants one core: "
             "getting under half a core while the machine is saturated and others use at least one "
             "core is contention. Measured on a 2-core machine shared with other tests: "
             "`examples/train_mlp.py` alone got 0.60 to 0.66 cores (30 to 33% of 2 cores), with two "
             "busy-loop processes beside it 0.26 to 0.28 cores, and took 3.5 times as long. Both "
             "rules stay silent on trace files (no samples) and when a GPU is busy at least "
             "`gpu_util_low_pct`.", "", "## Rules", "", "| Rule | Fires when |", "| --- | --- |"]
    for name, rule in RULES.items():
        doc = " ".join((inspect.getdoc(rule) or "").split("\n\n")[0].split()).replace("``", "`")
        lines.append(f"| `{name}` | {doc.replace('|', '/')} |")
    lines += ["", "## Thresholds", "", "| Name | Default | Meaning |", "| --- | --- | --- |"]
    for t in thresholds_doc(code="`"):
        lines.append(f"| `{t['name']}` | {t['default']:g} | {t['meaning'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
