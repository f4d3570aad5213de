"""GPU MoE compute of the layerwise path (and of GPU experts in the hybrid path): one MoE layer's
routed experts applied to a chunk of tokens, for bf16, fp8 and int4 weight-only experts.

Weights are in sglang's GPU layout: w13 [E, 2I, H] (gate rows then up rows, as stage A writes them),
w2 [E, H, I]. Each method has a fast GPU path and a torch path that runs anywhere (the CPU variant
tests use it):

- bf16: torch's grouped GEMM (`torch.nn.functional.grouped_mm` or `torch._grouped_mm`) where the build
  has it for the device, else a loop of per-expert matmuls.
- fp8: e4m3 weights with one fp32 scale per output channel, activations quantised per token;
  `torch._scaled_grouped_mm` where present, else per-expert `torch._scaled_mm` (row-wise), else
  dequantise and run bf16.
- int4: compressed-tensors int4 g32 repacked by stage C (`kernels.int4`), Triton w4a16 GEMM on CUDA,
  dequantise + per-expert matmul elsewhere.

`moe_reference` is the float64 oracle all of them are checked against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kttune.kernels import int4 as int4_fmt
from kttune.kernels.expert_weights import quantize_fp8_channel as quantize_fp8_per_channel
from kttune.kernels.routing import align_block_size, group_by_expert

def _combine(y_slots: torch.Tensor, topk_weights: torch.Tensor, tokens: int, top_k: int) -> torch.Tensor:
    """Weighted sum over each token's k expert outputs ([M*k, H] slot order -> [M, H] bf16)."""
    h = y_slots.shape[-1]
    return (y_slots.view(tokens, top_k, h).float() * topk_weights.float().unsqueeze(-1)).sum(1).to(torch.bfloat16)


def _silu_mul(h13: torch.Tensor) -> torch.Tensor:
    i = h13.shape[-1] // 2
    return (F.silu(h13[:, :i].float()) * h13[:, i:].float()).to(torch.bfloat16)


def moe_reference(
    x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor
) -> torch.Tensor:
    """Float64 MoE on dense (dequantised) weights: y = sum_j w_j * W2_e (silu(G_e x) * U_e x)."""
    x64 = x.double().cpu()
    w13 = w13.double().cpu()
    w2 = w2.double().cpu()
    ids = topk_ids.cpu()
    tw = topk_weights.double().cpu()
    m, k = ids.shape
    i = w13.shape[1] // 2
    y = torch.zeros(m, w2.shape[1], dtype=torch.float64)
    for j in range(k):
        for e in ids[:, j].unique().tolist():
            rows = (ids[:, j] == e).nonzero().flatten()
            h = x64[rows] @ w13[e].t()
            a = F.silu(h[:, :i]) * h[:, i:]
            y[rows] += tw[rows, j : j + 1] * (a @ w2[e].t())
    return y


# ---- bf16 -----------------------------------------------------------------------------------------

def _grouped_mm_fn():
    fn = getattr(F, "grouped_mm", None)
    if fn is None:
        fn = getattr(torch, "_grouped_mm", None)
    return fn


_GROUPED_OK: dict[str, bool] = {}


def grouped_mm_available(device: torch.device | str) -> bool:
    """Whether a torch grouped GEMM runs on `device` for bf16 (probed once per device type)."""
    dev = torch.device(device)
    key = str(dev.type)
    if key not in _GROUPED_OK:
        fn = _grouped_mm_fn()
        ok = False
        if fn is not None:
            try:
                a = torch.randn(32, 64, device=dev, dtype=torch.bfloat16)
                b = torch.randn(2, 128, 64, device=dev, dtype=torch.bfloat16)
                offs = torch.tensor([16, 32], device=dev, dtype=torch.int32)
                out = fn(a, b.transpose(-2, -1), offs=offs)
                ref = torch.cat([a[:16] @ b[0].t(), a[16:] @ b[1].t()])
                ok = bool(torch.allclose(out.float(), ref.float(), atol=1e-1, rtol=2e-2))
            except Exception:
                ok = False
        _GROUPED_OK[key] = ok
    return _GROUPED_OK[key]


def _experts_loop(a_sorted: torch.Tensor, counts: list[int], fn) -> torch.Tensor:
    outs = []
    start = 0
    for e, c in enumerate(counts):
        if c:
            outs.append(fn(e, a_sorted[start : start + c]))
        start += c
    return torch.cat(outs) if outs else a_sorted.new_zeros((0,))


def moe_bf16(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    use_grouped: bool | None = None,
) -> tuple[torch.Tensor, str]:
    """bf16 MoE. Returns (y [M, H] bf16, backend)."""
    m, k = topk_ids.shape
    E = w13.shape[0]
    g = group_by_expert(topk_ids, E)
    a = x.index_select(0, g.order // k)  # [M*k, H] sorted by expert
    if use_grouped is None:
        use_grouped = grouped_mm_available(x.device)
    if use_grouped:
        fn = _grouped_mm_fn()
        h13 = fn(a, w13.transpose(-2, -1), offs=g.offsets)
        y_sorted = fn(_silu_mul(h13), w2.transpose(-2, -1), offs=g.offsets)
        backend = "torch-grouped_mm"
    else:
        counts = g.counts.tolist()
        h13 = _experts_loop(a, counts, lambda e, t: t @ w13[e].t())
        y_sorted = _experts_loop(_silu_mul(h13), counts, lambda e, t: t @ w2[e].t())
        backend = "torch-loop"
    y_slots = torch.empty_like(y_sorted)
    y_slots[g.order] = y_sorted
    return _combine(y_slots, topk_weights, m, k), backend


# ---- fp8 (per output channel) ----------------------------------------------------------------------

@dataclass(frozen=True)
class Fp8Weights:
    w13: torch.Tensor  # float8_e4m3fn [E, 2I, H]
    s13: torch.Tensor  # float32 [E, 2I]
    w2: torch.Tensor  # float8_e4m3fn [E, H, I]
    s2: torch.Tensor  # float32 [E, H]

    def dequantize(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.w13.float() * self.s13.unsqueeze(-1), self.w2.float() * self.s2.unsqueeze(-1)


def quantize_fp8_weights(w13: torch.Tensor, w2: torch.Tensor) -> Fp8Weights:
    q13, s13 = quantize_fp8_per_channel(w13)
    q2, s2 = quantize_fp8_per_channel(w2)
    return Fp8Weights(q13, s13, q2, s2)


_quant_rows = quantize_fp8_per_channel  # activations: one scale per token row


_FP8_MODE: dict[str, str] = {}


def fp8_backend(device: torch.device | str) -> str:
    """Which fp8 GEMM runs on `device`: "scaled_grouped_mm", "scaled_mm" or "dequant"."""
    dev = torch.device(device)
    key = dev.type
    if key in _FP8_MODE:
        return _FP8_MODE[key]
    mode = "dequant"
    if dev.type == "cuda":
        a = torch.randn(32, 128, device=dev)
        b = torch.randn(2, 256, 128, device=dev)
        qa, sa = _quant_rows(a)
        qb, sb = quantize_fp8_per_channel(b)
        ref = torch.cat([(qa[:16].float() * sa[:16, None]) @ (qb[0].float() * sb[0, :, None]).t(),
                         (qa[16:].float() * sa[16:, None]) @ (qb[1].float() * sb[1, :, None]).t()])
        fn = getattr(torch, "_scaled_grouped_mm", None)
        if fn is not None:
            try:
                out = fn(qa, qb.transpose(-2, -1), sa, sb, offs=torch.tensor([16, 32], device=dev, dtype=torch.int32),
                         out_dtype=torch.bfloat16)
                if torch.allclose(out.float(), ref, rtol=3e-2, atol=3e-1):
                    mode = "scaled_grouped_mm"
            except Exception:
                pass
        if mode == "dequant":
            try:
                out = torch._scaled_mm(qa[:16], qb[0].t(), scale_a=sa[:16, None], scale_b=sb[0][None, :],
                                       out_dtype=torch.bfloat16)
                if torch.allclose(out.float(), ref[:16], rtol=3e-2, atol=3e-1):
                    mode = "scaled_mm"
            except Exception:
                pass
    _FP8_MODE[key] = mode
    return mode


def moe_fp8(
    x: torch.Tensor, w: Fp8Weights, topk_ids: torch.Tensor, topk_weights: torch.Tensor, mode: str | None = None
) -> tuple[torch.Tensor, str]:
    """fp8 MoE with per-token activation scales and per-channel weight scales. Returns (y, backend)."""
    m, k = topk_ids.shape
    E = w.w13.shape[0]
    g = group_by_expert(topk_ids, E)
    a = x.index_select(0, g.order // k)
    mode = mode or fp8_backend(x.device)
    counts = g.counts.tolist()
    if mode == "scaled_grouped_mm":
        qa, sa = _quant_rows(a)
        h13 = torch._scaled_grouped_mm(qa, w.w13.transpose(-2, -1), sa, w.s13, offs=g.offsets, out_dtype=torch.bfloat16)
        q2, s2 = _quant_rows(_silu_mul(h13))
        y_sorted = torch._scaled_grouped_mm(q2, w.w2.transpose(-2, -1), s2, w.s2, offs=g.offsets, out_dtype=torch.bfloat16)
    elif mode == "scaled_mm":
        def gemm(wq, ws):
            def f(e, t):
                qt, st = _quant_rows(t)
                return torch._scaled_mm(qt, wq[e].t(), scale_a=st[:, None], scale_b=ws[e][None, :], out_dtype=torch.bfloat16)
            return f
        h13 = _experts_loop(a, counts, gemm(w.w13, w.s13))
        y_sorted = _experts_loop(_silu_mul(h13), counts, gemm(w.w2, w.s2))
    else:
        def gemm(wq, ws):
            def f(e, t):
                qt, st = _quant_rows(t)
                return ((qt.float() * st[:, None]) @ (wq[e].float() * ws[e][:, None]).t()).to(torch.bfloat16)
            return f
        h13 = _experts_loop(a, counts, gemm(w.w13, w.s13))
        y_sorted = _experts_loop(_silu_mul(h13), counts, gemm(w.w2, w.s2))
    y_slots = torch.empty_like(y_sorted)
    y_slots[g.order] = y_sorted
    return _combine(y_slots, topk_weights, m, k), f"torch-{mode}"


# ---- int4 weight-only ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Int4Weights:
    """Repacked int4 g32 experts (stage C output): q [E, K/8, N] int32, s [E, K/32, N] bf16."""

    w13q: torch.Tensor  # [E, H/8, 2I]
    w13s: torch.Tensor  # [E, H/32, 2I]
    w2q: torch.Tensor  # [E, I/8, H]
    w2s: torch.Tensor  # [E, I/32, H]

    def dequantize(self) -> tuple[torch.Tensor, torch.Tensor]:
        w13 = torch.stack([int4_fmt.dequantize_repacked(q, s) for q, s in zip(self.w13q, self.w13s)])
        w2 = torch.stack([int4_fmt.dequantize_repacked(q, s) for q, s in zip(self.w2q, self.w2s)])
        return w13, w2


def quantize_int4_weights(w13: torch.Tensor, w2: torch.Tensor) -> Int4Weights:
    """Dense [E, 2I, H] / [E, H, I] -> compressed-tensors int4 -> repacked (torch reference repack)."""
    def one(w):
        qs, ss = [], []
        for we in w:
            p, s = int4_fmt.quantize_int4_g32(we)
            q, s = int4_fmt.repack_int4_reference(p, s)
            qs.append(q)
            ss.append(s)
        return torch.stack(qs), torch.stack(ss)

    w13q, w13s = one(w13)
    w2q, w2s = one(w2)
    return Int4Weights(w13q, w13s, w2q, w2s)


def moe_int4(
    x: torch.Tensor, w: Int4Weights, topk_ids: torch.Tensor, topk_weights: torch.Tensor, use_triton: bool | None = None
) -> tuple[torch.Tensor, str]:
    """int4 weight-only MoE (bf16 activations). Triton on CUDA; dequantise + loop elsewhere."""
    from kttune.kernels import triton_int4

    m, k = topk_ids.shape
    E = w.w13q.shape[0]
    if use_triton is None:
        use_triton = triton_int4.available(x.device.type)
    if use_triton:
        bm = triton_int4.pick_block_m(m * k / E)
        sorted_ids, block_expert, n = align_block_size(topk_ids, E, bm)
        h13 = triton_int4.int4_moe_gemm(x, w.w13q, w.w13s, sorted_ids, block_expert, n, k, bm)
        y_slots = triton_int4.int4_moe_gemm(_silu_mul(h13), w.w2q, w.w2s, sorted_ids, block_expert, n, 1, bm)
        if x.device.type == "cpu":
            return _combine(y_slots, topk_weights, m, k), "triton-w4a16 (interpreter)"
        return _combine(y_slots, topk_weights, m, k), "triton-w4a16"
    g = group_by_expert(topk_ids, E)
    a = x.index_select(0, g.order // k)
    counts = g.counts.tolist()

    def gemm(qs, ss):
        return lambda e, t: (t.float() @ int4_fmt.dequantize_repacked(qs[e], ss[e]).t()).to(torch.bfloat16)

    h13 = _experts_loop(a, counts, gemm(w.w13q, w.w13s))
    y_sorted = _experts_loop(_silu_mul(h13), counts, gemm(w.w2q, w.w2s))
    y_slots = torch.empty_like(y_sorted)
    y_slots[g.order] = y_sorted
    return _combine(y_slots, topk_weights, m, k), "torch-dequant-loop"
