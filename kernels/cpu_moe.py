"""A torch CPU MoE: the reference kt-kernel's kernels are checked against, and the fallback the CPU
probe times (labelled `backend="torch-cpu"`) when kt-kernel is not importable.

One MoE layer of SwiGLU experts, as kt-kernel computes it (kt-kernel `operators/avx2/moe_base.hpp`,
`amx/moe_base.hpp`): for each token t and each of its top-k experts e with routing weight w,
`out[t] += w * down_e(silu(gate_e x_t) * up_e x_t)`, with gate/up `[I, H]` and down `[H, I]` row-major
(`[out_features, in_features]`, the HF checkpoint layout).

The weight formats and their (de)quantisers live in `kttune.kernels.expert_weights`.

torch is imported here at module import: this module is for probes and tests, not for the models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kttune.kernels.routing import random_routing  # noqa: F401  (the probes and tests route with it)


# ---- the MoE --------------------------------------------------------------------------------


def swiglu_expert(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    """One expert on rows `x` `[m, H]`: `down(silu(gate x) * up x)` in x's dtype."""
    return torch.nn.functional.silu(x @ gate.t()) * (x @ up.t()) @ down.t()


def moe_forward(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    gate: torch.Tensor,
    up: torch.Tensor,
    down: torch.Tensor,
    *,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Routed-expert MoE of `x` `[T, H]` with `topk_ids`/`topk_weights` `[T, k]` and expert weights
    `gate`, `up` `[E, I, H]`, `down` `[E, H, I]`. Ids < 0 are skipped (GPU-resident experts, as
    kt-kernel's mask does). Computes in `compute_dtype`; returns `[T, H]` in x's dtype."""
    xc = x.to(compute_dtype)
    out = torch.zeros(x.shape[0], x.shape[1], dtype=compute_dtype)
    flat_ids = topk_ids.reshape(-1).to(torch.long)
    flat_w = topk_weights.reshape(-1).to(compute_dtype)
    token_of = torch.arange(topk_ids.numel()) // topk_ids.shape[1]
    for e in torch.unique(flat_ids).tolist():
        if e < 0:
            continue
        sel = (flat_ids == e).nonzero(as_tuple=True)[0]
        rows = token_of[sel]
        y = swiglu_expert(xc[rows], gate[e].to(compute_dtype), up[e].to(compute_dtype), down[e].to(compute_dtype))
        out.index_add_(0, rows, y * flat_w[sel].unsqueeze(1))
    return out.to(x.dtype)


@dataclass
class TorchCpuMoE:
    """A MoE layer held as dense weights, run by `moe_forward` (the probe's torch-cpu fallback).
    `dtype` is the weight and compute dtype (bf16 or fp32)."""

    gate: torch.Tensor  # [E, I, H]
    up: torch.Tensor  # [E, I, H]
    down: torch.Tensor  # [E, H, I]
    dtype: torch.dtype = torch.bfloat16

    @classmethod
    def random(
        cls, experts: int, hidden: int, inter: int, dtype: torch.dtype = torch.bfloat16, seed: int = 0
    ) -> "TorchCpuMoE":
        g = torch.Generator().manual_seed(seed)
        scale_in = 1.0 / math.sqrt(hidden)
        scale_mid = 1.0 / math.sqrt(inter)
        return cls(
            gate=(torch.randn(experts, inter, hidden, generator=g) * scale_in).to(dtype),
            up=(torch.randn(experts, inter, hidden, generator=g) * scale_in).to(dtype),
            down=(torch.randn(experts, hidden, inter, generator=g) * scale_mid).to(dtype),
            dtype=dtype,
        )

    def forward(self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        return moe_forward(x, topk_ids, topk_weights, self.gate, self.up, self.down, compute_dtype=self.dtype)
