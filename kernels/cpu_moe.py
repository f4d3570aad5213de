"""A torch CPU MoE: the reference kt-kernel's kernels are checked against, and the fallback the CPU
probe times (labelled `backend="torch-cpu"`) when kt-kernel is not importable.

One MoE layer of SwiGLU experts, as kt-kernel computes it (kt-kernel `operators/avx2/moe_base.hpp`,
`amx/moe_base.hpp`): for each token t and each of its top-k experts e with routing weight w,
`out[t] += w * down_e(silu(gate_e x_t) * up_e x_t)`, with gate/up `[I, H]` and down `[H, I]` row-major
(`[out_features, in_features]`, the HF checkpoint layout).

Also here: the expert weight formats kt-kernel's native methods read (kt-sglang.md §7), with a
quantizer (to build test weights) and a dequantizer (to give the reference the exact weights the
kernel sees) for each:

- FP8 (block): e4m3fn bytes `[N, K]` + fp32 scale per 128x128 block `[ceil(N/128), ceil(K/128)]`.
- RAWINT4: int4 packed two per byte, low nibble first, stored as `q + 8` (compressed-tensors
  pack-quantized, symmetric), `[N, K/2]` uint8 + bf16 scale per group of `K` `[N, K/group]`.

torch is imported here at module import: this module is for probes and tests, not for the models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kttune.kernels.routing import random_routing  # noqa: F401  (the probes and tests route with it)

FP8_BLOCK = 128
FP8_E4M3_MAX = 448.0
INT4_GROUP = 32


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
        y = swiglu_expert(
            xc[rows], gate[e].to(compute_dtype), up[e].to(compute_dtype), down[e].to(compute_dtype)
        )
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
    def random(cls, experts: int, hidden: int, inter: int, dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> "TorchCpuMoE":
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


# ---- FP8 block (e4m3fn + fp32 per 128x128 block) ---------------------------------------------


def quantize_fp8_block(w: torch.Tensor, block: int = FP8_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """`w` `[N, K]` -> (e4m3fn bytes as uint8 `[N, K]`, fp32 scale `[ceil(N/b), ceil(K/b)]`) with
    `w ~= fp8 * scale` per block (DeepSeek `weight_scale_inv` convention)."""
    n, k = w.shape
    nb, kb = math.ceil(n / block), math.ceil(k / block)
    wf = w.to(torch.float32)
    padded = torch.zeros(nb * block, kb * block)
    padded[:n, :k] = wf
    blocks = padded.view(nb, block, kb, block)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)
    scale = amax / FP8_E4M3_MAX
    q = (blocks / scale[:, None, :, None]).view(nb * block, kb * block)[:n, :k]
    fp8 = q.to(torch.float8_e4m3fn)
    return fp8.view(torch.uint8).contiguous(), scale.contiguous()


def dequant_fp8_block(q: torch.Tensor, scale: torch.Tensor, block: int = FP8_BLOCK) -> torch.Tensor:
    """Inverse of `quantize_fp8_block`: fp32 `[N, K]`."""
    n, k = q.shape
    w = q.view(torch.float8_e4m3fn).to(torch.float32)
    s = scale.repeat_interleave(block, 0)[:n].repeat_interleave(block, 1)[:, :k]
    return w * s


# ---- RAWINT4 (int4 + bf16 scale per group of K) ------------------------------------------------


def quantize_int4_group(w: torch.Tensor, group: int = INT4_GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """`w` `[N, K]` -> (packed uint8 `[N, K/2]`, bf16 scale `[N, K/group]`): symmetric int4 in
    [-8, 7] stored as `q + 8`, element 2j in the low nibble of byte j."""
    n, k = w.shape
    if k % group or k % 2:
        raise ValueError(f"K={k} must be a multiple of the group size {group}")
    wg = w.to(torch.float32).view(n, k // group, group)
    scale = (wg.abs().amax(dim=2) / 7.0).clamp(min=1e-8).to(torch.bfloat16)
    q = torch.round(wg / scale.to(torch.float32).unsqueeze(2)).clamp(-8, 7).to(torch.int16) + 8
    q = q.view(n, k).to(torch.uint8)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).contiguous()
    return packed, scale.contiguous()


def dequant_int4_group(packed: torch.Tensor, scale: torch.Tensor, group: int = INT4_GROUP) -> torch.Tensor:
    """Inverse of `quantize_int4_group`: fp32 `[N, K]`."""
    n = packed.shape[0]
    lo = (packed & 0xF).to(torch.int16)
    hi = (packed >> 4).to(torch.int16)
    q = torch.stack((lo, hi), dim=2).view(n, -1).to(torch.float32) - 8.0
    return q * scale.to(torch.float32).repeat_interleave(group, dim=1)
