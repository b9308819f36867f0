"""The compute resources of a profile, one entry per host: from the ``compute`` metadata a live run
records (``live.compute``), else what a trace file says (host name, device properties, CUDA runtime
and driver versions). And each rank's CPU utilization over time, from the ``cpu_samples`` of a live
run (``live.host_samples``)."""

from __future__ import annotations

from typing import Any, cast

from cuda_tracer.profile import Profile

from ..summary_schema import ComputeHost


def _cuda_version(v: Any) -> str | None:
    """Kineto's integer CUDA versions (12040) as text (12.4)."""
    if isinstance(v, int) and v > 1000:
        return f"{v // 1000}.{(v % 1000) // 10}"
    return None if v is None else str(v)


def _from_trace(meta: dict[str, Any]) -> ComputeHost:
    versions = meta.get("versions") or {}
    gpus = [{"index": p.get("id"), "name": p.get("name"), "uuid": None,
             "memory_bytes": p.get("totalGlobalMem")}
            for p in meta.get("device_properties") or [] if isinstance(p, dict)]
    out_versions = {k: str(v) for k, v in versions.items() if k in ("torch", "python", "tensorflow")}
    cuda = _cuda_version(versions.get("cuda_runtime"))
    if cuda:
        out_versions["cuda"] = cuda
    return {"host": meta.get("host_name"), "gpus": gpus, "driver": None,
            "driver_cuda": _cuda_version(versions.get("cuda_driver")), "versions": out_versions,
            "source": "trace"}


def compute_overview(profile: Profile) -> list[ComputeHost]:
    """``[{host, ranks, os?, cpu_model?, cpu_cores?, memory_bytes?, gpus: [{index, name, uuid,
    memory_bytes}], driver, versions, instance_type?, source: "live"|"trace"}]``, one per host."""
    by_host: dict[str, ComputeHost] = {}
    for r in profile.ranks:
        live = r.meta.get("compute")
        # a live run's record is kept as the run wrote it (``live.samples.compute``; not checked here)
        entry = cast(ComputeHost, dict(live, source="live")) if isinstance(live, dict) and live else \
            _from_trace(r.meta)
        key = entry.get("host") or f"rank {r.rank}"
        if key in by_host:
            by_host[key]["ranks"].append(r.rank)
        else:
            by_host[key] = {**entry, "ranks": [r.rank]}
    return list(by_host.values())


def cpu_timelines(profile: Profile) -> dict[str, dict[str, Any]]:
    """Per rank: ``{t_s (from the first sample), system_pct, process_pct, cores, interval_s}``."""
    out = {}
    for r in profile.ranks:
        s = r.meta.get("cpu_samples")
        if isinstance(s, dict) and s.get("t"):
            t0 = s["t"][0]
            out[str(r.rank)] = {"t_s": [round(t - t0, 3) for t in s["t"]], "system_pct": s["system_pct"],
                                "process_pct": s["process_pct"], "cores": s.get("cores"),
                                "interval_s": s.get("interval_s")}
    return out
