"""One GPU capture per process (CUPTI allows one subscriber per process), writing results for the checks.

    python tests/gpu/capture.py MODE --out DIR

MODE is one of ``kineto``, ``cupti``, ``overhead-kineto``, ``overhead-cupti``, ``nvml``; run by
``run_gpu_checks.sh``, which bounds each with ``timeout``. Each mode
merges a summary under its name into ``DIR/results.json``; the capture modes also save their event
batches (``DIR/<results key>_capture.batch.zip``, EventBatch.save format) for use as CPU fixtures in
tests/data/. ``kineto`` runs torch.profiler twice: once exported to a Chrome trace that
cuda_tracer.trace_json.files reads (raw trace kept as ``DIR/kineto_trace.json.gz``), once through the
live ``cuda_tracer.capture.kineto.KinetoSource`` (``kineto_live``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(Path(__file__).resolve().parent)]

import workload  # noqa: E402  (tests/gpu/workload.py)

TRAIN_STEPS = 5  # steps inside the saved captures: keeps each batch file at a few MB at most


# ---------------------------------------------------------------------------- results file
def merge_result(out: Path, key: str, value: Any) -> None:
    """Sets ``key`` in ``out/results.json`` (modes run one after another, never concurrently)."""
    path = out / "results.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = value
    path.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))


def summarize(batch: Any) -> dict[str, Any]:
    """What the checks look at in a captured batch: kinds, copies, memsets, syncs, launch linkage."""
    import numpy as np

    from cuda_tracer.model.correlate import correlate
    from cuda_tracer.model.events import Kind, SyncKind

    def names_of(kind: Kind) -> dict[str, int]:
        rows = np.flatnonzero(batch.kind == kind)
        out: dict[str, int] = {}
        for name in batch.names(rows):
            out[name] = out.get(name, 0) + 1
        return out

    corr = correlate(batch)
    kernels = batch.kind[corr.gpu_rows] == Kind.KERNEL
    matched = corr.matched[kernels]
    latency = corr.latency_ns[corr.matched]
    memsets = np.flatnonzero(batch.kind == Kind.MEMSET)
    copies = np.flatnonzero(batch.kind == Kind.MEMCPY)
    kernel_rows = np.flatnonzero(batch.kind == Kind.KERNEL)
    syncs = np.flatnonzero(batch.kind == Kind.SYNC)
    gpu = np.isin(batch.kind, np.asarray([Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET], np.uint8))
    return {
        "gpu_first_start_ns": int(batch.start_ns[gpu].min()) if gpu.any() else None,
        "gpu_last_end_ns": int(batch.end_ns[gpu].max()) if gpu.any() else None,
        "events": len(batch),
        "counts": batch.counts_by_kind(),
        "memcpy_names": names_of(Kind.MEMCPY),
        "memset_names": names_of(Kind.MEMSET),
        "memset_bytes": sorted({int(b) for b in batch.bytes[memsets]}),
        "memcpy_bytes": sorted({int(b) for b in batch.bytes[copies]})[:50],
        # Kineto's metadata (grid, registers) reached the batch: the live source's weak point
        "kernels_with_grid_fraction": (float((batch.grid_x[kernel_rows] > 0).mean())
                                       if len(kernel_rows) else 0.0),
        "sync_kinds": sorted({SyncKind(int(s)).name for s in batch.subkind[syncs]}),
        "annotations": sorted(set(batch.names(np.flatnonzero(batch.kind == Kind.USER_ANNOTATION))))[:50],
        "kernels": int(kernels.sum()),
        "kernels_with_launch": int(matched.sum()),
        "kernel_launch_linked_fraction": float(matched.mean()) if len(matched) else 0.0,
        "median_launch_latency_ns": int(np.median(latency)) if len(latency) else None,
        "gpu_orphans": corr.orphan_count,
    }


def captured_work(trainer: Any, annotate: bool) -> dict[str, Any]:
    """The profiled work; its wall-clock window lets the checks test the clock calibration."""
    import torch

    wall_start_ns = time.time_ns()
    info = workload.transfers_and_syncs()
    info["losses"] = [trainer.step(annotate=annotate, index=i) for i in range(TRAIN_STEPS)]
    torch.cuda.synchronize()
    info.update(wall_start_ns=wall_start_ns, wall_end_ns=time.time_ns())
    return info


# ---------------------------------------------------------------------------- modes
def mode_kineto(out: Path) -> None:
    """torch.profiler (Kineto) with CPU + CUDA activities → Chrome trace → cuda_tracer.trace_json.files."""
    import torch

    from cuda_tracer.trace_json.files import read_trace

    trainer = workload.Trainer()
    trainer.timed_steps(3)  # warm-up: cuBLAS handles, allocator
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    try:  # cuda_sync events are opt-in in torch.profiler
        config = torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True)
    except Exception:
        config = None
    with torch.profiler.profile(activities=acts, experimental_config=config) as prof:
        info = captured_work(trainer, annotate=False)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as src, gzip.open(out / "kineto_trace.json.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
    rank_profile = read_trace(str(out / "kineto_trace.json.gz"))
    rank_profile.batch.save(out / "kineto_capture.batch.zip")
    summary = summarize(rank_profile.batch)
    summary.update(workload=info, versions=rank_profile.meta.get("versions"),
                   live_module_present=(REPO / "cuda_tracer" / "capture" / "kineto.py").exists())
    merge_result(out, "kineto", summary)
    try:
        live_kineto(out, trainer)
    except Exception as exc:  # a failure of the live source must not hide the file-path results
        merge_result(out, "kineto_live_error", f"{type(exc).__name__}: {exc}")


def live_kineto(out: Path, trainer: Any) -> None:
    """The project's live Kineto source (cuda_tracer.capture.kineto.KinetoSource), read without JSON."""
    try:
        from cuda_tracer.capture.kineto import GPU_ACTIVITIES, KinetoSource
    except ImportError as exc:
        merge_result(out, "kineto_live", {"available": False, "reason": f"no live source: {exc}"})
        return
    source = KinetoSource(GPU_ACTIVITIES)
    with warnings.catch_warnings(record=True) as seen:  # a window must add no warning to the job's
        warnings.simplefilter("always")
        source.start()
        info = captured_work(trainer, annotate=False)
        batch = source.stop().to_batch()
    batch.save(out / "kineto_live_capture.batch.zip")
    summary = summarize(batch)
    ours = ("profiler", "cuda_tracer", "otel_profiler")  # torch's profiler modules and this project's
    summary.update(workload=info, warnings=[f"{w.category.__name__}: {w.message}" for w in seen
                                            if any(part in w.filename for part in ours)])
    merge_result(out, "kineto_live", summary)


def mode_cupti(out: Path) -> None:
    """CuptiSource (cupti-python) around the same work, NVTX ranges on each training step.

    Run once plainly (results under ``cupti``) and once with ``NVTX_INJECTION64_PATH`` pointing at
    libcupti (results under ``cupti_nvtx``), so a failure of NVTX injection cannot hide the rest.
    """
    import torch

    from cuda_tracer.capture.cupti import CuptiSource, load_cupti
    from cuda_tracer.capture.cupti_records import enum_mismatches

    key = "cupti_nvtx" if os.environ.get("NVTX_INJECTION64_PATH") else "cupti"
    module, reason = load_cupti()
    if module is None:
        merge_result(out, key, {"available": False, "reason": reason})
        return
    trainer = workload.Trainer()
    trainer.timed_steps(3)
    src = CuptiSource()
    snapshots: list[tuple] = []
    queue_records = src._buffer_completed

    def snapshot_then_queue(activities: list) -> None:
        # Diagnostic only: remember a few records' fields as read inside the callback, to compare
        # with the same objects read after the callback returned (views whose buffer must stay alive).
        for r in activities[:5]:
            snapshots.append((r, int(r.kind), int(getattr(r, "start", getattr(r, "timestamp", 0)))))
        queue_records(activities)

    src._buffer_completed = snapshot_then_queue
    started = src.start()
    info = captured_work(trainer, annotate=True) if started else {}
    batch = src.stop()
    survived = all(int(r.kind) == k and int(getattr(r, "start", getattr(r, "timestamp", 0))) == t
                   for r, k, t in snapshots)
    batch.save(out / f"{key}_capture.batch.zip")
    summary = summarize(batch)
    summary.update(available=True, started=started, stats=src.stats(), workload=info,
                   enum_mismatches=enum_mismatches(module),
                   records_survive_callback=survived, snapshot_records=len(snapshots),
                   object_names={" ".join(map(str, k)): v
                                 for k, v in (src._converter.object_names.items()
                                              if src._converter else [])},
                   torch_cuda=torch.version.cuda)
    merge_result(out, key, summary)


def overhead(out: Path, key: str, profiled_block: Callable[[Any, int], list[float]],
             blocks: int = 4, steps: int = 25) -> None:
    """Median step time profiled / unprofiled, blocks interleaved so drift hits both alike."""
    trainer = workload.Trainer()
    trainer.timed_steps(20)
    plain: list[float] = []
    profiled: list[float] = []
    for _ in range(blocks):
        plain += trainer.timed_steps(steps)
        profiled += profiled_block(trainer, steps)
    ratio = statistics.median(profiled) / statistics.median(plain)
    merge_result(out, key, {"median_step_ms_unprofiled": statistics.median(plain) * 1e3,
                            "median_step_ms_profiled": statistics.median(profiled) * 1e3,
                            "ratio": ratio, "steps_each": len(plain), "blocks": blocks})


def mode_overhead_kineto(out: Path) -> None:
    import torch

    def block(trainer: Any, steps: int) -> list[float]:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
            return trainer.timed_steps(steps)

    overhead(out, "overhead_kineto", block)


def mode_overhead_cupti(out: Path) -> None:
    from cuda_tracer.capture.cupti import CuptiSource, load_cupti

    if load_cupti()[0] is None:
        merge_result(out, "overhead_cupti", {"available": False, "reason": load_cupti()[1]})
        return
    src = CuptiSource()

    def block(trainer: Any, steps: int) -> list[float]:
        if not src.start():
            raise RuntimeError(src.reason)
        times = trainer.timed_steps(steps)
        src.stop()  # conversion happens here, outside the timed steps
        return times

    overhead(out, "overhead_cupti", block)


def mode_nvml(out: Path) -> None:
    """pynvml (nvidia-ml-py) reads device 0 while the training loop runs."""
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        trainer = workload.Trainer()
        samples = []
        t_end = time.time() + 2.0
        while time.time() < t_end:
            trainer.timed_steps(10)
            util = pynvml.nvmlDeviceGetUtilizationRates(handle)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            samples.append({"gpu_util_pct": util.gpu, "mem_util_pct": util.memory,
                            "mem_used_bytes": mem.used,
                            "power_mw": _maybe(pynvml.nvmlDeviceGetPowerUsage, handle)})
        name = pynvml.nvmlDeviceGetName(handle)
        merge_result(out, "nvml", {
            "device_count": pynvml.nvmlDeviceGetCount(),
            "name": name.decode() if isinstance(name, bytes) else name,
            "uuid": _maybe(pynvml.nvmlDeviceGetUUID, handle),
            "driver": _maybe(pynvml.nvmlSystemGetDriverVersion),
            "memory_total_bytes": pynvml.nvmlDeviceGetMemoryInfo(handle).total,
            "max_gpu_util_pct": max(s["gpu_util_pct"] for s in samples),
            "samples": samples[:20],
        })
    finally:
        pynvml.nvmlShutdown()


def _maybe(fn: Callable, *args: Any) -> Any:
    try:
        value = fn(*args)
        return value.decode() if isinstance(value, bytes) else value
    except Exception as exc:
        return f"error: {exc}"


MODES = {"kineto": mode_kineto, "cupti": mode_cupti, "overhead-kineto": mode_overhead_kineto,
         "overhead-cupti": mode_overhead_cupti, "nvml": mode_nvml}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    try:
        MODES[args.mode](args.out)
    except Exception as exc:
        key = args.mode.replace("-", "_")
        if args.mode == "cupti" and os.environ.get("NVTX_INJECTION64_PATH"):
            key = "cupti_nvtx"
        merge_result(args.out, key + "_error", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        print(f"capture {args.mode}: {time.time() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
