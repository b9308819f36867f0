"""Dense peak FLOP/s by data type and memory bandwidth of datacenter GPUs, found from a device name.

The figures are the vendors' own (the datasheet or product page named on each row), per device as
PyTorch sees one, without sparsity: NVIDIA prints the tensor-core figures of Ampere and later "with
sparsity", so those are halved here (``/ 2`` in the rows). ``fp64`` is the FP64 tensor-core (NVIDIA)
or matrix (AMD) figure where the part has one; ``fp32`` is NVIDIA's plain FP32 figure and AMD's FP32
matrix figure (AMD's matrix cores run fp32 GEMMs; NVIDIA's run them as ``tf32``). An MI250X holds two
GCDs that PyTorch shows as two devices: its row is one GCD, half the datasheet's module figures.

A data type the part lacks falls back (``tf32``, ``bf16``, ``fp16`` -> ``fp32``; ``fp8`` -> ``fp16``
-> ``fp32``); ``Peak.dtype`` names the figure used. Other types (``int8``, ``other``) have no figure.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Peak", "known_devices", "peak_for"]


@dataclass(frozen=True)
class Peak:
    """A device's peak for one data type."""

    device: str          # the table's name for the part, e.g. "NVIDIA H100 SXM"
    dtype: str
    tflops: float
    tb_per_s: float


@dataclass(frozen=True)
class _Part:
    name: str
    tflops: dict[str, float]
    tb_per_s: float
    # Alternatives, each (tokens all present, tokens none present) in the upper-cased device name.
    match: tuple[tuple[frozenset[str], frozenset[str]], ...]


def _m(*alternatives: str, unless: str = "") -> tuple[tuple[frozenset[str], frozenset[str]], ...]:
    return tuple((frozenset(a.split()), frozenset(unless.split())) for a in alternatives)


def _nv(fp64: float, fp32: float, tf32: float, bf16: float, fp8: float | None = None) -> dict[str, float]:
    figures = {"fp64": fp64, "fp32": fp32, "tf32": tf32, "bf16": bf16, "fp16": bf16}
    return figures if fp8 is None else {**figures, "fp8": fp8}


_A100 = _nv(19.5, 19.5, 312 / 2, 624 / 2)
_H100_SXM = _nv(67, 67, 989 / 2, 1979 / 2, 3958 / 2)
_H100_NVL = _nv(60, 60, 835 / 2, 1671 / 2, 3341 / 2)
_MI300X = {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9}

_PARTS: tuple[_Part, ...] = (
    # NVIDIA Tesla V100 GPU Accelerator datasheet (Volta, 2018): SXM2 7.8 / 15.7 / 125 (tensor, fp16)
    # TFLOPS, PCIe 7 / 14 / 112; HBM2 900 GB/s. DGXS (DGX Station) boards are SXM2 modules.
    _Part("NVIDIA V100 SXM2", {"fp64": 7.8, "fp32": 15.7, "fp16": 125}, 0.9, _m("V100 SXM2", "V100 DGXS")),
    _Part("NVIDIA V100 PCIe", {"fp64": 7, "fp32": 14, "fp16": 112}, 0.9, _m("V100 PCIE")),
    # NVIDIA A100 Tensor Core GPU datasheets (40GB edition, 2020: 1,555 GB/s; 80GB edition r4, 2021:
    # 1,935 GB/s PCIe, 2,039 GB/s SXM): FP64 tensor 19.5, FP32 19.5, TF32 312*, BF16/FP16 624*.
    # PG509-200 is the A100 SXM4 40GB board (the repository's traces: 40 GB, 108 SMs).
    _Part("NVIDIA A100 SXM 40GB", _A100, 1.555, _m("A100 SXM4 40GB", "A100 SXM 40GB", "A100 PG509 200")),
    _Part("NVIDIA A100 SXM 80GB", _A100, 2.039, _m("A100 SXM4 80GB", "A100 SXM 80GB")),
    _Part("NVIDIA A100 PCIe 40GB", _A100, 1.555, _m("A100 PCIE 40GB")),
    _Part("NVIDIA A100 PCIe 80GB", _A100, 1.935, _m("A100 PCIE 80GB")),
    # NVIDIA H100 Tensor Core GPU datasheet: SXM FP64 tensor 67, FP32 67, TF32 989*, BF16/FP16 1,979*,
    # FP8 3,958*, 3.35 TB/s; PCIe 51 / 51 / 756* / 1,513* / 3,026*, 2 TB/s; NVL 60 / 60 / 835* /
    # 1,671* / 3,341*, 3.9 TB/s (* with sparsity).
    _Part("NVIDIA H100 SXM", _H100_SXM, 3.35, _m("H100", unless="PCIE NVL")),
    _Part("NVIDIA H100 PCIe", _nv(51, 51, 756 / 2, 1513 / 2, 3026 / 2), 2.0, _m("H100 PCIE")),
    _Part("NVIDIA H100 NVL", _H100_NVL, 3.9, _m("H100 NVL")),
    # NVIDIA H200 Tensor Core GPU datasheet: SXM as the H100 SXM with 4.8 TB/s; NVL as the H100 NVL
    # with 4.8 TB/s.
    _Part("NVIDIA H200 SXM", _H100_SXM, 4.8, _m("H200", unless="NVL")),
    _Part("NVIDIA H200 NVL", _H100_NVL, 4.8, _m("H200 NVL")),
    # NVIDIA HGX B200 and GB200 NVL72 product pages, "Individual Blackwell GPU Specifications": HGX
    # B200 FP64 37, FP32 75, TF32 2.2 P*, BF16/FP16 4.5 P*, FP8 9 P*, 7.7 TB/s; GB200 (per GPU)
    # FP64 40, FP32 80, TF32 2.5 P*, BF16/FP16 5 P*, FP8 10 P*, 8 TB/s.
    _Part("NVIDIA B200", _nv(37, 75, 2200 / 2, 4500 / 2, 9000 / 2), 7.7, _m("B200")),
    _Part("NVIDIA GB200", _nv(40, 80, 2500 / 2, 5000 / 2, 10000 / 2), 8.0, _m("GB200")),
    # AMD Instinct MI250X datasheet (per module of 2 GCDs: FP64/FP32 matrix 95.7, FP16/BF16 383,
    # 3.2 TB/s): one GCD is half.
    _Part("AMD Instinct MI250X (one GCD)", {"fp64": 95.7 / 2, "fp32": 95.7 / 2, "bf16": 383 / 2,
                                            "fp16": 383 / 2}, 3.2 / 2, _m("MI250X")),
    # AMD Instinct MI300X / MI325X datasheets: FP64 and FP32 matrix 163.4, TF32 653.7, FP16/BF16 1,307.4,
    # FP8 2,614.9 (dense); 5.3 TB/s (MI300X), 6 TB/s (MI325X).
    _Part("AMD Instinct MI300X", _MI300X, 5.3, _m("MI300X")),
    _Part("AMD Instinct MI325X", _MI300X, 6.0, _m("MI325X")),
    # AMD Instinct MI355X product page: FP64 matrix 78.6, FP32 matrix 157.3, FP16/BF16 2,516.6 (2.5 P),
    # FP8 5,033.2 (5 P) dense; no TF32; 8 TB/s.
    _Part("AMD Instinct MI355X", {"fp64": 78.6, "fp32": 157.3, "bf16": 2516.6, "fp16": 2516.6,
                                  "fp8": 5033.2}, 8.0, _m("MI355X")),
)

_FALLBACK = {"tf32": "fp32", "bf16": "fp32", "fp16": "fp32", "fp8": "fp16"}


def _tokens(name: str) -> set[str]:
    for sep in "-_/,()":
        name = name.replace(sep, " ")
    return set(name.upper().split())


def _part(device_name: str) -> _Part | None:
    tokens = _tokens(device_name)
    return next((p for p in _PARTS if any(need <= tokens and not avoid & tokens for need, avoid in p.match)),
                None)


def _figure(part: _Part, dtype: str) -> tuple[str, float] | None:
    seen = dtype
    while seen not in part.tflops:
        if seen not in _FALLBACK:
            return None
        seen = _FALLBACK[seen]
    return seen, part.tflops[seen]


def peak_for(device_name: str, dtype: str, override_tflops: float | None = None,
             override_tb_per_s: float | None = None) -> Peak | None:
    """The peak of ``device_name`` (as Kineto or ``torch.cuda.get_device_name`` give it) for ``dtype``;
    the overrides (positive numbers) replace the table's figures. An unknown device gives a Peak only
    with ``override_tflops`` (named as given, bandwidth the override or 0); no FLOP/s figure: None."""
    tflops = override_tflops if override_tflops is not None and override_tflops > 0 else None
    tb = override_tb_per_s if override_tb_per_s is not None and override_tb_per_s > 0 else None
    part = _part(device_name)
    used = dtype
    if part is not None and tflops is None:
        figure = _figure(part, dtype)
        if figure is None:
            return None
        used, tflops = figure
    if tflops is None:
        return None
    return Peak(part.name if part else device_name, used, float(tflops),
                float(tb if tb is not None else part.tb_per_s if part else 0.0))


def known_devices() -> list[str]:
    """The table's part names."""
    return [p.name for p in _PARTS]
