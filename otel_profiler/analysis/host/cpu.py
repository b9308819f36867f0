"""CPU utilization of a live run's ranks, summed up: the machine's busy share, the training process's
share of the cores it may use, and what that leaves for the other processes on the machine, from the
``cpu_samples`` a live run keeps in each rank's metadata (``live.host_samples``).

Only the samples taken while the rank's steps ran count, when at least two fall there (the import
and start-up of a job are not its training); otherwise all of them. Trace files carry no samples:
their ranks have no entry.
"""

from __future__ import annotations

from cuda_tracer.model.events import Kind
from cuda_tracer.profile import Profile

from ..summary_schema import CpuStats, CpuUsage


def _stats(values: list[float]) -> CpuStats:
    import statistics

    return {"mean": round(statistics.fmean(values), 2), "p50": round(statistics.median(values), 2),
            "max": round(max(values), 2)}


def _step_window_s(profile: Profile, rank: int) -> tuple[float, float] | None:
    """(first step start, last step end) of ``rank`` in unix seconds, or None without steps."""
    b = profile.batch()
    rows = (b.kind == Kind.STEP) & (b.rank == rank)
    if not rows.any():
        return None
    return float(b.start_ns[rows].min()) / 1e9, float(b.end_ns[rows].max()) / 1e9


def cpu_usage(profile: Profile) -> dict[str, CpuUsage]:
    """Per rank (key: the rank as text): ``{samples, interval_s, window: "steps"|"run", cores,
    machine_cores, machine_pct: {mean, p50, max}, process_pct: {...}, process_cores, others_cores}``.

    ``cores``: the cores the process may use (its affinity); ``machine_cores``: the machine's logical
    cores (``cores`` when the run did not record them); ``process_pct``: the process's share of its
    ``cores``; ``process_cores``: its mean CPU in cores (1.0: one core kept busy); ``job_cores``
    (runs that sampled them): the mean CPU of the job's other processes, in cores (its DataLoader
    workers and children, sibling ranks, the launcher); ``others_cores``: the mean CPU the rest of
    the machine used, in cores (processes not of the job; without ``job_cores``, every other
    process, the job's own among them)."""
    out: dict[str, CpuUsage] = {}
    for r in profile.ranks:
        s = r.meta.get("cpu_samples")
        if not isinstance(s, dict) or not s.get("t"):
            continue
        t, machine, process = s["t"], s.get("system_pct") or [], s.get("process_pct") or []
        job = s.get("job_cores")
        cores = int(s.get("cores") or 1)
        machine_cores = int(((r.meta.get("compute") or {}).get("cpu_cores") or {}).get("logical") or cores)
        interval = float(s.get("interval_s") or 1.0)
        keep, window = list(range(min(len(t), len(machine), len(process)))), "run"
        span = _step_window_s(profile, r.rank)
        if span:  # a sample covers the interval before it
            inside = [i for i in keep if span[0] <= t[i] - interval / 2 and t[i] - interval / 2 <= span[1]]
            if len(inside) >= 2:
                keep, window = inside, "steps"
        if not keep:
            continue
        import statistics  # here: most profiles have no samples, and its import took 4 ms

        m, p = [float(machine[i]) for i in keep], [float(process[i]) for i in keep]
        process_cores = statistics.fmean(p) / 100 * cores
        job_cores = statistics.fmean(float(job[i]) for i in keep) if isinstance(job, list) and len(job) >= len(t) else None
        others = max(0.0, statistics.fmean(m) / 100 * machine_cores - process_cores - (job_cores or 0.0))
        out[str(r.rank)] = {"samples": len(keep), "interval_s": interval, "window": window,
                            "cores": cores, "machine_cores": machine_cores,
                            "machine_pct": _stats(m), "process_pct": _stats(p),
                            "process_cores": round(process_cores, 3), "others_cores": round(others, 3)}
        if job_cores is not None:
            out[str(r.rank)]["job_cores"] = round(job_cores, 3)
    return out
