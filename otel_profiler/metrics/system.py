"""System samplers: GPU through NVML (nvidia-ml-py), CPU through psutil, on a background daemon thread.

Each tick reads every source once and replaces the latest snapshot (a list of
:class:`~otel_profiler.metrics.points.Point`); exporters read that snapshot, so a scrape never touches
NVML or /proc. One reading that a device does not support (power on some boards, GPM before Hopper,
per-process samples without permission) is switched off for that device after its first failure,
so a tick never retries what cannot work. With no NVML library or no GPU, GPU metrics are absent and
one info line says so.

Definitions:

- ``system.cpu.utilization{cpu.mode}``: psutil ``cpu_times_percent`` since the previous tick / 100.
- ``process.cpu.utilization{cpu.mode}``: (Δ process user/system CPU time) / Δ wall time / CPUs
  available to the process (its affinity), as the semantic conventions define it.
- GPM ratios (Hopper and newer): two GPM samples one tick apart, ``nvmlGpmMetricsGet``, % / 100.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable

from ..profiler_warnings import write_line
from . import points as m
from .points import Point

log = logging.getLogger(__name__)

def note(message: str) -> None:
    """One line for the user on stderr (the NVML info line, endpoint warnings)."""
    try:
        write_line(f"otel-profiler: {message}")
    except Exception:
        log.debug("printing a note on stderr failed", exc_info=True)


# ------------------------------------------------------------------------------------ psutil
def usable_cores(psutil: Any, process: Any) -> int:
    """The cores ``process`` may run on (its affinity), else the machine's."""
    try:
        return len(process.cpu_affinity()) or psutil.cpu_count() or 1
    except Exception:
        log.debug("the process's CPU affinity is unreadable; the machine's core count is used", exc_info=True)
        return psutil.cpu_count() or 1


def process_cpu_share(cpu_seconds: float, wall_s: float, cores: int) -> float:
    """A process's CPU time over ``wall_s`` as a share of its ``cores`` (0 to 1). Its CPU times
    advance by clock ticks, so a short interval can read a little over its cores' wall time: the
    share is capped at 1."""
    return min(max(cpu_seconds, 0.0) / (max(wall_s, 1e-9) * cores), 1.0)


class CpuSampler:
    """System and per-core CPU, this process's CPU and memory, machine memory, network and disk I/O."""

    _MODES = (("user", "user"), ("system", "system"), ("idle", "idle"), ("iowait", "iowait"),
              ("nice", "nice"), ("irq", "interrupt"), ("softirq", "interrupt"), ("steal", "steal"))

    def __init__(self) -> None:
        import psutil

        self.psutil = psutil
        self.process = psutil.Process()
        self.cpus = usable_cores(psutil, self.process)
        # Prime the "since last call" readings.
        psutil.cpu_times_percent(interval=None)
        psutil.cpu_percent(interval=None, percpu=True)
        self._last_proc = self.process.cpu_times()
        self._last_wall = time.monotonic()

    def sample(self) -> list[Point]:
        ps = self.psutil
        out: list[Point] = []
        times = ps.cpu_times_percent(interval=None)
        modes: dict[str, float] = {}
        for field, mode in self._MODES:
            if hasattr(times, field):
                modes[mode] = modes.get(mode, 0.0) + getattr(times, field) / 100.0
        out += [Point(m.SYSTEM_CPU_UTILIZATION, {"cpu.mode": k}, v) for k, v in modes.items()]
        for i, pct in enumerate(ps.cpu_percent(interval=None, percpu=True)):
            out.append(Point(m.CORE_UTILIZATION, {"cpu.logical_number": i}, pct / 100.0))

        now, proc = time.monotonic(), self.process.cpu_times()
        wall = now - self._last_wall
        out.append(Point(m.PROCESS_CPU_UTILIZATION, {"cpu.mode": "user"},
                         process_cpu_share(proc.user - self._last_proc.user, wall, self.cpus)))
        out.append(Point(m.PROCESS_CPU_UTILIZATION, {"cpu.mode": "system"},
                         process_cpu_share(proc.system - self._last_proc.system, wall, self.cpus)))
        self._last_proc, self._last_wall = proc, now
        out.append(Point(m.PROCESS_MEMORY, {}, float(self.process.memory_info().rss)))

        vm = ps.virtual_memory()
        for state in ("used", "free", "cached", "buffers"):
            if hasattr(vm, state):
                out.append(Point(m.SYSTEM_MEMORY, {"system.memory.state": state}, float(getattr(vm, state))))
        out.append(Point(m.SYSTEM_MEMORY_UTILIZATION, {}, vm.percent / 100.0))
        net = ps.net_io_counters()
        if net is not None:
            out.append(Point(m.NETWORK_IO, {"network.io.direction": "receive"}, float(net.bytes_recv)))
            out.append(Point(m.NETWORK_IO, {"network.io.direction": "transmit"}, float(net.bytes_sent)))
        disk = ps.disk_io_counters()
        if disk is not None:
            out.append(Point(m.DISK_IO, {"disk.io.direction": "read"}, float(disk.read_bytes)))
            out.append(Point(m.DISK_IO, {"disk.io.direction": "write"}, float(disk.write_bytes)))
        return out


# -------------------------------------------------------------------------------------- NVML
_GPM_UNITS = (("sm", "NVML_GPM_METRIC_SM_UTIL"), ("sm_occupancy", "NVML_GPM_METRIC_SM_OCCUPANCY"),
              ("tensor", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"), ("dram", "NVML_GPM_METRIC_DRAM_BW_UTIL"))


class _Gpu:
    """One device: its handle, identity labels, and the readings still switched on."""

    def __init__(self, nvml: Any, index: int) -> None:
        self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid, name = nvml.nvmlDeviceGetUUID(self.handle), nvml.nvmlDeviceGetName(self.handle)
        self.labels = {"hw.id": _text(uuid), "hw.name": _text(name), "hw.vendor": "NVIDIA"}
        self.hw = {**self.labels, "hw.type": "gpu"}
        self.off: set[str] = set()
        self.gpm_prev: Any = None
        self.process_ts = 0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlSampler:
    """Every NVML reading of every device. ``open()`` returns None (one info line) without NVML/GPUs."""

    def __init__(self, nvml: Any, gpus: list[_Gpu]) -> None:
        self.nvml = nvml
        self.gpus = gpus

    @classmethod
    def open(cls) -> "NvmlSampler | None":
        try:
            import pynvml as nvml

            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
            if not count:
                raise RuntimeError("NVML reports no GPU")
            return cls(nvml, [_Gpu(nvml, i) for i in range(count)])
        except Exception as exc:  # library missing, no driver, no device
            if _no_nvidia_gpu(exc):  # a machine without an NVIDIA GPU: nothing to say
                log.debug("no GPU metrics: %s: %s", type(exc).__name__, exc)
            else:
                note(f"no GPU metrics: NVML unavailable ({type(exc).__name__}: {exc}); CPU metrics only")
            return None

    def close(self) -> None:
        for gpu in self.gpus:
            if gpu.gpm_prev is not None:
                try:
                    self.nvml.nvmlGpmSampleFree(gpu.gpm_prev)
                except Exception:
                    log.debug("freeing an NVML GPM sample failed", exc_info=True)
                gpu.gpm_prev = None
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            log.debug("NVML shutdown failed", exc_info=True)

    def sample(self) -> list[Point]:
        out: list[Point] = []
        for gpu in self.gpus:
            for name, read in self._readings():
                if name in gpu.off:
                    continue
                try:
                    out += read(gpu)
                except Exception:
                    log.debug("a GPU reading is unsupported on this device; it is not retried", exc_info=True)
                    gpu.off.add(name)  # unsupported on this device: never retried
        return out

    def _readings(self) -> tuple[tuple[str, Callable[[_Gpu], list[Point]]], ...]:
        return (("utilization", self._utilization), ("memory", self._memory), ("power", self._power),
                ("energy", self._energy), ("temperature", self._temperature), ("clocks", self._clocks),
                ("pcie", self._pcie), ("processes", self._processes), ("gpm", self._gpm))

    def _utilization(self, gpu: _Gpu) -> list[Point]:
        u = self.nvml.nvmlDeviceGetUtilizationRates(gpu.handle)
        return [Point(m.GPU_UTILIZATION, {**gpu.labels, "hw.gpu.task": "general"}, u.gpu / 100.0),
                Point(m.GPU_COPY_UTILIZATION, gpu.labels, u.memory / 100.0)]

    def _memory(self, gpu: _Gpu) -> list[Point]:
        mem = self.nvml.nvmlDeviceGetMemoryInfo(gpu.handle)
        return [Point(m.GPU_MEMORY_USAGE, gpu.labels, float(mem.used)),
                Point(m.GPU_MEMORY_LIMIT, gpu.labels, float(mem.total)),
                Point(m.GPU_MEMORY_UTILIZATION, gpu.labels, mem.used / mem.total if mem.total else 0.0)]

    def _power(self, gpu: _Gpu) -> list[Point]:
        return [Point(m.GPU_POWER, gpu.hw, self.nvml.nvmlDeviceGetPowerUsage(gpu.handle) / 1e3)]  # mW

    def _energy(self, gpu: _Gpu) -> list[Point]:
        return [Point(m.GPU_ENERGY, gpu.hw, self.nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle) / 1e3)]

    def _temperature(self, gpu: _Gpu) -> list[Point]:
        t = self.nvml.nvmlDeviceGetTemperature(gpu.handle, self.nvml.NVML_TEMPERATURE_GPU)
        return [Point(m.GPU_TEMPERATURE, gpu.hw, float(t))]

    def _clocks(self, gpu: _Gpu) -> list[Point]:
        nv = self.nvml
        return [Point(m.GPU_CLOCK, {**gpu.labels, "otel_profiler.gpu.clock": clock},
                      nv.nvmlDeviceGetClockInfo(gpu.handle, which) * 1e6)  # MHz
                for clock, which in (("sm", nv.NVML_CLOCK_SM), ("memory", nv.NVML_CLOCK_MEM))]

    def _pcie(self, gpu: _Gpu) -> list[Point]:
        nv = self.nvml
        return [Point(m.GPU_PCIE, {**gpu.labels, "network.io.direction": d},
                      nv.nvmlDeviceGetPcieThroughput(gpu.handle, which) * 1024.0)  # KB/s
                for d, which in (("transmit", nv.NVML_PCIE_UTIL_TX_BYTES),
                                 ("receive", nv.NVML_PCIE_UTIL_RX_BYTES))]

    def _processes(self, gpu: _Gpu) -> list[Point]:
        nv, out = self.nvml, []
        for p in nv.nvmlDeviceGetComputeRunningProcesses(gpu.handle):
            used = getattr(p, "usedGpuMemory", None)
            if isinstance(used, int) and used >= 0:
                out.append(Point(m.GPU_PROCESS_MEMORY, {**gpu.labels, "process.pid": int(p.pid)}, float(used)))
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(gpu.handle, gpu.process_ts)
        except nv.NVMLError_NotFound:  # no sample since the last tick
            samples = []
        latest: dict[int, Any] = {}
        for s in samples:
            latest[int(s.pid)] = s
            gpu.process_ts = max(gpu.process_ts, int(s.timeStamp))
        out += [Point(m.GPU_PROCESS_UTILIZATION, {**gpu.labels, "process.pid": pid}, s.smUtil / 100.0)
                for pid, s in latest.items()]
        return out

    def _gpm(self, gpu: _Gpu) -> list[Point]:
        nv = self.nvml
        if gpu.gpm_prev is None:
            if not nv.nvmlGpmQueryDeviceSupport(gpu.handle).isSupportedDevice:
                raise RuntimeError("GPM not supported")
            gpu.gpm_prev = nv.nvmlGpmSampleGet(gpu.handle, nv.nvmlGpmSampleAlloc())
            return []
        current = nv.nvmlGpmSampleGet(gpu.handle, nv.nvmlGpmSampleAlloc())
        get = nv.c_nvmlGpmMetricsGet_t()
        get.version = nv.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = len(_GPM_UNITS)
        get.sample1, get.sample2 = gpu.gpm_prev, current
        for i, (_, const) in enumerate(_GPM_UNITS):
            get.metrics[i].metricId = getattr(nv, const)
        try:
            nv.nvmlGpmMetricsGet(get)
        finally:
            nv.nvmlGpmSampleFree(gpu.gpm_prev)
            gpu.gpm_prev = current
        return [Point(m.GPU_GPM, {**gpu.labels, "otel_profiler.gpu.unit": unit}, get.metrics[i].value / 100.0)
                for i, (unit, _) in enumerate(_GPM_UNITS) if get.metrics[i].nvmlReturn == 0]


# ----------------------------------------------------------------------------------- the thread
class SystemSampler:
    """Samples every source each ``interval_s`` on a daemon thread; ``points()`` is the latest tick.

    ``cpu_seconds`` counts the thread CPU time the ticks took (the profiler's own overhead).
    """

    def __init__(self, interval_s: float, gpu: bool = True) -> None:
        self.interval_s = interval_s
        self.sources: list[Any] = [CpuSampler()]
        nvml = NvmlSampler.open() if gpu else None
        if nvml is not None:
            self.sources.append(nvml)
        self.cpu_seconds = 0.0
        self.ticks = 0
        self._points: list[Point] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    @property
    def has_gpu(self) -> bool:
        return any(isinstance(s, NvmlSampler) for s in self.sources)

    def start(self) -> None:
        self.tick()
        self._thread = threading.Thread(target=self._run, name="otel-profiler-sampler", daemon=True)
        self._thread.start()

    def tick(self) -> None:
        """One sample of every source (also what the benchmark times)."""
        t0 = time.thread_time()
        points: list[Point] = []
        for source in self.sources:
            try:
                points += source.sample()
            except Exception:
                log.debug("a system metrics source failed to sample", exc_info=True)
        self._points = points
        self.ticks += 1
        self.cpu_seconds += time.thread_time() - t0

    def points(self) -> list[Point]:
        return self._points

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if os.getpid() != self._pid:  # a forked child never samples for its parent
                return
            self.tick()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        for source in self.sources:
            close = getattr(source, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:
                    log.debug("closing a system metrics source failed", exc_info=True)


def _no_nvidia_gpu(exc: BaseException) -> bool:
    """NVML failed because this machine has no NVIDIA driver or GPU (its library is missing, or it
    reports no device), not because a GPU's driver is broken."""
    text = f"{type(exc).__name__}: {exc}"
    return any(word in text for word in ("LibraryNotFound", "Library Not Found", "NVML reports no GPU",
                                         "DriverNotLoaded", "No module named"))
