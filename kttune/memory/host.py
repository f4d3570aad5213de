"""Host RAM of a configuration (docs/memory.md#host-ram-hostrambreakdown): all routed experts in the CPU format —
whatever the GPU-expert count, kt-kernel 0.7.2 loads every expert (ktransformers#2084) — plus
per-pool CPU scratch that grows with the chunk. Pure functions."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kttune.config import LaunchConfig
from kttune.spec.methods import bytes_per_expert, get_method
from kttune.spec.model_spec import ModelSpec
from kttune.units import GIB

# Process, Python, tokenizer and pinned staging outside kt-kernel (observed order of magnitude).
HOST_BASE_BYTES = 4 * GIB
M_STEP = 64  # rows kt-kernel pads each expert's A/C buffers to (moe_base.hpp)


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
    per = bytes_per_expert(method.cpu_format, model.hidden_size, model.moe_intermediate_size)
    return model.num_moe_layers * model.num_experts * per


def cpu_scratch_bytes(model: ModelSpec, cfg: LaunchConfig) -> int:
    """kt-kernel sizes its per-pool scratch from max_len = chunked_prefill_size (moe_base.hpp init):
    bf16 staging of cps*k rows of (2H + 4 I_p + 2H), and A/C pools of (cps*k + E*M_STEP) rows of
    H and I_p, where I_p = I / threadpool_count. Shared across layers."""
    pools = max(1, cfg.threadpool_count)
    i_p = model.moe_intermediate_size // pools
    h = model.hidden_size
    rows = cfg.chunked_prefill_size * model.top_k
    staging = rows * (2 * h + 4 * i_p + 2 * h) * 2
    ac_pools = (rows + model.num_experts * M_STEP) * (h + 2 * i_p) * 2
    return pools * (staging + ac_pools)


def host_ram_breakdown(model: ModelSpec, cfg: LaunchConfig) -> HostRamBreakdown:
    return HostRamBreakdown(
        cpu_experts=cpu_expert_bytes(model, cfg.method),
        cpu_scratch=cpu_scratch_bytes(model, cfg),
        base=HOST_BASE_BYTES,
    )
