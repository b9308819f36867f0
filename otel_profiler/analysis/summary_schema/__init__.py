"""The summary document's schema (``"otel-profiler.summary/1"``, built by ``summary.summarize`` and by
the cluster's merge), declared once as ``TypedDict``s: ``Summary`` at the top, one type per section
and per kind of row. The larger sections (operators and modules, memory, FLOPs, communication,
compiled code) are declared in ``sections`` and gathered here in ``AnswerSections``.

All times are in µs, sizes in bytes; every section is present even when empty. Device keys are the
device index for a single-rank profile and ``"<rank>:<device>"`` otherwise. Keys present only
sometimes sit in a ``total=False`` class of their own (the package supports Python 3.10, whose
``typing`` has no ``NotRequired``). At run time these are plain dicts: the JSON written is the dicts'
own key order, as built. The annotations are evaluated as the classes are made (no ``from __future__
import annotations`` here and in ``sections``): as text, each would be compiled into a forward
reference, a third more import time.

Names: ``name`` is what a person reads (C++ symbols demangled, ``otel_profiler.names``); ``raw_name``
the name as the trace recorded it (mangled where it was), ``short_name`` its short form (template
arguments folded).
"""

from typing import Any, TypedDict

from .sections import Communication, Compiled, Flops, Memory, Operators

SCHEMA = "otel-profiler.summary/1"


class Window(TypedDict):
    """``window_us``: the first event's start to the last one's end (absent for a profile without events)."""

    start_ns: int
    end_ns: int
    span_us: float


class DeviceBreakdown(TypedDict):
    """A device's temporal breakdown (``breakdown``): span, busy, idle, compute, non-compute time."""

    ops: int
    span_us: float
    busy_us: float
    idle_us: float
    compute_us: float
    non_compute_us: float
    idle_pct: float
    compute_pct: float
    non_compute_pct: float


class DeviceTimes(DeviceBreakdown):
    """A device's temporal breakdown with the rank and device it is of (``breakdown``)."""

    rank: int
    device: int


class TimeStats(TypedDict):
    """Durations summed up as ``nsys stats`` does (``stats.describe_us``), without their count."""

    total_us: float
    avg_us: float
    med_us: float
    min_us: float
    max_us: float
    std_us: float


class DurationStats(TimeStats):
    """``stats.describe_us``: how many durations, and their ``TimeStats``."""

    count: int


class Percentiles(TypedDict):
    """``stats.percentiles_us`` of a distribution, in µs (zeros when empty)."""

    p50: float
    p90: float
    p99: float
    max: float
    mean: float
    count: int


_KernelClass = TypedDict("_KernelClass", {"class": str})  # ``class`` is a keyword: no class syntax


class KernelRow(TimeStats, _KernelClass):
    """A row of ``kernels.by_name``; ``class`` one of ``breakdown.KERNEL_CLASSES``. ``grid``/``block``
    are the kernel's most frequent launch geometry, ``[x, y, z]`` (None when the trace has none), and
    ``launch_configs`` how many distinct ones it launched with."""

    name: str
    raw_name: str
    short_name: str
    instances: int
    time_pct: float
    grid: list[int] | None
    block: list[int] | None
    launch_configs: int


class Kernels(TypedDict):
    """``kernels``: the kernels by name, biggest total first; ``by_class``: their summed time per class
    (``compute``, ``communication``, ``memory``)."""

    count: int
    total_us: float
    by_class: dict[str, float]
    by_name: list[KernelRow]


class TransferStats(DurationStats):
    """A ``memcpy`` direction (``HtoD``, ``DtoH``, ``DtoD``, ``PtoP``, ``HtoH``, ``unknown``) or ``memset``."""

    bytes: int
    throughput_gbps: float


class ApiRow(TimeStats):
    """A row of ``runtime_api``: one GPU API call (``cuda*`` or ``hip*``, as ``platform`` says)."""

    name: str
    calls: int
    time_pct: float


class SyncApiRow(ApiRow):
    """A call that makes the host wait (``sync.api``): explicit synchronization (``blocking``
    ``"sync"``), a blocking copy such as ``cudaMemcpy`` or ``hipMemcpyWithStream`` (``"copy"``), or a
    stream wait (None: the host does not wait); ``platform.blocking_call``."""

    blocking: str | None


class Sync(DurationStats):
    """``sync``: the GPU's sync events, per kind (``stream``, ``event``, ``context``,
    ``stream_wait_event``, ``unknown``), the host calls that wait, and ``host_blocked_us``, the time of
    those that block the host."""

    by_kind: dict[str, DurationStats]
    api: list[SyncApiRow]
    host_blocked_us: float


class Launch(TypedDict):
    """``launch``: GPU ops linked to their launch call and those without one in the trace; launch
    delay (HTA) and latency (Nsight) of the linked ones; launches per API call name."""

    matched_gpu_ops: int
    orphan_gpu_ops: int
    delay_us: Percentiles
    latency_us: Percentiles
    by_api: dict[str, int]


class StreamIdle(TypedDict):
    """A stream's idle breakdown (``breakdown.idle_breakdown``)."""

    rank: int
    device: int
    stream: int
    ops: int
    span_us: float
    host_wait_us: float
    kernel_wait_us: float
    other_us: float


class StreamRow(StreamIdle):
    """A row of ``streams``: its idle breakdown and its deepest launch queue."""

    max_queue_depth: int


class AnnotationRow(TimeStats):
    """A row of ``annotations`` or ``gpu_annotations`` (the user's own ranges, not torch's)."""

    name: str
    instances: int


class StepItem(TypedDict):
    """One step of ``steps.items`` (``step`` -1 where the trace numbers none)."""

    step: int
    rank: int
    start_ns: int
    duration_us: float


class StepWindow(TypedDict):
    """A detailed window a live run captured (``steps.windows``; reasons in ``windows``)."""

    rank: int
    first_step: int
    last_step: int
    reason: str


class _StepsKeys(TypedDict):
    count: int
    duration_us: Percentiles
    items: list[StepItem]


class Steps(_StepsKeys, total=False):
    """``steps``; of live runs, also (top level only) where the steps came from (``source``: step(),
    step_context, optimizer, backward, time or none: ``ranks_meta[].step_source``), the steps captured
    in detail (``captured``: inclusive ``[first, last]`` ranges) and each window."""

    source: str
    captured: list[list[int]]
    windows: list[StepWindow]


class _TimeSectionKeys(TypedDict):
    events: dict[str, int]  # events per kind (``Kind`` names, lowered)
    devices: dict[str, DeviceBreakdown]
    kernels: Kernels
    memcpy: dict[str, TransferStats]
    memset: TransferStats
    runtime_api: list[ApiRow]
    sync: Sync
    launch: Launch
    streams: list[StreamRow]
    annotations: list[AnnotationRow]
    gpu_annotations: list[AnnotationRow]
    steps: Steps


class WindowKey(TypedDict, total=False):
    """``window_us``, where the profile has events."""

    window_us: Window


class TimeSections(_TimeSectionKeys, WindowKey):
    """The sections on where GPU time goes, of one rank or of all."""


class AnswerSections(TypedDict):
    """The sections beyond time, of one rank or of all (``sections``)."""

    operators: Operators
    memory: Memory
    flops: Flops
    communication: Communication
    compiled: Compiled


class RankSection(TimeSections, AnswerSections):
    """The figures of one rank, or of all of them (``summary.summarize_batch``): what ``ranks`` holds
    per rank, and the figures of ``Summary``."""


class CapturedWindow(TypedDict):
    """A window a live run captured, as its rank's metadata lists it (``windows.captured_windows``)."""

    first_step: int
    last_step: int
    reason: str


class CudaMemory(TypedDict, total=False):
    """A live run's ``torch.cuda`` memory readings: ``steps: [{step, device, peak_allocated_bytes,
    peak_reserved_bytes, allocated_bytes}]``, ``snapshots: [{reason, file, ...}]``
    (``live.samples.cuda_memory``; written by the run, kept as read)."""

    steps: list[dict[str, Any]]  # Any: the run's readings, as its metadata file holds them
    snapshots: list[dict[str, Any]]


class _RankMetaKeys(TypedDict):
    devices: list[str | None]  # each device's name (``deviceProperties``), None where it has none


class RankMeta(_RankMetaKeys, total=False):
    """A row of ``ranks_meta``: what the rank's trace or metadata says of it, where it says it.
    ``step_source`` (live profiles): where the rank's steps came from; ``captured_steps``: the
    inclusive ``[first, last]`` step ranges captured in detail, and ``windows`` each window."""

    source: str
    file: str
    source_file: str
    rank: int
    world_size: int
    host_name: str | None
    versions: dict[str, Any]  # Any: the versions the trace names, as it writes them
    format: str
    skipped_events: int
    step_source: str
    cuda_memory: CudaMemory
    captured_steps: list[list[int]]
    windows: list[CapturedWindow]


class Insight(TypedDict):
    """A finding of an insight rule (``insights``), with the figures it rests on."""

    rule: str
    severity: str  # high, medium or low
    scope: str
    title: str
    evidence: str
    recommendation: str
    metrics: dict[str, Any]  # Any: each rule's own figures (numbers, lists, per-name counts)


class ComputeHost(TypedDict, total=False):
    """A row of ``compute``, one per host (``host.compute``): from the metadata of a live run
    (``source: "live"``: ``os``, ``cpu_model``, ``cpu_cores: {logical, physical}``, ``memory_bytes``,
    ``instance_type: {value, source}``), else from a trace file (``source: "trace"``: host name, device
    properties, CUDA runtime and driver versions)."""

    host: str | None
    ranks: list[int]
    os: str
    cpu_model: str | None
    cpu_cores: dict[str, int | None]
    memory_bytes: int
    gpus: list[dict[str, Any]]  # Any: [{index, name, uuid, memory_bytes}] as the run or trace recorded them
    driver: str | None
    driver_cuda: str | None
    versions: dict[str, str]
    instance_type: dict[str, Any] | None  # Any: {value, source}, as the live run found them
    source: str


class CpuStats(TypedDict):
    """Samples of a CPU share (%): their mean, median and maximum."""

    mean: float
    p50: float
    max: float


class _CpuUsageKeys(TypedDict):
    samples: int
    interval_s: float
    window: str  # "steps" or "run"
    cores: int
    machine_cores: int
    machine_pct: CpuStats
    process_pct: CpuStats
    process_cores: float
    others_cores: float


class CpuUsage(_CpuUsageKeys, total=False):
    """A value of ``cpu`` (key: the rank): a live run's CPU utilization while the steps ran
    (``host.cpu``: ``cores`` the process may use, ``machine_cores`` the machine's; ``job_cores`` the
    job's other processes, ``others_cores`` the rest of the machine). Trace files have none."""

    job_cores: float


class _SummaryKeys(RankSection):
    schema: str  # SCHEMA
    sources: list[str]
    platform: str  # "cuda", "rocm" or "unknown" (``platform.platform_of``)
    ranks_meta: list[RankMeta]
    compute: list[ComputeHost]
    cpu: dict[str, CpuUsage]
    notes: list[str]  # what a reader should know first (no GPU work, orphan GPU ops, skipped events)


class Summary(_SummaryKeys, total=False):
    """The summary document: its sources and ranks, the figures of all ranks (``RankSection``) and,
    for a multi-rank profile, each rank's own under ``ranks`` (key: the rank). ``insights``: added by
    ``document.SummaryDocument``."""

    ranks: dict[str, RankSection]
    insights: list[Insight]
