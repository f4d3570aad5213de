"""KT methods (`--kt-method`), expert weight formats and bytes per expert.

One source of truth for the byte formulas of docs/weight-formats.md and for which methods may run
layerwise (docs/sglang-kt.md#the-threshold-must-be-0-for-non-native-methods), for sglang-kt 0.7.2 +
kt-kernel 0.7.2. Pure Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kttune.errors import UserError

FP8_BLOCK = 128  # DeepSeek-style 128x128 block scales


@dataclass(frozen=True)
class WeightFormat:
    """How one expert's three matrices (gate, up: I x H; down: H x I) are stored: `weight_bits` per
    weight element plus `scale_bytes` per scale, with one scale per `group` consecutive weights
    (scale="group"), per output row (scale="channel": I + I + H rows) or per `group` x `group` tile
    (scale="block"). docs/weight-formats.md has the table and the upstream layouts."""

    name: str
    weight_bits: float  # bits per weight element (GGUF Q4_K: its scales are inside the 4.5 bits)
    description: str
    scale: str = "none"  # "none" | "group" | "channel" | "block"
    group: int = 0
    scale_bytes: int = 0

    def scales_per_expert(self, hidden: int, inter: int) -> int:
        n = 3 * hidden * inter
        if self.scale == "group":
            return n // self.group
        if self.scale == "channel":
            return 2 * inter + hidden
        if self.scale == "block":
            return 3 * math.ceil(inter / self.group) * math.ceil(hidden / self.group)
        return 0


FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in (
        WeightFormat("bf16", 16, "bf16"),
        WeightFormat("fp8_block", 8, "fp8 e4m3 + fp32 scale per 128x128 block", "block", FP8_BLOCK, 4),
        WeightFormat("fp8_channel", 8, "fp8 e4m3 + fp32 scale per output channel", "channel", 0, 4),
        WeightFormat("int4_g32", 4, "int4 packed + bf16 scale per 32 (compressed-tensors)", "group", 32, 2),
        WeightFormat("mxfp4", 4, "e2m1 + ue8m0 scale per 32", "group", 32, 1),
        WeightFormat("mxfp8", 8, "e4m3 + ue8m0 scale per 32", "group", 32, 1),
        WeightFormat("nvfp4", 4, "e2m1 + e4m3 scale per 16", "group", 16, 1),
        WeightFormat("gptq_int4", 4, "int4 packed + fp16 scale per 128 (GPTQ)", "group", 128, 2),
        WeightFormat("amx_int4", 4, "AMX int4 + fp32 scale per output channel (converted)", "channel", 0, 4),
        WeightFormat("amx_int8", 8, "AMX int8 + fp32 scale per output channel (converted)", "channel", 0, 4),
        WeightFormat("gguf_q4k", 4.5, "GGUF Q4_K (about 4.5 bits per weight)"),
    )
}


def bytes_per_expert(fmt: str, hidden: int, inter: int) -> int:
    """Bytes of one routed expert (gate + up + down) in format `fmt` with hidden size H and expert
    width I (pass I/tp for one GPU rank's shard): packed weights plus their scales.
    Source: docs/weight-formats.md (bytes per expert)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown weight format {fmt!r}")
    f = FORMATS[fmt]
    weights = math.floor(3 * hidden * inter * f.weight_bits / 8)
    return weights + f.scales_per_expert(hidden, inter) * f.scale_bytes


# Formats whose scales kt-kernel's loader widens in host RAM: MXFP4's ue8m0 byte becomes the bf16 of
# the same power of two (`MXFP4SafeTensorLoader`, docs/weight-formats.md#mxfp4-and-mxfp8-in-host-ram).
HOST_SCALE_BYTES = {"mxfp4": 2}


def host_bytes_per_expert(fmt: str, hidden: int, inter: int) -> int:
    """Bytes of one routed expert in format `fmt` as kt-kernel holds it in host RAM: `bytes_per_expert`
    with the scales at their host width (HOST_SCALE_BYTES)."""
    f = FORMATS[fmt]
    extra = HOST_SCALE_BYTES.get(fmt, f.scale_bytes) - f.scale_bytes
    return bytes_per_expert(fmt, hidden, inter) + f.scales_per_expert(hidden, inter) * extra


def mxfp4_raw_bytes_per_expert(hidden: int, inter: int) -> int:
    """One MXFP4 expert as sglang-kt's DeepSeek-V4 method holds it raw on the GPU: packed e2m1 and
    fp32 scales per 32 (`DeepSeekMxfp4MoEMethod.create_weights`; docs/memory.md#layerwise-extra)."""
    n = 3 * hidden * inter
    return n // 2 + (n // 32) * 4


def mxfp4_layerwise_slot_bytes_per_expert(hidden: int, inter: int) -> int:
    """MXFP4 layerwise keeps a raw slot with fp32 scales plus a Marlin-prepared copy
    (sglang-kt `_mxfp4_raw_slot_storage_nbytes`; docs/memory.md#layerwise-extra)."""
    return mxfp4_raw_bytes_per_expert(hidden, inter) + bytes_per_expert("mxfp4", hidden, inter)


@dataclass(frozen=True)
class KtMethod:
    """One `--kt-method` value of kt-kernel 0.7.2."""

    name: str
    cpu_format: str  # format of the experts in host RAM
    native: bool  # CPU and GPU use the same checkpoint (`--kt-weight-path` = `--model`)
    layerwise: bool  # `--kt-gpu-prefill-token-threshold` > 0 allowed (docs/sglang-kt.md#the-threshold-must-be-0-for-non-native-methods)
    # Experts the layerwise path re-sends from the CPU even when they are GPU-resident (docs/sglang-kt.md#the-two-prefill-paths):
    # BF16 and MXFP4 copy resident experts GPU->GPU; FP8*, MXFP8 and RAWINT4 re-send all.
    layerwise_resends_gpu_experts: bool
    needs_fp8_tp_divisibility: bool  # FP8 block weights need (I/tp) % 128 == 0
    wrapper: str


METHODS: dict[str, KtMethod] = {
    m.name: m
    for m in (
        KtMethod("RAWINT4", "int4_g32", True, True, True, False, "NativeMoEWrapper"),
        KtMethod("FP8", "fp8_block", True, True, True, True, "NativeMoEWrapper"),
        KtMethod("FP8_PERCHANNEL", "fp8_channel", True, True, True, False, "NativeMoEWrapper"),
        KtMethod("BF16", "bf16", True, True, False, False, "NativeMoEWrapper"),
        KtMethod("MXFP4", "mxfp4", True, True, False, False, "NativeMoEWrapper"),
        KtMethod("MXFP8", "mxfp8", True, True, True, False, "NativeMoEWrapper"),
        KtMethod("NVFP4", "nvfp4", True, False, True, False, "NativeMoEWrapper"),
        KtMethod("GPTQ_INT4", "gptq_int4", True, False, True, False, "NativeMoEWrapper"),
        KtMethod("AMXINT4", "amx_int4", False, False, True, False, "AMXMoEWrapper"),
        KtMethod("AMXINT8", "amx_int8", False, False, True, False, "AMXMoEWrapper"),
        KtMethod("LLAMAFILE", "gguf_q4k", False, False, True, False, "LlamafileMoEWrapper"),
        KtMethod("MOE_INT4", "amx_int4", False, False, True, False, "GeneralMoEWrapper"),
        KtMethod("MOE_INT8", "amx_int8", False, False, True, False, "GeneralMoEWrapper"),
    )
}

# Methods whose layerwise experts are repacked on the GPU after stage A (stage C): sglang-kt runs
# Marlin's repack (RAWINT4) and prepare (MXFP4) there; the path runner one Triton transpose of the same
# 4-bit words (kttune/kernels/int4.py). The other layerwise methods are read as stage A writes them.
REPACKED_METHODS = ("RAWINT4", "MXFP4")

# MX methods the CPU probe times without a model (beside its six defaults, probes/cpu_moe.py), since
# 2026-12-07: gpt-oss and DeepSeek-V4-Flash are served in MXFP4, and kt-kernel's MXFP4 class runs
# 2.5-3.4x RAWINT4's time on the H100 box's Emerald Rapids CPU at gpt-oss's experts
# (`benchmarks/bench_mx_methods.py`), so a profile without its curve read gpt-oss's hybrid path 74-82%
# fast from the same-bits stand-in (docs/path-runner.md#mxfp4). MXFP8 is left to `--model`: no catalog
# model kttune serves ships it. The cost model's stand-in note says which a quick probe times.
UNASKED_MX = ("MXFP4",)

# Native checkpoint format -> the KT method that serves it without conversion.
NATIVE_METHOD_FOR_FORMAT = {
    "bf16": "BF16",
    "fp8_block": "FP8",
    "fp8_channel": "FP8_PERCHANNEL",
    "int4_g32": "RAWINT4",
    "mxfp4": "MXFP4",
    "mxfp8": "MXFP8",
    "nvfp4": "NVFP4",
    "gptq_int4": "GPTQ_INT4",
}


def get_method(name: str) -> KtMethod:
    key = name.strip().upper().replace("-", "_")
    if key not in METHODS:
        raise UserError(
            f"unknown KT method {name!r}",
            "use one of " + ", ".join(METHODS),
        )
    return METHODS[key]


def gpu_format(method: KtMethod, checkpoint_format: str) -> str:
    """Format of GPU-resident experts. Native methods use the method's format; converted CPU formats
    (AMX*, LLAMAFILE, MOE_*) leave the GPU experts in the original checkpoint (docs/weight-formats.md#layouts-on-disk-and-on-the-gpu)."""
    return method.cpu_format if method.native else checkpoint_format


def layerwise_slot_bytes_per_expert(method: KtMethod, hidden: int, inter_per_rank: int) -> int:
    """Bytes one expert takes in the lazily allocated full-layer slot on one GPU rank (docs/memory.md#layerwise-extra)."""
    if method.cpu_format == "mxfp4":
        return mxfp4_layerwise_slot_bytes_per_expert(hidden, inter_per_rank)
    return bytes_per_expert(method.cpu_format, hidden, inter_per_rank)
