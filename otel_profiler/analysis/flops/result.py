"""The ``flops`` section made of its figures (``costs.flops_figures``): achieved rates, arithmetic
intensity, the bound of each operator, the peak and MFU; and the figures of several ranks added up
(``merge_figures``), so that the cluster's merged summary equals the one of all the ranks at once.
Definitions in ``costs``."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .peaks import Peak, peak_for

if TYPE_CHECKING:  # (the summary's types: a span export need not import them, 10 ms)
    from ..summary_schema.sections import (Flops, FlopsClass, FlopsFigures, FlopsOperatorFigures, FlopsOperatorRow,
                                    FlopsRates, FlopsStep, FlopsStepFigures, FlopsTotals)

TOP_OPERATORS = 50


@dataclass(frozen=True)
class PeakOverride:
    """Peak figures given by the user (``OTEL_PROFILER_PEAK_TFLOPS`` / ``..._TB_PER_S``)."""

    tflops: float | None = None
    tb_per_s: float | None = None


PEAK_VARIABLES = ("OTEL_PROFILER_PEAK_TFLOPS", "OTEL_PROFILER_PEAK_TB_PER_S")


def peak_override() -> PeakOverride:
    """The peak figures of the settings (0: none given). The settings are read only where one of
    their two variables is set: reading them all (and importing their definitions) took 16 ms, a
    tenth of a summary of 216k events."""
    if not any(name in os.environ for name in PEAK_VARIABLES):
        return PeakOverride()
    from ...config import load

    settings = load()
    return PeakOverride(settings.peak_tflops or None, settings.peak_tb_per_s or None)


def meta_device_names(metas: Iterable[Mapping[str, Any]]) -> list[str]:
    """The GPU names the ranks' metadata give (``device_properties``), first seen first."""
    names = [d.get("name") for meta in metas for d in meta.get("device_properties") or [] if isinstance(d, dict)]
    return list(dict.fromkeys(n for n in names if isinstance(n, str) and n))


def main_dtype(flops_by_dtype: Mapping[str, float]) -> str:
    """The data type that did the most FLOPs (``fp32`` when none did): the one whose peak counts."""
    return max(sorted(flops_by_dtype), key=flops_by_dtype.__getitem__) if flops_by_dtype else "fp32"


def peak_of(names: list[str], flops_by_dtype: Mapping[str, float], override: PeakOverride | None = None) -> Peak | None:
    """The peak of the first device named, for the data type that did the most FLOPs."""
    return _peak(next((d for d in names if d), ""), main_dtype(flops_by_dtype), override or peak_override())


def mfu(flops: float, seconds: float, gpus: int, peak: Peak | None) -> float | None:
    """FLOPs done in ``seconds`` on ``gpus`` devices over what they could do at ``peak``."""
    device_s = seconds * gpus
    return flops / (device_s * peak.tflops * 1e12) if peak is not None and device_s > 0 else None


def _rates(flops: float, nbytes: float, gpu_us: float) -> FlopsRates:
    seconds = gpu_us / 1e6
    return {"tflops_per_s": flops / seconds / 1e12 if seconds > 0 else None,
            "tb_per_s": nbytes / seconds / 1e12 if seconds > 0 else None}


def _peak(device: str, dtype: str, override: PeakOverride) -> Peak | None:
    if not device and override.tflops is None:
        return None
    return peak_for(device or "given by the user", dtype, override.tflops, override.tb_per_s)


def _operator_row(g: FlopsOperatorFigures, ridge: float | None) -> FlopsOperatorRow:
    """An operator's figures with its rates, arithmetic intensity and bound (``ridge``: the device's
    ridge point, None without a peak)."""
    intensity = g["flops"] / g["bytes"] if g["bytes"] else None
    return {**g, **_rates(g["flops"], g["bytes"], g["gpu_us"]), "intensity": intensity,
            "bound": None if ridge is None or intensity is None else "compute" if intensity >= ridge else "memory"}


def flops_result(figures: FlopsFigures, device_names: list[str], override: PeakOverride | None = None,
                 every_row: bool = False) -> Flops:
    """The section: ``figures`` with rates, bounds, the peak of the first device named and the data
    type that did the most FLOPs, and MFU (overall and per step)."""
    dtypes = figures["dtypes"]
    peak = peak_of(device_names, dtypes, override)
    ridge = peak.tflops / peak.tb_per_s if peak and peak.tb_per_s else None
    by_class: dict[str, FlopsClass] = {name: {**c, **_rates(c["flops"], c["bytes"], c["gpu_us"])}
                                       for name, c in figures["by_class"].items()}
    rows = [_operator_row(g, ridge) for g in
            sorted(figures["by_operator"], key=lambda g: (-g["gpu_us"], -g["flops"], g["name"], g["shapes"]))]
    gpus = {int(rank): n for rank, n in figures["gpus"].items()}
    steps: list[FlopsStep] = [{**s, "mfu": mfu(s["flops"], s["duration_us"] / 1e6, gpus.get(s["rank"], 0), peak)}
                              for s in figures["by_step"]]
    total = sum(c["flops"] for c in by_class.values())
    return {"operators": figures["operators"], "flops": total,
            "bytes": sum(c["bytes"] for c in by_class.values()),
            "gpu_us": sum(c["gpu_us"] for c in by_class.values()),
            "by_class": by_class, "by_operator": rows if every_row else rows[:TOP_OPERATORS],
            "dtypes": dtypes,
            "peak": None if peak is None else {"device": peak.device, "dtype": peak.dtype,
                                               "tflops": peak.tflops, "tb_per_s": peak.tb_per_s},
            "mfu": _mfu(figures, steps, peak, gpus) if peak is not None and total else None,
            "by_step": steps, "gpus": figures["gpus"], "window_ns": figures["window_ns"]}


def _mfu(figures: FlopsFigures, steps: list[FlopsStep], peak: Peak, gpus: dict[int, int]) -> float | None:
    """FLOPs over the time each rank's devices had, at their peak: inside the steps when there are
    any, else over the window."""
    if steps:
        flops = sum(s["flops"] for s in steps)
        device_s = sum(s["duration_us"] / 1e6 * gpus.get(s["rank"], 0) for s in steps)
    else:
        flops = sum(c["flops"] for c in figures["by_class"].values())
        window = figures["window_ns"]
        device_s = (window[1] - window[0]) / 1e9 * sum(gpus.values()) if window else 0.0
    return flops / (device_s * peak.tflops * 1e12) if device_s > 0 else None


def _add_totals(into: FlopsTotals, part: FlopsTotals) -> None:
    into["flops"] += part["flops"]
    into["bytes"] += part["bytes"]
    into["gpu_us"] += part["gpu_us"]


def merge_figures(parts: list[Flops]) -> FlopsFigures:
    """The figures of several ranks (each a ``flops`` section) as one."""
    by_class: dict[str, FlopsTotals] = {}
    groups: dict[tuple[str, str], FlopsOperatorFigures] = {}
    dtypes: dict[str, float] = {}
    steps: list[FlopsStepFigures] = []
    gpus: dict[str, int] = {}
    windows = [window for p in parts if (window := p["window_ns"])]
    for p in parts:
        for name, c in p["by_class"].items():
            _add_totals(by_class.setdefault(name, {"flops": 0.0, "bytes": 0.0, "gpu_us": 0.0}), c)
        for g in p["by_operator"]:
            m = groups.setdefault((g["name"], g["shapes"]), {
                "name": g["name"], "shapes": g["shapes"], "dtype": g["dtype"], "class": g["class"],
                "calls": 0, "flops": 0.0, "bytes": 0.0, "gpu_us": 0.0})
            m["calls"] += g["calls"]
            _add_totals(m, g)
        for dtype, flops in p["dtypes"].items():
            dtypes[dtype] = dtypes.get(dtype, 0.0) + flops
        steps.extend({"step": s["step"], "rank": s["rank"], "duration_us": s["duration_us"], "flops": s["flops"]}
                     for s in p["by_step"])
        for rank, n in p["gpus"].items():
            gpus[rank] = gpus.get(rank, 0) + n
    steps.sort(key=lambda s: (s["rank"], s["step"]))
    return {"operators": sum(p["operators"] for p in parts), "by_class": by_class,
            "by_operator": list(groups.values()), "dtypes": dtypes, "by_step": steps, "gpus": gpus,
            "window_ns": [min(w[0] for w in windows), max(w[1] for w in windows)] if windows else None}
