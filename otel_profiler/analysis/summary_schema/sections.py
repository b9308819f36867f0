"""The schema of the summary's larger sections (``summary_schema.AnswerSections``): ``operators`` with
its ``modules``, ``memory``, ``flops``, ``communication`` and ``compiled``, one ``TypedDict`` per section
and per kind of row. Each section's definitions are stated beside the code that builds it, named in
its type's docstring."""

from typing import Any, TypedDict


class TopKernel(TypedDict):
    """One of the kernels an operator, region or module launched most time of."""

    name: str
    raw_name: str
    count: int
    gpu_us: float


class CallStack(TypedDict):
    """A call stack of an operator (frames innermost first) and how many of its calls it holds."""

    stack: list[str]
    calls: int


class KernelTime(TypedDict):
    """Kernels and their GPU time."""

    kernels: int
    gpu_us: float


class _OperatorRowKeys(TypedDict):
    name: str
    calls: int
    total_cpu_us: float
    self_cpu_us: float
    self_gpu_us: float
    total_gpu_us: float
    kernels: int
    gpu_pct: float
    top_kernels: list[TopKernel]


class OperatorRow(_OperatorRowKeys, total=False):
    """A row of ``operators.by_name``: ``self_gpu_us`` the time of the kernels it launched itself,
    ``total_gpu_us`` with its descendants'. ``range``: what a range of torch's own marks (a step, an
    optimizer phase, ...); ``call_stacks``: where the trace recorded Python stacks."""

    range: str
    call_stacks: list[CallStack]


class RegionRow(TypedDict):
    """A row of ``operators.regions``: the kernels of a CUDA graph or compiled region."""

    name: str
    kind: str  # "cuda_graph" or "compiled"
    kernels: int
    gpu_us: float
    top_kernels: list[TopKernel]


class AttributedBy(TypedDict):
    """How the attributed kernels found their operator: the launch call's external id, or the
    operator enclosing the launch call in time."""

    external_id: int
    enclosing_operator: int


class Unattributed(TypedDict):
    """Kernels with no launch call in the trace, and those whose launch names no operator."""

    no_launch: KernelTime
    no_operator: KernelTime


class OperatorTotals(TypedDict):
    """The operator view's totals: operators (events), kernel time and the part attributed."""

    count: int
    kernel_total_us: float
    attributed_us: float
    attributed_by: AttributedBy
    unattributed: Unattributed


class OperatorTable(OperatorTotals):
    """The operator table (``attribution.operators.operators``), rows by GPU time, then CPU time."""

    by_name: list[OperatorRow]
    regions: list[RegionRow]


class ModuleRow(TypedDict):
    """A row of ``modules.by_path``, one per path (``Model_0/Encoder_0/Linear_3``), in tree order."""

    path: str
    name: str
    depth: int
    parent: str | None
    calls: int
    cpu_us: float
    self_gpu_us: float
    total_gpu_us: float
    kernels: int
    top_kernels: list[TopKernel]


class ModuleTypeRow(TypedDict):
    """A row of ``modules.by_type``: the module calls of one class, by self GPU time."""

    type: str
    calls: int
    cpu_us: float
    self_gpu_us: float
    kernels: int


class Modules(TypedDict, total=False):
    """``operators.modules``: the ``nn.Module`` hierarchy (``attribution.modules``); ``{}`` without
    module events, else every key."""

    calls: int
    kernel_total_us: float
    attributed_us: float
    outside: KernelTime
    by_path: list[ModuleRow]
    by_type: list[ModuleTypeRow]


class Operators(OperatorTable):
    """``operators``: each kernel's time given to the innermost operator that launched it; definitions
    in ``attribution.operators``."""

    modules: Modules


class Place(TypedDict):
    """When a memory event happened, in which step and under which operator (None: none found)."""

    time_ns: int
    step: int | None
    operator: str | None


class MemoryPeak(Place):
    """The largest allocated total (reserved then: None where the trace records no totals)."""

    allocated_bytes: int
    reserved_bytes: int | None


class Allocation(Place):
    """One of a device's largest allocations."""

    bytes: int


class MemoryStep(TypedDict):
    """A step's memory: its peak, what was allocated at its end and the growth since the step before."""

    step: int
    peak_allocated_bytes: int | None
    end_allocated_bytes: int | None
    growth_bytes: int | None


class DeviceMemory(TypedDict):
    """A device's memory figures (``memory.allocator``); ``baseline``: ``"absolute"``, or
    ``"window_start"`` for traces without totals (reserved bytes then None)."""

    baseline: str
    events: int
    allocations: int
    frees: int
    peak: MemoryPeak
    peak_reserved_bytes: int | None
    final_allocated_bytes: int
    steps: list[MemoryStep]
    largest_allocations: list[Allocation]


class SnapshotBlock(TypedDict):
    """One of a snapshot's largest allocated blocks and its innermost Python frame."""

    bytes: int
    device: Any  # Any: as the snapshot file gives it (not checked; torch writes the device index)
    frame: str | None


class SnapshotFigures(TypedDict, total=False):
    """What a CUDA memory snapshot holds (``memory.snapshots``); every key, for a file that was read."""

    segments: int
    reserved_bytes: int
    allocated_bytes: int
    active_bytes: int
    devices: list[int]
    history_events: int
    largest_blocks: list[SnapshotBlock]


class _SnapshotFile(TypedDict):
    file: str
    bytes: int
    rank: int | None
    reason: str | None


class Snapshot(_SnapshotFile, SnapshotFigures, total=False):
    """A CUDA memory snapshot found in a profile folder, summed up; ``error`` instead of its figures
    when it could not be read."""

    error: str


class _MemoryKeys(TypedDict):
    events: int
    devices: dict[str, DeviceMemory]


class Memory(_MemoryKeys, total=False):
    """``memory``: GPU memory from the allocator's ``[memory]`` events (empty without
    ``profile_memory``; definitions in ``memory.allocator``); ``host``: the CPU allocator's (key
    ``cpu``), when recorded; ``snapshots`` (top level): CUDA memory snapshots of a profile folder."""

    host: dict[str, DeviceMemory]
    snapshots: list[Snapshot]


class FlopsTotals(TypedDict):
    """FLOPs, bytes moved and GPU time."""

    flops: float
    bytes: float
    gpu_us: float


class FlopsRates(TypedDict):
    """Achieved rates (None without GPU time)."""

    tflops_per_s: float | None
    tb_per_s: float | None


class FlopsClass(FlopsTotals, FlopsRates):
    """A row of ``flops.by_class`` (``gemm``, ``conv``, ``attention``, ``elementwise``, ``other``)."""


_OpClass = TypedDict("_OpClass", {"class": str})  # ``class`` is a keyword: no class syntax


class FlopsOperatorFigures(FlopsTotals, _OpClass):
    """An operator name and input shapes with its summed cost."""

    name: str
    shapes: str
    dtype: str
    calls: int


class FlopsOperatorRow(FlopsOperatorFigures, FlopsRates):
    """A row of ``flops.by_operator``; ``bound``: ``"compute"``, ``"memory"`` or None (no peak)."""

    intensity: float | None
    bound: str | None


class FlopsStepFigures(TypedDict):
    """A step's FLOPs."""

    step: int
    rank: int
    duration_us: float
    flops: float


class FlopsStep(FlopsStepFigures):
    """A row of ``flops.by_step``."""

    mfu: float | None


class FlopsPeak(TypedDict):
    """The device's peak used for MFU and the bounds."""

    device: str
    dtype: str
    tflops: float
    tb_per_s: float


class _FlopsParts(TypedDict):
    operators: int
    dtypes: dict[str, float]  # FLOPs per data type
    gpus: dict[str, int]  # per rank: the devices that ran kernels
    window_ns: list[int] | None  # [first start, last end]


class FlopsFigures(_FlopsParts):
    """The figures of ``flops`` that add up across ranks (``flops.costs.flops_figures``)."""

    by_class: dict[str, FlopsTotals]
    by_operator: list[FlopsOperatorFigures]
    by_step: list[FlopsStepFigures]


class Flops(_FlopsParts):
    """``flops``, from input shapes (``record_shapes``): definitions in ``flops.costs``; ``mfu`` 0-1."""

    flops: float
    bytes: float
    gpu_us: float
    by_class: dict[str, FlopsClass]
    by_operator: list[FlopsOperatorRow]
    peak: FlopsPeak | None
    mfu: float | None
    by_step: list[FlopsStep]


class Overlap(TypedDict):
    """Communication time, the part no computation hid, and the share hidden (None without any)."""

    total_us: float
    exposed_us: float
    overlap_pct: float | None


class _RankKey(TypedDict, total=False):
    rank: int | str  # multi-rank profiles: the rank (a key that is no number stays text)


class CollectiveRow(Overlap, _RankKey):
    """A row of ``communication.by_collective``: a collective type on one device and stream."""

    collective: str
    device: int
    stream: int
    kernels: int


class CommunicationStep(Overlap, _RankKey):
    """A row of ``communication.by_step``."""

    step: int
    step_us: float
    exposed_pct_of_step: float | None


class CommunicationRank(Overlap):
    """A row of ``communication.by_rank``."""

    rank: int | str


class _CommunicationKeys(Overlap):
    kernels: int
    by_collective: list[CollectiveRow]
    by_step: list[CommunicationStep]


class Communication(_CommunicationKeys, total=False):
    """``communication``: communication kernels hidden behind computation kernels (HTA's overlap;
    definitions in ``communication``); ``by_rank`` for multi-rank profiles."""

    by_rank: list[CommunicationRank]


class CompiledKernel(TypedDict):
    """A GPU kernel of a compiled region; ``fused_ops``: the ATen ops its Inductor name holds."""

    name: str
    raw_name: str
    triton: bool
    fused_ops: list[str]
    fused_ops_sure: bool
    kind: str
    calls: int
    gpu_us: float


class CompiledCpuKernel(TypedDict):
    """A range named as an Inductor kernel (a C++ kernel, a Triton launch), with its CPU time."""

    name: str
    triton: bool
    fused_ops: list[str]
    fused_ops_sure: bool
    kind: str
    calls: int
    cpu_us: float


class CompiledGraph(TypedDict):
    """An Inductor graph (``CompiledFxGraph``) and the time of what it calls."""

    name: str
    calls: int
    cpu_us: float
    extern_cpu_us: float
    kernel_cpu_us: float


_Pass = TypedDict("_Pass", {"pass": str})  # ``pass`` is a keyword: no class syntax


class CompiledRegion(_Pass):
    """A row of ``compiled.regions``; ``pass``: ``"forward"`` or ``"backward"``."""

    name: str
    calls: int
    cpu_us: float
    self_cpu_us: float
    gpu_us: float
    kernels: list[CompiledKernel]
    cpu_kernels: list[CompiledCpuKernel]
    graphs: list[CompiledGraph]


class CpuCount(TypedDict):
    """How many ranges, and their CPU time."""

    count: int
    cpu_us: float


class Compiles(CpuCount):
    """The compiles inside the window, with the compile ids they name."""

    ids: list[str]


class Recompilations(TypedDict):
    """The compile ids ``F/C`` with ``C > 0`` the trace names."""

    count: int
    ids: list[str]


class _DynamoKeys(TypedDict):
    cache_lookups: CpuCount
    compiles: Compiles
    recompilations: Recompilations


class Dynamo(_DynamoKeys, total=False):
    """``compiled.dynamo``: guards, compiles, recompilations; ``python_us_in_regions`` with
    ``python_function`` events."""

    python_us_in_regions: float


class Compiled(TypedDict):
    """``compiled``: where ``torch.compile``'s code goes; definitions in ``attribution.compiled``."""

    regions: list[CompiledRegion]
    triton_gpu_us: float
    extern_gpu_us: float
    outside_gpu_us: float
    dynamo: Dynamo
