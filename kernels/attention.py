"""Prefill attention of one layer on the GPU, as the cost model counts it: causal self-attention of a
chunk of `T` new tokens starting from an empty cache.

- GQA (Qwen3, GLM, MiniMax...): torch SDPA (flash / memory-efficient / cuDNN, whichever torch picks)
  with grouped KV heads.
- MLA (DeepSeek-V3, Kimi-K2): the prefill ("non-absorbed") form sglang uses for long chunks: the
  latent `c_kv` [T, kv_lora_rank] is expanded by `kv_b_proj` into per-head k_nope and v, the shared
  rope key is broadcast to every head, then causal SDPA over head dim qk_nope + qk_rope with values of
  v_head_dim (zero-padded to the qk head dim where the SDPA backend needs equal dims).

Query/output projections are GEMMs the cost model takes from the `gpu_gemm` curve; they are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Float64 causal attention. q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, Dv] -> [T, Hq, Dv]."""
    q64, k64, v64 = q.double().cpu(), k.double().cpu(), v.double().cpu()
    t, hq, d = q64.shape
    rep = hq // k64.shape[1]
    k64 = k64.repeat_interleave(rep, dim=1)
    v64 = v64.repeat_interleave(rep, dim=1)
    scale = scale if scale is not None else d**-0.5
    s = torch.einsum("thd,shd->hts", q64, k64) * scale
    s = s.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
    return torch.einsum("hts,shd->thd", s.softmax(-1), v64)


def gqa_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Causal GQA by SDPA. q [T, Hq, D], k/v [T, Hkv, D] -> [T, Hq, D]."""
    # [1, H, T, D]: the fused (flash / memory-efficient / cuDNN) SDPA kernels need a batch dim;
    # 3-D inputs fall back to the math path.
    qh, kh, vh = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
    if qh.shape[1] != kh.shape[1]:
        try:
            out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, scale=scale, enable_gqa=True)
            return out[0].transpose(0, 1)
        except TypeError:  # torch < 2.5: no enable_gqa
            rep = qh.shape[1] // kh.shape[1]
            kh, vh = kh.repeat_interleave(rep, 1), vh.repeat_interleave(rep, 1)
    return F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, scale=scale)[0].transpose(0, 1)


@dataclass(frozen=True)
class MlaDims:
    heads: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


def mla_expand(
    c_kv: torch.Tensor, k_rope: torch.Tensor, w_kv_b: torch.Tensor, dims: MlaDims
) -> tuple[torch.Tensor, torch.Tensor]:
    """Latent -> per-head keys and values. c_kv [T, r], k_rope [T, dr], w_kv_b [H*(dn+dv), r]
    -> k [T, H, dn+dr], v [T, H, dv]."""
    t = c_kv.shape[0]
    kv = (c_kv @ w_kv_b.t()).view(t, dims.heads, dims.qk_nope_head_dim + dims.v_head_dim)
    k_nope, v = kv.split([dims.qk_nope_head_dim, dims.v_head_dim], dim=-1)
    k = torch.cat([k_nope, k_rope.unsqueeze(1).expand(t, dims.heads, dims.qk_rope_head_dim)], dim=-1)
    return k, v


def mla_prefill(
    q: torch.Tensor, c_kv: torch.Tensor, k_rope: torch.Tensor, w_kv_b: torch.Tensor, dims: MlaDims
) -> torch.Tensor:
    """MLA prefill of one layer: q [T, H, dn+dr] -> out [T, H, dv]."""
    k, v = mla_expand(c_kv, k_rope, w_kv_b, dims)
    scale = dims.qk_head_dim**-0.5
    if dims.v_head_dim == dims.qk_head_dim or not q.is_cuda:
        return gqa_prefill(q, k, v, scale)
    # Flash attention wants equal q/k and v head dims: pad v with zeros (as sglang does for FA).
    vp = F.pad(v, (0, dims.qk_head_dim - dims.v_head_dim))
    return gqa_prefill(q, k, vp, scale)[..., : dims.v_head_dim]
