"""Insight rules on the host, true on any machine and on GPU machines too: other processes taking the
CPU (contention), a host-bound job, a data loader without workers, and a profile without operators.

The CPU rules read the summary's ``cpu`` section (``host.cpu.cpu_usage``: the samples a live run
records); trace files carry none, and those rules stay silent on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuda_tracer.model.events import Kind

from ..attribution.operators import annotation_rows
from ..summary_schema import CpuUsage, Insight
from .context import Context, insight
from .thresholds import threshold


@dataclass(frozen=True)
class HostThresholds:
    """The thresholds of the host rules; ``threshold`` keeps each one's help and unit."""

    contention_machine_pct: float = threshold(
        90.0, "%", "cpu_contention: the machine busy at least this % (mean of the CPU samples while steps "
        "ran), ...")
    contention_others_cores: float = threshold(
        1.0, "cores", "cpu_contention: ... other processes using at least this many cores, ...")
    contention_job_cores: float = threshold(
        0.5, "cores", "cpu_contention: ... and the training process getting less than this many cores (high: "
        "half).")
    contention_min_samples: int = threshold(
        3, "samples", "cpu_contention, host_bound: fewer CPU samples than this say nothing.")
    host_bound_cores: float = threshold(
        0.9, "cores", "host_bound: the training process keeps at least this many cores busy, with no busy "
        "GPU.")
    loader_min_cores: int = threshold(
        2, "cores", "dataloader_workers: a machine with at least this many cores can load in worker "
        "processes, ...")
    loader_workers_pct: float = threshold(
        2.0, "%", "dataloader_workers: ... and a loader without workers takes at least this % of step time.")


def _gpu_util(ctx: Context, rank: str) -> float | None:
    """The busiest device's utilization (%) of ``rank``, or None when it recorded no GPU work."""
    devices = ctx.summary["devices"]
    if not devices:
        return None
    mine = ([d for k, d in devices.items() if k.split(":")[0] == rank] if "ranks" in ctx.summary
            else list(devices.values()))
    return max((100.0 - d["idle_pct"] for d in mine), default=None)


def _gpu_waits_not(ctx: Context, rank: str) -> bool:
    """No GPU, or a GPU busy less than ``gpu_util_low_pct``: the host can be what limits the job."""
    util = _gpu_util(ctx, rank)
    return util is None or util < ctx.th.gpu_util_low_pct


def _cores_text(n: float) -> str:
    return f"{n:g} core" if n == 1 else f"{n:g} cores"


def _window(u: CpuUsage) -> str:
    where = "while the steps ran" if u["window"] == "steps" else "over the run"
    return f"{u['samples']} samples every {u['interval_s']:g} s {where}"


def _whose(u: CpuUsage) -> str:
    """Who the other processes were, as far as the profile knows."""
    if "job_cores" in u:
        return (f"The job's own other processes (its DataLoader workers and child processes, sibling "
                f"ranks, the launcher) took {u['job_cores']:.1f} cores besides and are not counted "
                "among the others.")
    return ("The profile records this process's CPU and the machine's, not which other processes "
            "ran; this job's own DataLoader workers and child processes count among them.")


def cpu_contention(ctx: Context) -> list[Insight]:
    """The machine ≥ ``contention_machine_pct`` % busy, other processes using ≥
    ``contention_others_cores`` cores, and the training process getting less than
    ``contention_job_cores`` of a core (a training loop's thread alone wants one), with no busy GPU.

    Needs the CPU samples of a live run (``OTEL_PROFILER_CPU_SAMPLE_S``)."""
    th, out = ctx.th, []
    for rank, u in (ctx.summary.get("cpu") or {}).items():
        machine, job, others = u["machine_pct"]["mean"], u["process_cores"], u["others_cores"]
        if u["samples"] < th.contention_min_samples or not _gpu_waits_not(ctx, rank):
            continue
        if machine < th.contention_machine_pct or others < th.contention_others_cores or \
                job >= th.contention_job_cores:
            continue
        out.append(insight(
            "cpu_contention", "high" if job < th.contention_job_cores / 2 else "medium", f"rank {rank}",
            "CPU contention: other processes take the machine",
            f"The machine was {machine:.0f}% busy ({u['machine_cores']} cores) while the training "
            f"process got only {job:.2f} cores ({u['process_pct']['mean']:.0f}% of its {u['cores']} "
            f"cores); other processes used about {others:.1f} cores ({_window(u)}; thresholds: machine "
            f"{th.contention_machine_pct:g}%, others {_cores_text(th.contention_others_cores)}, job under "
            f"{_cores_text(th.contention_job_cores)}). {_whose(u)}",
            "Find what else runs on the machine while the job does (top, or ps -eo pid,pcpu,comm "
            "--sort=-pcpu) and stop or move it, keep it off the job's cores (taskset, cgroup CPU "
            "quotas), or ask the scheduler for dedicated CPUs. If the others are the job's DataLoader "
            "workers, use fewer workers than cores.",
            machine_pct=machine, process_cores=job, others_cores=others, job_cores=u.get("job_cores"),
            cores=u["cores"]))
    return out


def host_bound(ctx: Context) -> list[Insight]:
    """The training process keeps ≥ ``host_bound_cores`` cores busy while there is no GPU work or
    the GPU is busy less than ``gpu_util_low_pct`` %: the host's CPU work sets the step time."""
    th, out = ctx.th, []
    for rank, u in (ctx.summary.get("cpu") or {}).items():
        job = u["process_cores"]
        if u["samples"] < th.contention_min_samples or job < th.host_bound_cores or \
                not _gpu_waits_not(ctx, rank):
            continue
        util = _gpu_util(ctx, rank)
        busy = (f"the training process kept {job:.2f} cores busy ({u['process_pct']['mean']:.0f}% of "
                f"its {u['cores']} cores; {_window(u)}; threshold {th.host_bound_cores:g} cores)")
        if util is None:
            evidence = f"No GPU work was recorded: the job computes on the CPU, and {busy}."
            fix = ("If a GPU was meant to do the work, check torch.cuda.is_available() and that the "
                   "model and each batch are moved with .to('cuda'). On the CPU: give PyTorch the "
                   "cores (torch.set_num_threads, OMP_NUM_THREADS), use larger batches or "
                   "torch.compile, and record operators (--cpu-ops) to see which take the time.")
        else:
            evidence = f"The GPU was busy only {util:.1f}% while {busy}: the host sets the pace."
            fix = ("Take CPU work off the training loop: DataLoader workers for data preparation, "
                   "fewer Python-side operations and .item() calls per step, CUDA graphs or "
                   "torch.compile to cut launch overhead.")
        out.append(insight("host_bound", "medium", f"rank {rank}", "Host-bound: the CPU sets the step time",
                           evidence, fix, process_cores=job, gpu_util_pct=util))
    return out


def _cores(ctx: Context) -> int | None:
    """Cores the job may use: from its CPU samples, else the compute overview's logical cores."""
    cpu = ctx.summary.get("cpu") or {}
    if cpu:
        return min(u["cores"] for u in cpu.values())
    found = [logical for c in ctx.summary.get("compute") or []
             if isinstance(c.get("cpu_cores"), dict) and (logical := c["cpu_cores"].get("logical"))]
    return min(found) if found else None


def dataloader_workers(ctx: Context) -> list[Insight]:
    """The DataLoader runs in the training process (``num_workers=0``) on a machine with ≥
    ``loader_min_cores`` cores, and its ``__next__`` calls take ≥ ``loader_workers_pct`` % of step
    (or profile) time: loading sits on the critical path of every step."""
    load = ctx.loading()
    cores = _cores(ctx)
    if load is None or not load.single_process or cores is None or cores < ctx.th.loader_min_cores:
        return []
    if load.pct < ctx.th.loader_workers_pct:
        return []
    return [insight(
        "dataloader_workers", "medium", "profile", "Too few DataLoader workers for the cores",
        f"The DataLoader runs in the training process (num_workers=0) with {cores} cores available: "
        f"{load.calls} __next__ calls took {load.loading_ns / 1e6:,.1f} ms, {load.pct:.1f}% of "
        f"{load.of} time, in the critical path of every step (threshold {ctx.th.loader_workers_pct:g}%).",
        f"Load in worker processes: DataLoader(num_workers=N, persistent_workers=True, "
        f"prefetch_factor=2+) with N up to {max(cores - 1, 1)} (the cores less one for the training "
        f"loop, shared among the GPUs of the machine).",
        cores=cores, loading_pct=load.pct)]


def record_operators(ctx: Context) -> list[Insight]:
    """No PyTorch operators in the profile: a hint to record them (``--cpu-ops``,
    ``OTEL_PROFILER_ACTIVITIES=gpu,cpu_op``); the operator view and several rules need them."""
    b = ctx.batch
    if not len(b) or bool((b.kind == Kind.CPU_OP).any()):
        return []
    steps = bool((b.kind == Kind.STEP).any())
    why = sorted({str(r.meta["detailed_capture"]) for r in ctx.profile.ranks
                  if r.meta.get("detailed_capture") not in (None, "on")})
    return [insight(
        "record_operators", "low", "profile", "No PyTorch operators were recorded",
        "The profile holds no operators (aten::*)"
        + (f" ({'; '.join(why)})" if why else "")
        + ("; the steps are marked (ProfilerStep#*, among torch's own ranges)" if steps else "")
        + f"; {len(annotation_rows(b))} events of your own annotations. Without "
        "operators the operator view is empty and the DataLoader and synchronization rules cannot "
        "see their calls.",
        "Record operators: otel-profiler run --cpu-ops -- python train.py, or "
        "OTEL_PROFILER_ACTIVITIES=gpu,cpu_op for a zero-code run (with torch.profiler: "
        "activities=[ProfilerActivity.CPU, ...]). It costs more per step: record a window (--steps).",
        steps=steps)]
