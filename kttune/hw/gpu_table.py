"""Datasheet figures of the GPUs KTransformers users run, for deriving profiles of machines that
were not measured (`kttune.hw.derive`). Dense tensor rates (no sparsity) with FP32 accumulate;
sources in docs/derive.md. Pure data."""

from __future__ import annotations

from dataclasses import dataclass

from kttune.errors import UserError
from kttune.units import GB


@dataclass(frozen=True)
class GpuSpec:
    key: str
    name: str  # as NVML reports it
    vram_bytes: int
    hbm_gbps: float  # memory bandwidth, GB/s
    bf16_tflops: float  # dense tensor BF16, FP32 accumulate
    fp8_tflops: float | None  # dense tensor FP8 (None: no FP8 tensor cores; FP8 runs at the BF16 rate)
    pcie_gen: int
    pcie_width: int
    nvlink_gbps: float = 0.0  # per direction, per GPU; 0: none
    source: str = ""

    @property
    def fp8_or_bf16_tflops(self) -> float:
        return self.fp8_tflops or self.bf16_tflops


GPUS: dict[str, GpuSpec] = {g.key: g for g in (
    GpuSpec("rtx3090", "NVIDIA GeForce RTX 3090", 24 * GB, 936, 71, None, 4, 16, 56.25,
            "NVIDIA Ampere GA102 GPU architecture whitepaper, table 9"),
    GpuSpec("rtx4090", "NVIDIA GeForce RTX 4090", 24 * GB, 1008, 165.2, 330.3, 4, 16, 0.0,
            "NVIDIA Ada GPU architecture whitepaper, appendix A table 2"),
    GpuSpec("rtx4090-48g", "NVIDIA GeForce RTX 4090 48GB", 48 * GB, 1008, 165.2, 330.3, 4, 16, 0.0,
            "RTX 4090 figures (Ada whitepaper) with 48 GB: a board-partner memory upgrade, no NVIDIA datasheet"),
    GpuSpec("rtx5090", "NVIDIA GeForce RTX 5090", 32 * GB, 1792, 209.5, 419, 5, 16, 0.0,
            "NVIDIA RTX Blackwell GPU architecture whitepaper, appendix table"),
    GpuSpec("rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell", 96 * GB, 1792, 503.8, 1007.6, 5, 16, 0.0,
            "NVIDIA RTX Blackwell GPU architecture whitepaper; RTX PRO 6000 Blackwell datasheet"),
    GpuSpec("l40s", "NVIDIA L40S", 48 * GB, 864, 362.05, 733, 4, 16, 0.0, "NVIDIA L40S datasheet"),
    GpuSpec("a100", "NVIDIA A100-SXM4-80GB", 80 * GB, 2039, 312, None, 4, 16, 300,
            "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM)"),
    GpuSpec("h100", "NVIDIA H100 80GB HBM3", 80 * GB, 3350, 989, 1979, 5, 16, 450,
            "NVIDIA H100 Tensor Core GPU datasheet (SXM)"),
    GpuSpec("h20", "NVIDIA H20", 96 * GB, 4000, 148, 296, 5, 16, 450, "NVIDIA H20 product brief"),
    GpuSpec("h200", "NVIDIA H200", 141 * GB, 4800, 989, 1979, 5, 16, 450,
            "NVIDIA H200 Tensor Core GPU datasheet (SXM figures)"),
)}


def gpu_spec(key: str) -> GpuSpec:
    """The table entry for `key` (case and '-'/'_'/' ' insensitive), UserError when unknown."""
    norm = key.lower().replace("_", "-").replace(" ", "-")
    if norm in GPUS:
        return GPUS[norm]
    raise UserError(f"unknown GPU {key!r}", f"use one of: {', '.join(GPUS)}")


def spec_for_name(name: str) -> GpuSpec | None:
    """The table entry whose NVML name matches `name` (exact first, then the longest contained key)."""
    for g in GPUS.values():
        if g.name == name:
            return g
    low = name.lower().replace(" ", "")
    hits = [g for g in GPUS.values() if g.key.replace("-", "") in low]
    return max(hits, key=lambda g: len(g.key)) if hits else None


def pcie_gbps(gen: int, width: int) -> float:
    """Theoretical one-direction PCIe rate, GB/s: GT/s per lane x lanes x encoding (8b/10b up to
    Gen2, 128b/130b from Gen3) / 8 bits."""
    gts = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}[gen]
    enc = 0.8 if gen <= 2 else 128 / 130
    return gts * width * enc / 8
