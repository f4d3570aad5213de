"""The GPU table: datasheet figures of the GPUs KTransformers users run, one record each, and the
PCIe link rates. Every datasheet number kttune uses reads it: deriving profiles of machines that
were not measured (`kttune.hw.derive`, the shipped `profiles/datasheet-*.json` of
`kttune.hw.datasheet`), the cost model's HBM bandwidth when a profile cannot fit one
(`kttune.cost.components`), the probes' link-rate ratio (`kttune.probes.gpu_common`). Dense tensor
rates (no sparsity) with FP32 accumulate; sources in docs/derive.md. Adding a GPU is adding a record
(docs/howto-add-a-gpu.md). Pure data."""

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
    # CUDA compute capability (NVIDIA's CUDA GPUs list): which kernels SGLang dispatches to
    compute_capability: str = ""

    @property
    def fp8_or_bf16_tflops(self) -> float:
        return self.fp8_tflops or self.bf16_tflops


GPUS: dict[str, GpuSpec] = {
    g.key: g
    for g in (
        GpuSpec(
            "rtx3090",
            "NVIDIA GeForce RTX 3090",
            24 * GB,
            936,
            71,
            None,
            4,
            16,
            56.25,
            "NVIDIA Ampere GA102 GPU architecture whitepaper, table 9",
            compute_capability="8.6",
        ),
        GpuSpec(
            "rtx4090",
            "NVIDIA GeForce RTX 4090",
            24 * GB,
            1008,
            165.2,
            330.3,
            4,
            16,
            0.0,
            "NVIDIA Ada GPU architecture whitepaper, appendix A table 2",
            compute_capability="8.9",
        ),
        GpuSpec(
            "rtx4090-48g",
            "NVIDIA GeForce RTX 4090 48GB",
            48 * GB,
            1008,
            165.2,
            330.3,
            4,
            16,
            0.0,
            "RTX 4090 figures (Ada whitepaper) with 48 GB: a board-partner memory upgrade, no NVIDIA datasheet",
            compute_capability="8.9",
        ),
        GpuSpec(
            "rtx5090",
            "NVIDIA GeForce RTX 5090",
            32 * GB,
            1792,
            209.5,
            419,
            5,
            16,
            0.0,
            "NVIDIA RTX Blackwell GPU architecture whitepaper, appendix table",
            compute_capability="12.0",
        ),
        GpuSpec(
            "rtx-pro-6000",
            "NVIDIA RTX PRO 6000 Blackwell",
            96 * GB,
            1792,
            503.8,
            1007.6,
            5,
            16,
            0.0,
            "NVIDIA RTX Blackwell GPU architecture whitepaper; RTX PRO 6000 Blackwell datasheet",
            compute_capability="12.0",
        ),
        GpuSpec(
            "l40s",
            "NVIDIA L40S",
            48 * GB,
            864,
            362.05,
            733,
            4,
            16,
            0.0,
            "NVIDIA L40S datasheet",
            compute_capability="8.9",
        ),
        GpuSpec(
            "a100",
            "NVIDIA A100-SXM4-80GB",
            80 * GB,
            2039,
            312,
            None,
            4,
            16,
            300,
            "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM)",
            compute_capability="8.0",
        ),
        GpuSpec(
            "h100",
            "NVIDIA H100 80GB HBM3",
            80 * GB,
            3350,
            989,
            1979,
            5,
            16,
            450,
            "NVIDIA H100 Tensor Core GPU datasheet (SXM)",
            compute_capability="9.0",
        ),
        GpuSpec(
            "h20",
            "NVIDIA H20",
            96 * GB,
            4000,
            148,
            296,
            5,
            16,
            450,
            "NVIDIA H20 product brief",
            compute_capability="9.0",
        ),
        GpuSpec(
            "h200",
            "NVIDIA H200",
            141 * GB,
            4800,
            989,
            1979,
            5,
            16,
            450,
            "NVIDIA H200 Tensor Core GPU datasheet (SXM figures)",
            compute_capability="9.0",
        ),
        GpuSpec(
            "h800",
            "NVIDIA H800",
            80 * GB,
            3350,
            989,
            1979,
            5,
            16,
            200,
            "NVIDIA H800 Tensor Core GPU datasheet (SXM)",
            compute_capability="9.0",
        ),
        GpuSpec(
            "a800",
            "NVIDIA A800-SXM4-80GB",
            80 * GB,
            2039,
            312,
            None,
            4,
            16,
            200,
            "NVIDIA A800 Tensor Core GPU datasheet (80GB SXM)",
            compute_capability="8.0",
        ),
        GpuSpec(
            "l40",
            "NVIDIA L40",
            48 * GB,
            864,
            181.05,
            362.1,
            4,
            16,
            0.0,
            "NVIDIA L40 datasheet",
            compute_capability="8.9",
        ),
        GpuSpec(
            "rtx-6000-ada",
            "NVIDIA RTX 6000 Ada Generation",
            48 * GB,
            960,
            364.2,
            728.5,
            4,
            16,
            0.0,
            "NVIDIA Ada GPU architecture whitepaper, appendix (RTX 6000 Ada)",
            compute_capability="8.9",
        ),
        GpuSpec(
            "a6000",
            "NVIDIA RTX A6000",
            48 * GB,
            768,
            154.8,
            None,
            4,
            16,
            56.25,
            "NVIDIA RTX A6000 datasheet",
            compute_capability="8.6",
        ),
    )
}


def gpu_spec(key: str) -> GpuSpec:
    """The table entry for `key` (case and '-'/'_'/' ' insensitive), UserError when unknown."""
    norm = key.lower().replace("_", "-").replace(" ", "-")
    if norm in GPUS:
        return GPUS[norm]
    raise UserError(f"unknown GPU {key!r}", f"use one of: {', '.join(GPUS)}")


def spec_for_name(name: str) -> GpuSpec | None:
    """The table entry whose NVML name matches `name` (exact first, then the longest contained key:
    "NVIDIA L40S" is the l40s, not the l40; "NVIDIA H200 NVL" the h200)."""
    for g in GPUS.values():
        if g.name == name:
            return g
    low = name.lower().replace(" ", "")
    hits = [g for g in GPUS.values() if g.key.replace("-", "") in low]
    return max(hits, key=lambda g: len(g.key)) if hits else None


# Per-lane signalling rate in GT/s and line-code efficiency, PCIe gen 1..6: 8b/10b up to Gen2,
# 128b/130b Gen3-5, PAM4 + FLIT (242/256) in Gen6.
PCIE_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
PCIE_LINE_CODE = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}


def pcie_gbps(gen: int, width: int) -> float:
    """Theoretical one-direction PCIe rate, GB/s (1e9 B/s): GT/s per lane x lanes x line-code
    efficiency / 8 bits. Gen5 x16: 16 x 32 x 128/130 / 8 = 63.0 GB/s."""
    return PCIE_GTS[gen] * width * PCIE_LINE_CODE[gen] / 8
