"""Host RAM of a configuration: every routed expert in the CPU format (whatever the GPU-expert
count, kt-kernel 0.7.2 loads every expert: ktransformers#2084), kt-kernel's own weight buffers, and
the forward scratch kt-kernel sizes from `max_len` = --chunked-prefill-size. Pure functions.

The scratch formula is read from kt-kernel's source and checked against real kt-kernel MoE objects
(benchmarks/results/2026-12-01-xeon-amx-2c/host_ram.json, `kttune.probes.host_ram`); docs/memory.md gives the buffer list
with upstream links.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kttune.config import LaunchConfig
from kttune.spec.methods import bytes_per_expert, get_method, host_bytes_per_expert
from kttune.spec.model_spec import ModelSpec
from kttune.spec.moe_shape import MoeLayerShape
from kttune.units import GIB

# Process, Python, tokenizer and pinned staging outside kt-kernel (observed order of magnitude).
HOST_BASE_BYTES = 4 * GIB
# Bytes per element of kt-kernel's fp32 output buffers (BufferC, the TP wrapper's local outputs).
FP32 = 4
# Per-row alignment slack kt-kernel adds to each of the 5 pooled buffers (moe_base.hpp: `pool_count * 64`).
POOL_ROW_SLACK_BYTES = 5 * 64


@dataclass(frozen=True)
class KernelFamily:
    """How a kt-kernel MoE class lays out its activation buffers: `BufferA` bytes per element plus
    fp32 scales per row or per 32-wide k-group, `BufferC` fp32 outputs (x2 for the "reduce" variants
    that keep a second partial-sum copy), and the row padding `M_STEP` of each expert."""

    name: str
    a_bytes_per_elem: int
    a_scale_bytes_per_row: int
    a_scale_group: int  # 0: no per-group scales
    c_copies: int
    m_step: int

    def buffer_a_bytes(self, rows: int, k: int) -> int:
        groups = k // self.a_scale_group if self.a_scale_group else 0
        return rows * (k * self.a_bytes_per_elem + self.a_scale_bytes_per_row + FP32 * groups)

    def buffer_c_bytes(self, rows: int, n: int) -> int:
        return rows * n * FP32 * self.c_copies


# Source files under kt-kernel/operators/ (docs/memory.md links them); every family's per-token
# slope was checked against real kt-kernel objects (benchmarks/results/2026-12-01-xeon-amx-2c/host_ram.json).
# avx2/*: bf16 BufferA, fp32 BufferC, M_STEP 1.
AVX2 = KernelFamily("avx2", 2, 0, 0, 1, 1)
# amx/bf16-moe.hpp (GemmKernel224BF16: BufferABF16Impl, BufferCFP32Impl, M_STEP 32).
AMX_BF16 = KernelFamily("amx-bf16", 2, 0, 0, 1, 32)
# amx/fp8-moe.hpp (GemmKernel224FP8: BufferABF16Impl, BufferCFP32ReduceImpl = 2 fp32 copies).
AMX_FP8 = KernelFamily("amx-fp8", 2, 0, 0, 2, 32)
# amx/k2-moe.hpp (GemmKernel224Int4SmallKGroup: int8 BufferA + fp32 scale per 32-group,
# BufferCReduceImpl, M_STEP 1).
AMX_INT4_KGROUP = KernelFamily("amx-int4-kgroup", 1, 0, 32, 2, 1)
# amx/moe.hpp (AMXInt4_MOE / AMXInt8_MOE: int8 BufferA + one fp32 scale per row, fp32 BufferC,
# M_STEP 32).
AMX_INT_ROW = KernelFamily("amx-int-row", 1, 4, 0, 1, 32)


def kernel_family(method_name: str, amx: bool) -> KernelFamily:
    """The buffer layout of the class kt-kernel picks for `method_name` (AMX classes when the CPU
    has AMX, the AVX2 ones otherwise)."""
    if not amx:
        return AVX2
    return {"AMXINT4": AMX_INT_ROW, "AMXINT8": AMX_INT_ROW, "RAWINT4": AMX_INT4_KGROUP, "FP8": AMX_FP8}.get(
        method_name.upper(), AMX_BF16
    )


def kt_scratch_bytes(s: MoeLayerShape, max_len: int, family: KernelFamily, pools: int = 1) -> int:
    """Address space kt-kernel reserves for one MoE class's forward scratch, shared by every layer
    (the shared buffers keep the largest request, not the sum), for forwards of up to `max_len`
    tokens over `pools` NUMA sub-pools:

    per sub-pool p (expert width I_p = I / pools), `AVX2_MOE_BASE::init` / `AMX_MOE_BASE::init`:
      k·L·(H + I_p + I_p + H) bf16 local input/gate/up/down rows
      + R·(A(H) + 2·C(I_p) + A(I_p) + C(H) + 5·64) pooled buffers, R = k·L + E·M_STEP rows
    and the TP wrapper (`TP_MOE_Common`, moe-tp.hpp): fp32 L·H outputs per sub-pool plus one merged.
    """
    h, k, n, pools = s.hidden, s.top_k, max_len, max(1, pools)
    i_p = s.inter // pools
    local = k * n * (2 * h + 2 * i_p) * 2
    rows = k * n + s.experts * family.m_step
    pooled = (
        family.buffer_a_bytes(rows, h)
        + family.buffer_a_bytes(rows, i_p)
        + family.buffer_c_bytes(rows, 2 * i_p + h)
        + rows * POOL_ROW_SLACK_BYTES
    )
    tp_outputs = FP32 * n * h * (pools + 1)
    return pools * (local + pooled) + tp_outputs


def kt_weight_buffer_bytes(method_name: str, hidden: int, inter: int, amx: bool) -> int:
    """Bytes kt-kernel allocates for one expert's weights on top of the source (its BufferB):
    BF16/FP8 copy the weights; RAWINT4 on AVX2 serves the int4 data from the source and keeps only
    fp32 scales per 32-group (`required_size_scale_only`); AMX classes repack into their own format."""
    m = method_name.upper()
    n = 3 * hidden * inter
    if m == "BF16":
        return 2 * n
    if m == "FP8":
        return bytes_per_expert("fp8_block", hidden, inter)
    if m == "RAWINT4":
        return n // 2 + FP32 * (n // 32) if amx else FP32 * (n // 32)
    if m == "AMXINT4":
        return bytes_per_expert("amx_int4", hidden, inter)
    if m == "AMXINT8":
        return bytes_per_expert("amx_int8", hidden, inter)
    return bytes_per_expert(get_method(m).cpu_format, hidden, inter)


def kt_allocation_bytes(s: MoeLayerShape, max_len: int, layers: int, amx: bool, pools: int = 1) -> int:
    """What kt-kernel itself allocates for `layers` MoE layers of one class (`s.method`): weight
    buffers per layer plus the shared scratch (checked against measured VmSize growth in
    tests/memory/test_host.py)."""
    weights = layers * s.experts * kt_weight_buffer_bytes(s.method, s.hidden, s.inter, amx)
    return weights + kt_scratch_bytes(s, max_len, kernel_family(s.method, amx), pools)


@dataclass(frozen=True)
class HostRamBreakdown:
    cpu_experts: int
    cpu_scratch: int
    base: int

    @property
    def total_bytes(self) -> int:
        return self.cpu_experts + self.cpu_scratch + self.base

    def to_dict(self) -> dict:
        return {**asdict(self), "total_bytes": self.total_bytes}


def cpu_expert_bytes(model: ModelSpec, method_name: str) -> int:
    method = get_method(method_name)
    per = host_bytes_per_expert(method.cpu_format, model.hidden_size, model.moe_intermediate_size)
    return model.num_moe_layers * model.num_experts * per


def cpu_scratch_bytes(model: ModelSpec, cfg: LaunchConfig, amx: bool = True) -> int:
    """kt-kernel's forward scratch for this launch (`kt_scratch_bytes` at max_len = the chunk)."""
    return kt_scratch_bytes(
        MoeLayerShape.of_model(model),
        cfg.chunked_prefill_size,
        kernel_family(cfg.method, amx),
        max(1, cfg.threadpool_count),
    )


def host_ram_breakdown(model: ModelSpec, cfg: LaunchConfig, amx: bool = True) -> HostRamBreakdown:
    return HostRamBreakdown(
        cpu_experts=cpu_expert_bytes(model, cfg.method),
        cpu_scratch=cpu_scratch_bytes(model, cfg, amx),
        base=HOST_BASE_BYTES,
    )
