"""The non-expert parts of one MoE decoder layer, as sglang runs them in prefill, on any torch device:
RMSNorm, rotary embedding, attention of the model's kind, the router, and shared-expert / dense
SwiGLU MLPs. Random weights at the model's real shapes; bf16 compute.

- GQA (Qwen3, GLM, MiniMax): q/k/v projections, the model's q/k RMSNorm (`ModelSpec.qk_norm`: on
  each head for Qwen3 and GLM-4.5+, over the rank's heads at once for MiniMax-M2), rotary embedding,
  causal SDPA over the cached prefix plus the chunk, Qwen3-Next's sigmoid output gate (projected
  with q), o projection.
- MLA (DeepSeek-V3, Kimi-K2): q through the q_lora bottleneck (q_a, norm, q_b) or q_proj; the latent
  `kv_a_proj_with_mqa` -> (c_kv, k_rope), c_kv normalised and cached with the roped k_rope; prefill
  ("non-absorbed") attention expands the cache with `kv_b_proj` (`kttune.kernels.attention`), o proj.
- sliding layers see at most `window` cached tokens; linear-attention layers (Qwen3-Next Gated
  DeltaNet) run their projections only (the recurrence is not run, and the cost model predicts the
  runner's forwards without it: docs/cost-model.md#linear-attention-layers).
- router (`ModelSpec.router`): softmax top-k (renormalised where the model says so) or sigmoid
  scores with bias correction and grouped top-k (DeepSeek-V3 `noaux_tc`: groups ranked by their
  top-2 sum).

The prefix cache is kept per layer by the caller (`AttnCache`). Everything here is shape-faithful;
values are random (the path runner times it and checks the MoE sums, not model quality).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from kttune.kernels import triton_norm_rope
from kttune.kernels.attention import MlaDims, gqa_prefill, mla_expand
from kttune.kernels.attention_shape import AttentionShape
from kttune.spec.model_spec import RouterSpec  # the model's router, read from config.json by kttune.spec

# ---- router --------------------------------------------------------------------------------------


def route(
    logits: torch.Tensor, spec: RouterSpec, top_k: int, bias: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits [T, E] -> (ids int64 [T, k], weights fp32 [T, k])."""
    lg = logits.float()
    if spec.scoring == "softmax":
        scores = lg.softmax(-1)
        choice = scores
    else:  # sigmoid, or DeepSeek-V4's sqrt(softplus) (deepseek_v4_topk.py)
        scores = lg.sigmoid() if spec.scoring == "sigmoid" else torch.nn.functional.softplus(lg).sqrt()
        choice = scores + bias.float() if (spec.bias and bias is not None) else scores
    if spec.n_group > 1:
        t, e = choice.shape
        g = choice.view(t, spec.n_group, e // spec.n_group)
        group_score = g.topk(min(2, g.shape[-1]), dim=-1).values.sum(-1)
        keep = group_score.topk(spec.topk_group, dim=-1).indices
        mask = torch.zeros_like(group_score, dtype=torch.bool).scatter_(1, keep, True)
        choice = choice.masked_fill(~mask.repeat_interleave(e // spec.n_group, dim=1), float("-inf"))
    ids = choice.topk(top_k, dim=-1).indices
    w = scores.gather(1, ids)
    if spec.renormalize:
        w = w / w.sum(-1, keepdim=True).clamp_min(1e-20)
    return ids.to(torch.int64).contiguous(), w.contiguous()


# ---- small ops -----------------------------------------------------------------------------------


# Elementwise ops run in row pieces of at most this many elements, so their fp32 temporaries stay
# small: SGLang's fused RMSNorm and rotary kernels keep none (docs/path-runner.md#memory).
PIECE_ELEMENTS = 1 << 22
# On CUDA, RMSNorm and the rotary embedding run as one Triton launch each (sglang's fused kernels do;
# the piecewise torch ops made the attention block host-bound, `kttune.kernels.triton_norm_rope`).
# False runs the torch ops there too (benchmarks/bench_attention_block.py --compare-eager).
TRITON_ELEMENTWISE = True


def fused_elementwise(device: torch.device) -> bool:
    """Whether RMSNorm and rotary run as Triton launches on `device` (CUDA, Triton there, and
    `TRITON_ELEMENTWISE`) rather than as the piecewise torch ops."""
    return TRITON_ELEMENTWISE and device.type == "cuda" and triton_norm_rope.available()


def _row_pieces(rows: int, width: int):
    step = max(1, PIECE_ELEMENTS // max(1, width))
    for r0 in range(0, rows, step):
        yield r0, min(rows, r0 + step)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim, computed in fp32 into a new tensor of x's dtype: on CUDA one Triton
    launch (`kttune.kernels.triton_norm_rope`), elsewhere torch ops piece by piece."""
    if fused_elementwise(x.device):
        return triton_norm_rope.rms_norm(x, w, eps)
    d = x.shape[-1]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    xs, os_ = x.reshape(-1, d), out.view(-1, d)
    wf = w.float()
    for r0, r1 in _row_pieces(xs.shape[0], d):
        xf = xs[r0:r1].float()
        os_[r0:r1] = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * wf
    return out


def rope_(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """Rotary embedding (neox half-split) of x [T, heads, d] at `positions` [T], in place (x may be a
    view, e.g. the rope part of MLA's query); returns x. On CUDA one Triton launch
    (`kttune.kernels.triton_norm_rope`), elsewhere torch ops piece by piece."""
    if fused_elementwise(x.device):
        return triton_norm_rope.rope_(x, positions, theta)
    t, heads, d = x.shape
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    for r0, r1 in _row_pieces(t, heads * d):
        ang = positions[r0:r1].float().unsqueeze(1) * inv.unsqueeze(0)  # [r, d/2]
        cos, sin = ang.cos().unsqueeze(1), ang.sin().unsqueeze(1)
        xf = x[r0:r1].float()
        x1, x2 = xf[..., : d // 2], xf[..., d // 2 :]
        x[r0:r1] = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return x


def swiglu_mlp(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """Dense SwiGLU: w13 [2S, H] (gate rows then up rows), w2 [H, S]. Holds what SGLang's does: gate/up
    [T, 2S], the activated [T, S], the output [T, H]."""
    h = x @ w13.t()
    s = w13.shape[0] // 2
    gate = h[:, :s]
    F.silu(gate, inplace=True)
    return torch.mul(gate, h[:, s:]) @ w2.t()


def _w(shape: tuple[int, ...], g: torch.Generator, device, dtype=torch.bfloat16) -> torch.Tensor:
    return (torch.randn(shape, generator=g) / math.sqrt(shape[-1])).to(dtype).to(device)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """q [T, Hq, D] attends causally to k/v [P+T, Hkv, D] whose last T rows are q's own tokens. Grouped
    KV heads are read as they are (SDPA's enable_gqa; the lower-right causal mask dispatches to flash
    attention on CUDA), not copied to every query head; builds without it copy them."""
    t, p_t = q.shape[0], k.shape[0]
    if p_t == t:
        return gqa_prefill(q, k, v, scale)
    from torch.nn.attention.bias import causal_lower_right

    qh, kh, vh = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))
    mask = causal_lower_right(t, p_t)
    if qh.shape[1] != kh.shape[1]:
        try:
            out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, scale=scale, enable_gqa=True)
            return out[0].transpose(0, 1)
        except (TypeError, RuntimeError):
            rep = qh.shape[1] // kh.shape[1]
            kh, vh = kh.repeat_interleave(rep, 1), vh.repeat_interleave(rep, 1)
    out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, scale=scale)
    return out[0].transpose(0, 1)


# ---- attention -----------------------------------------------------------------------------------


@dataclass
class AttnCache:
    """One layer's prefix: GQA k/v [P, Hkv, D]; MLA normalised c_kv [P, r] and roped k_rope [P, dr].
    With a `capacity` (the prompt's length) the rows live in buffers allocated once, as SGLang's KV
    pool holds them; without one (or with a sliding window) each chunk's rows are concatenated."""

    a: torch.Tensor | None = None
    b: torch.Tensor | None = None
    capacity: int = 0
    _a: torch.Tensor | None = None
    _b: torch.Tensor | None = None

    def extend(self, a: torch.Tensor, b: torch.Tensor, window: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        used = 0 if self.a is None else self.a.shape[0]
        if self.capacity and not window and used + a.shape[0] <= self.capacity:
            if self._a is None:
                self._a = torch.empty((self.capacity,) + tuple(a.shape[1:]), dtype=a.dtype, device=a.device)
                self._b = torch.empty((self.capacity,) + tuple(b.shape[1:]), dtype=b.dtype, device=b.device)
            n = used + a.shape[0]
            self._a[used:n] = a
            self._b[used:n] = b
            self.a, self.b = self._a[:n], self._b[:n]
            return self.a, self.b
        self.a = a if self.a is None else torch.cat([self.a, a])
        self.b = b if self.b is None else torch.cat([self.b, b])
        if window and self.a.shape[0] > window + a.shape[0]:
            self.a, self.b = self.a[-(window + a.shape[0]) :], self.b[-(window + a.shape[0]) :]
        return self.a, self.b

    @property
    def nbytes(self) -> int:
        if self._a is not None:
            return sum(t.numel() * t.element_size() for t in (self._a, self._b))
        return sum(t.numel() * t.element_size() for t in (self.a, self.b) if t is not None)


def _rows(w: torch.Tensor, parts: int, r: int) -> torch.Tensor:
    n = w.shape[0] // parts
    return w[r * n : (r + 1) * n].contiguous()


def _cols(w: torch.Tensor, parts: int, r: int) -> torch.Tensor:
    n = w.shape[1] // parts
    return w[:, r * n : (r + 1) * n].contiguous()


class Attention:
    """One layer's attention block with random weights on `device`. Under TP (`tp` ranks, this one
    `rank`) the weights are the rank's slices of the same full weights: heads/tp query heads (and KV
    heads, replicated where there are fewer than tp), the o projection's matching input columns."""

    def __init__(self, s: AttentionShape, device, seed: int = 0, tp: int = 1, rank: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.s, self.tp = s, tp
        self.heads = s.heads // tp
        h = s.hidden
        cpu = "cpu"
        self.w: dict[str, torch.Tensor] = {}
        if s.kind == "mla":
            dr, dn, dv = s.rope_dim, s.head_dim - s.rope_dim, s.v_head_dim
            self.dims = MlaDims(self.heads, s.kv_lora_rank, dn, dr, dv)
            if s.q_lora_rank:
                self.w["q_a"] = _w((s.q_lora_rank, h), g, cpu)
                self.w["q_a_norm"] = torch.ones(s.q_lora_rank, dtype=torch.bfloat16)
                self.w["q_b"] = _rows(_w((s.heads * s.head_dim, s.q_lora_rank), g, cpu), tp, rank)
            else:
                self.w["q"] = _rows(_w((s.heads * s.head_dim, h), g, cpu), tp, rank)
            self.w["kv_a"] = _w((s.kv_lora_rank + dr, h), g, cpu)
            self.w["kv_a_norm"] = torch.ones(s.kv_lora_rank, dtype=torch.bfloat16)
            self.w["kv_b"] = _rows(_w((s.heads * (dn + dv), s.kv_lora_rank), g, cpu), tp, rank)
            self.w["o"] = _cols(_w((h, s.heads * dv), g, cpu), tp, rank)
        else:
            kv_parts = min(tp, s.kv_heads)
            kv_rank = rank * kv_parts // tp
            self.kv_heads = s.kv_heads // kv_parts
            if s.output_gate and s.v_head_dim != s.head_dim:
                raise ValueError(f"an output gate of head dim {s.head_dim} on values of head dim {s.v_head_dim}")
            # with an output gate each head's rows are its q then its gate (sglang qwen3_next.py)
            self.w["q"] = _rows(_w((s.heads * s.head_dim * (2 if s.output_gate else 1), h), g, cpu), tp, rank)
            self.w["k"] = _rows(_w((s.kv_heads * s.head_dim, h), g, cpu), kv_parts, kv_rank)
            self.w["v"] = _rows(_w((s.kv_heads * s.v_head_dim, h), g, cpu), kv_parts, kv_rank)
            self.w["o"] = _cols(_w((h, s.heads * s.v_head_dim), g, cpu), tp, rank)
            if s.qk_norm == "per_layer":  # one norm over the rank's heads (MiniMax-M2; sglang reduces it over ranks)
                self.w["q_norm"] = torch.ones(self.heads * s.head_dim, dtype=torch.bfloat16)
                self.w["k_norm"] = torch.ones(self.kv_heads * s.head_dim, dtype=torch.bfloat16)
            elif s.qk_norm:
                self.w["q_norm"] = torch.ones(s.head_dim, dtype=torch.bfloat16)
                self.w["k_norm"] = torch.ones(s.head_dim, dtype=torch.bfloat16)
        self.w = {k: v.to(device) for k, v in self.w.items()}

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.w.values())

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: AttnCache) -> torch.Tensor:
        """x [T, H] (normed) -> this rank's partial o-projection output [T, H] (sum over ranks = full)."""
        s, w, t = self.s, self.w, x.shape[0]
        if s.kind == "mla":
            d = self.dims
            q = rms_norm(x @ w["q_a"].t(), w["q_a_norm"]) @ w["q_b"].t() if "q_a" in w else x @ w["q"].t()
            q = q.view(t, d.heads, d.qk_head_dim)
            rope_(q[..., d.qk_nope_head_dim :], positions)
            kv = x @ w["kv_a"].t()
            c = rms_norm(kv[:, : d.kv_lora_rank], w["kv_a_norm"])
            kr = rope_(kv[:, d.kv_lora_rank :].unsqueeze(1), positions)[:, 0]
            c_all, kr_all = cache.extend(c, kr, s.window if s.layer_kind == "sliding" else 0)
            k, v = mla_expand(c_all, kr_all, w["kv_b"], d)
            if x.is_cuda and d.v_head_dim != d.qk_head_dim:
                o = causal_attention(q, k, F.pad(v, (0, d.qk_head_dim - d.v_head_dim)), d.qk_head_dim**-0.5)[
                    ..., : d.v_head_dim
                ]
            else:
                o = causal_attention(q, k, v, d.qk_head_dim**-0.5)
            return o.reshape(t, -1) @ w["o"].t()
        if s.output_gate:
            qg = (x @ w["q"].t()).view(t, self.heads, 2 * s.head_dim)
            q, gate = qg[..., : s.head_dim], qg[..., s.head_dim :]
        else:
            q = (x @ w["q"].t()).view(t, self.heads, s.head_dim)
        k = (x @ w["k"].t()).view(t, self.kv_heads, s.head_dim)
        v = (x @ w["v"].t()).view(t, self.kv_heads, s.v_head_dim)
        if s.layer_kind == "linear":  # projections only (see the module docstring)
            return v.repeat_interleave(self.heads // self.kv_heads, 1).reshape(t, -1) @ w["o"].t()
        if s.qk_norm == "per_layer":
            q = rms_norm(q.reshape(t, -1), w["q_norm"]).view(t, self.heads, s.head_dim)
            k = rms_norm(k.reshape(t, -1), w["k_norm"]).view(t, self.kv_heads, s.head_dim)
        elif s.qk_norm:
            q, k = rms_norm(q, w["q_norm"]), rms_norm(k, w["k_norm"])
        q, k = rope_(q, positions), rope_(k, positions)
        k_all, v_all = cache.extend(k, v, s.window if s.layer_kind == "sliding" else 0)
        o = causal_attention(q, k_all, v_all, s.head_dim**-0.5)
        if s.output_gate:
            o = o * torch.sigmoid(gate)
        return o.reshape(t, -1) @ w["o"].t()


# ---- the rest of the layer ---------------------------------------------------------------------------


@dataclass
class LayerWeights:
    """Norms, router (gate, optional bias) and the shared experts of one MoE layer, on `device`.
    Shared experts are sharded I/tp like every MLP under TP."""

    input_norm: torch.Tensor
    post_norm: torch.Tensor
    gate: torch.Tensor  # router [E, H] (replicated)
    bias: torch.Tensor | None
    shared_w13: torch.Tensor | None = None  # [2S/tp, H]
    shared_w2: torch.Tensor | None = None  # [H, S/tp]
    extra: dict = field(default_factory=dict)

    @classmethod
    def random(
        cls,
        hidden: int,
        experts: int,
        shared_inter: int,
        router: RouterSpec,
        device,
        seed: int = 0,
        tp: int = 1,
        rank: int = 0,
    ) -> "LayerWeights":
        g = torch.Generator().manual_seed(seed + 17)
        ones = torch.ones(hidden, dtype=torch.bfloat16, device=device)
        bias = (torch.rand(experts, generator=g) * 0.1).to(device) if router.bias else None
        w13 = w2 = None
        if shared_inter:  # gate and up rows, and down columns, of the rank's I/tp share
            full13, full2 = _w((2 * shared_inter, hidden), g, "cpu"), _w((hidden, shared_inter), g, "cpu")
            w13 = torch.cat([_rows(full13[:shared_inter], tp, rank), _rows(full13[shared_inter:], tp, rank)]).to(device)
            w2 = _cols(full2, tp, rank).to(device)
        return cls(ones, ones.clone(), _w((experts, hidden), g, device), bias, w13, w2)

    @property
    def nbytes(self) -> int:
        ts = [self.input_norm, self.post_norm, self.gate, self.bias, self.shared_w13, self.shared_w2]
        return sum(t.numel() * t.element_size() for t in ts if t is not None)


# ---- the attention block -------------------------------------------------------------------------


def attention_block(
    attn: Attention,
    w: LayerWeights,
    x: torch.Tensor,
    positions: torch.Tensor,
    cache: AttnCache,
    router: RouterSpec,
    top_k: int,
    all_reduce=None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The part of one MoE decoder layer before its experts, as the path runner runs it and the
    attention-block probe times it: input RMSNorm, attention over the cached prefix plus the chunk,
    o projection (TP: `all_reduce` sums the ranks' partial outputs), residual added into `x` in place,
    post-attention RMSNorm, router. Returns (normed hidden states h, expert ids, routing weights)."""
    a = attn.forward(rms_norm(x, w.input_norm), positions, cache)
    x.add_(all_reduce(a) if all_reduce is not None else a)
    del a
    h = rms_norm(x, w.post_norm)
    ids, rw = route(h @ w.gate.t(), router, top_k, w.bias)
    return h, ids, rw
