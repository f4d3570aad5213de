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
  dequantise + per-expert matmul elsewhere. MXFP4 runs the same way with the e2m1 decode (its bytes
  and groups are int4 g32's, `kernels.int4`).

`moe_reference` is the float64 oracle all of them are checked against.

Memory follows SGLang's fused MoE (docs/memory.md#activations-by-phase), so that the path runner's measured
peaks stand for a server's: the tokens run in pieces of at most `FUSED_MOE_CHUNK_TOKENS`; per piece
one cache of M*k*max(2I, H) bf16 holds gate/up and, once that is consumed, the expert outputs; a
second cache of M*k*I holds the activated intermediate; the output [T, H] bf16 is written once. The
only extra is what torch's grouped GEMMs cannot avoid, a gathered input and a GEMM output for one
run of experts at a time (`piece_rows` rows at most; `fused_layout_transient_bytes`).
Slots whose expert id is negative are skipped (their output is zero): the hybrid path's GPU share
masks the experts the CPU runs this way, as sglang's expert map does.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import Callable

import torch
import torch.nn.functional as F

from kttune.kernels import int4 as int4_fmt
from kttune.kernels.expert_weights import quantize_fp8_channel as quantize_fp8_per_channel
from kttune.kernels.routing import align_block_size

# SGLang's fused MoE sizes its caches for at most this many tokens at a time (fused_moe.py CHUNK_SIZE).
FUSED_MOE_CHUNK_TOKENS = 64 * 1024
# Torch's grouped GEMM writes a fresh output: run the experts in runs of at most this share of the
# piece's slots (and at least PIECE_MIN_ROWS), so the gathered input and that output stay small.
PIECE_SHARE = 32
PIECE_MIN_ROWS = 4096


def piece_rows(slots: int) -> int:
    """Rows of one expert run (one grouped GEMM call) for a piece of `slots` token slots."""
    return max(PIECE_MIN_ROWS, -(-slots // PIECE_SHARE))


def fused_layout_transient_bytes(tokens: int, top_k: int, hidden: int, inter: int, fp8: bool = False) -> int:
    """Upper bound of what the driver holds beyond SGLang's caches, at the larger of its two moments
    in one expert run of R = `piece_rows` slots (bf16 unless noted):

    - the first GEMM: the gathered input [R, H] and the GEMM output [R, 2I]; fp8 adds the quantised
      input [R, H] (1 byte) and its per-row scales;
    - fp8 only, the activation quantisation (`quantize_fp8_channel`): the gathered input and two
      fp32 copies of it alive at once [R, H] x 4 bytes each, before the fp8 result exists.

    An expert with more slots than R runs alone, so R is exceeded only by one expert's own rows; the
    runner's random routing spreads slots evenly (M*k/E each), well below R."""
    m = min(tokens, FUSED_MOE_CHUNK_TOKENS)
    r = min(m * top_k, piece_rows(m * top_k))
    gemm = r * (hidden + 2 * inter) * 2 + (r * (hidden + 4) if fp8 else 0)
    quant = r * hidden * (2 + 4 + 4) if fp8 else 0
    return max(gemm, quant)


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


# ---- the fused layout: SGLang's buffers, torch's GEMMs ------------------------------------------

# One expert run's GEMM: (rows of the run's slots [r, K] bf16, first expert, end expert, the run's
# per-expert slot counts) -> [r, N] bf16.
GemmRun = Callable[[torch.Tensor, int, int, list[int]], torch.Tensor]


def expert_runs(counts: list[int], limit: int) -> list[tuple[int, int, int, int]]:
    """Consecutive experts grouped into runs of at most `limit` slots (an expert with more runs
    alone): (first expert, end expert, first row, end row) in the expert-sorted slot order."""
    runs, e0, r0, rows = [], 0, 0, 0
    for e, c in enumerate(counts):
        if rows and rows + c > limit:
            runs.append((e0, e, r0, r0 + rows))
            e0, r0, rows = e, r0 + rows, 0
        rows += c
    if rows:
        runs.append((e0, len(counts), r0, r0 + rows))
    return runs


def local_offsets(counts: list[int], device) -> torch.Tensor:
    """Cumulative end offsets of one run's experts (torch grouped GEMMs' `offs`), int32."""
    return torch.tensor(list(accumulate(counts)), dtype=torch.int32, device=device)


@dataclass(frozen=True)
class _Slots:
    """One piece's token slots: `key` the expert id per slot with masked slots (id < 0) as the extra
    expert E, `order` the slots sorted by key (stable; masked last), `counts` per real expert (host),
    `valid` the unmasked slots."""

    key: torch.Tensor
    order: torch.Tensor
    counts: list[int]
    valid: int


def _sort_slots(ids: torch.Tensor, experts: int) -> _Slots:
    key = torch.where(ids < 0, torch.full_like(ids, experts), ids)
    counts = torch.bincount(key.reshape(-1), minlength=experts + 1).tolist()
    return _Slots(key, torch.argsort(key.reshape(-1), stable=True), counts[:experts], ids.numel() - counts[experts])


def _token_pieces(tokens: int):
    """SGLang's fused-MoE chunking: (first, end) token of each piece of at most FUSED_MOE_CHUNK_TOKENS."""
    for t0 in range(0, tokens, FUSED_MOE_CHUNK_TOKENS):
        yield t0, min(tokens, t0 + FUSED_MOE_CHUNK_TOKENS)


def _piece_caches(slots: int, hidden: int, inter: int, device, dtype=torch.bfloat16):
    """SGLang's caches for a piece of `slots` token slots: (the shared cache, its gate/up view
    [slots, 2I], the activated cache [slots, I] bf16). The shared cache later holds the expert
    outputs as `_outputs_view`."""
    cache = torch.empty(slots * max(2 * inter, hidden), dtype=dtype, device=device)
    return (
        cache,
        cache[: slots * 2 * inter].view(slots, 2 * inter),
        torch.empty(slots, inter, dtype=torch.bfloat16, device=device),
    )


def _outputs_view(cache: torch.Tensor, slots: int, hidden: int) -> torch.Tensor:
    """The expert outputs [slots, H] in the shared cache (gate/up is consumed by then)."""
    return cache[: slots * hidden].view(slots, hidden)


def _activate(c1: torch.Tensor, c2: torch.Tensor, inter: int, rows: int) -> None:
    """SiluAndMul of the first `rows` gate/up rows into the activated cache, in place (no temporaries)."""
    gate = c1[:rows, :inter]
    F.silu(gate, inplace=True)
    torch.mul(gate, c1[:rows, inter:], out=c2[:rows])


def _finish(
    y: torch.Tensor, order: torch.Tensor, valid: int, weights: torch.Tensor, out: torch.Tensor, top_k: int
) -> None:
    """y [M*k, H] in slot order -> out [M, H] = sum_j w_j y_(t, j) (sglang's moe_sum: bf16 products,
    the k-way sum accumulated in fp32 by the reduction); masked slots count zero."""
    if valid < y.shape[0]:
        y.index_fill_(0, order[valid:], 0)
    y.mul_(weights.reshape(-1, 1).to(y.dtype))
    yk = y.view(out.shape[0], top_k, y.shape[1])
    if y.dtype == out.dtype:
        torch.sum(yk, dim=1, out=out)
    else:  # the Triton interpreter's fp32 outputs
        out.copy_(yk.sum(1))


def fused_layout_moe(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    experts: int,
    inter: int,
    gemm1: GemmRun,
    gemm2: GemmRun,
) -> torch.Tensor:
    """The MoE of x [T, H] over `experts` experts of intermediate size `inter` (gate/up [2I, H], down
    [H, I]) with SGLang's buffers (module docstring), the GEMMs by expert run. Returns bf16 [T, H]."""
    t_all, h = x.shape
    k = topk_ids.shape[1]
    out = torch.empty(t_all, h, dtype=torch.bfloat16, device=x.device)
    for t0, t1 in _token_pieces(t_all):
        mk = (t1 - t0) * k
        sl = _sort_slots(topk_ids[t0:t1], experts)
        cache, c1, c2 = _piece_caches(mk, h, inter, x.device)  # c1: gate/up in expert-sorted rows
        tok = sl.order // k
        xs = x[t0:t1]
        runs = expert_runs(sl.counts, piece_rows(mk))
        for e0, e1, r0, r1 in runs:
            c1[r0:r1] = gemm1(xs.index_select(0, tok[r0:r1]), e0, e1, sl.counts[e0:e1])
        _activate(c1, c2, inter, sl.valid)
        y = _outputs_view(cache, mk, h)  # now in slot order
        for e0, e1, r0, r1 in runs:
            y.index_copy_(0, sl.order[r0:r1], gemm2(c2[r0:r1], e0, e1, sl.counts[e0:e1]))
        _finish(y, sl.order, sl.valid, topk_weights[t0:t1], out[t0:t1], k)
    return out


def _loop(fn: Callable[[int, torch.Tensor], torch.Tensor]) -> GemmRun:
    """A GemmRun from a per-expert GEMM (fn(expert, rows) -> out), for builds without grouped GEMMs."""

    def run(a: torch.Tensor, e0: int, e1: int, counts: list[int]) -> torch.Tensor:
        outs, start = [], 0
        for e, c in zip(range(e0, e1), counts):
            if c:
                outs.append(fn(e, a[start : start + c]))
            start += c
        return torch.cat(outs)

    return run


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


def moe_bf16(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    use_grouped: bool | None = None,
) -> tuple[torch.Tensor, str]:
    """bf16 MoE. Returns (y [M, H] bf16, backend)."""
    if use_grouped is None:
        use_grouped = grouped_mm_available(x.device)
    if use_grouped:
        fn = _grouped_mm_fn()

        def grouped(w):
            return lambda a, e0, e1, counts: fn(a, w[e0:e1].transpose(-2, -1), offs=local_offsets(counts, a.device))

        g1, g2, backend = grouped(w13), grouped(w2), "torch-grouped_mm"
    else:
        g1, g2, backend = _loop(lambda e, t: t @ w13[e].t()), _loop(lambda e, t: t @ w2[e].t()), "torch-loop"
    return fused_layout_moe(x, topk_ids, topk_weights, w13.shape[0], w2.shape[2], g1, g2), backend


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
        ref = torch.cat(
            [
                (qa[:16].float() * sa[:16, None]) @ (qb[0].float() * sb[0, :, None]).t(),
                (qa[16:].float() * sa[16:, None]) @ (qb[1].float() * sb[1, :, None]).t(),
            ]
        )
        fn = getattr(torch, "_scaled_grouped_mm", None)
        if fn is not None:
            try:
                out = fn(
                    qa,
                    qb.transpose(-2, -1),
                    sa,
                    sb,
                    offs=torch.tensor([16, 32], device=dev, dtype=torch.int32),
                    out_dtype=torch.bfloat16,
                )
                if torch.allclose(out.float(), ref, rtol=3e-2, atol=3e-1):
                    mode = "scaled_grouped_mm"
            except Exception:
                pass
        if mode == "dequant":
            try:
                out = torch._scaled_mm(
                    qa[:16], qb[0].t(), scale_a=sa[:16, None], scale_b=sb[0][None, :], out_dtype=torch.bfloat16
                )
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
    mode = mode or fp8_backend(x.device)
    if mode == "scaled_grouped_mm":

        def grouped(wq, ws):
            def run(a, e0, e1, counts):
                qa, sa = _quant_rows(a)
                return torch._scaled_grouped_mm(
                    qa,
                    wq[e0:e1].transpose(-2, -1),
                    sa,
                    ws[e0:e1],
                    offs=local_offsets(counts, a.device),
                    out_dtype=torch.bfloat16,
                )

            return run

        g1, g2 = grouped(w.w13, w.s13), grouped(w.w2, w.s2)
    elif mode == "scaled_mm":

        def per_expert(wq, ws):
            def f(e, t):
                qt, st = _quant_rows(t)
                return torch._scaled_mm(
                    qt, wq[e].t(), scale_a=st[:, None], scale_b=ws[e][None, :], out_dtype=torch.bfloat16
                )

            return _loop(f)

        g1, g2 = per_expert(w.w13, w.s13), per_expert(w.w2, w.s2)
    else:

        def dequant(wq, ws):
            def f(e, t):
                qt, st = _quant_rows(t)
                return ((qt.float() * st[:, None]) @ (wq[e].float() * ws[e][:, None]).t()).to(torch.bfloat16)

            return _loop(f)

        g1, g2 = dequant(w.w13, w.s13), dequant(w.w2, w.s2)
    return fused_layout_moe(x, topk_ids, topk_weights, w.w13.shape[0], w.w2.shape[2], g1, g2), f"torch-{mode}"


# ---- int4 weight-only ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Int4Weights:
    """Repacked 4-bit g32 experts (stage C output): q [E, K/8, N] int32, s [E, K/32, N] bf16; `codes`
    says what a nibble means ("int4" for RAWINT4, "e2m1" for MXFP4)."""

    w13q: torch.Tensor  # [E, H/8, 2I]
    w13s: torch.Tensor  # [E, H/32, 2I]
    w2q: torch.Tensor  # [E, I/8, H]
    w2s: torch.Tensor  # [E, I/32, H]
    codes: str = "int4"

    def dequantize(self) -> tuple[torch.Tensor, torch.Tensor]:
        deq = int4_fmt.dequantize_repacked
        w13 = torch.stack([deq(q, s, codes=self.codes) for q, s in zip(self.w13q, self.w13s)])
        w2 = torch.stack([deq(q, s, codes=self.codes) for q, s in zip(self.w2q, self.w2s)])
        return w13, w2


def quantize_int4_weights(w13: torch.Tensor, w2: torch.Tensor, codes: str = "int4") -> Int4Weights:
    """Dense [E, 2I, H] / [E, H, I] -> compressed-tensors int4 (or MXFP4, `codes` "e2m1") -> repacked
    (torch reference repack)."""
    from kttune.kernels import mx

    def quant(we):
        if codes == "e2m1":
            p, s = mx.quantize_mxfp4(we)
            return int4_fmt.mxfp4_words(p), s
        return int4_fmt.quantize_int4_g32(we)

    def one(w):
        qs, ss = [], []
        for we in w:
            q, s = int4_fmt.repack_int4_reference(*quant(we))
            qs.append(q)
            ss.append(s)
        return torch.stack(qs), torch.stack(ss)

    w13q, w13s = one(w13)
    w2q, w2s = one(w2)
    return Int4Weights(w13q, w13s, w2q, w2s, codes)


def moe_int4(
    x: torch.Tensor, w: Int4Weights, topk_ids: torch.Tensor, topk_weights: torch.Tensor, use_triton: bool | None = None
) -> tuple[torch.Tensor, str]:
    """4-bit weight-only MoE (bf16 activations; int4 or e2m1 codes, `w.codes`). Triton on CUDA (it reads
    rows through the sorted slot ids and writes slot rows into SGLang's caches, no gather); dequantise +
    loop elsewhere."""
    from kttune.kernels import triton_int4

    E = w.w13q.shape[0]
    inter = w.w2q.shape[1] * 8
    if use_triton is None:
        use_triton = triton_int4.available(x.device.type)
    if not use_triton:

        def deq(qs, ss):
            return _loop(
                lambda e, t: (t.float() @ int4_fmt.dequantize_repacked(qs[e], ss[e], codes=w.codes).t()).to(
                    torch.bfloat16
                )
            )

        return fused_layout_moe(
            x, topk_ids, topk_weights, E, inter, deq(w.w13q, w.w13s), deq(w.w2q, w.w2s)
        ), "torch-dequant-loop"
    t_all, h = x.shape
    k = topk_ids.shape[1]
    out = torch.empty(t_all, h, dtype=torch.bfloat16, device=x.device)
    interp = x.device.type == "cpu"
    for t0, t1 in _token_pieces(t_all):
        mk = (t1 - t0) * k
        sl = _sort_slots(topk_ids[t0:t1], E)
        bm = triton_int4.pick_block_m(mk / E)
        sorted_ids, block_expert, n = align_block_size(sl.key, E + 1, bm)
        blocks = sum(-(-c // bm) for c in sl.counts)  # masked slots are the last expert's blocks: drop them
        sorted_ids, block_expert = sorted_ids[: blocks * bm], block_expert[:blocks]
        # c1: gate/up in slot rows (the Triton interpreter writes fp32)
        cache, c1, c2 = _piece_caches(mk, h, inter, x.device, torch.float32 if interp else torch.bfloat16)
        triton_int4.int4_moe_gemm(x[t0:t1], w.w13q, w.w13s, sorted_ids, block_expert, n, k, bm, out=c1, codes=w.codes)
        _activate(c1, c2, inter, mk)
        y = _outputs_view(cache, mk, h)
        triton_int4.int4_moe_gemm(c2, w.w2q, w.w2s, sorted_ids, block_expert, n, 1, bm, out=y, codes=w.codes)
        _finish(y, sl.order, sl.valid, topk_weights[t0:t1], out[t0:t1], k)
    name = "triton-w4a16" if w.codes == "int4" else "triton-mxfp4a16"
    return out, f"{name} (interpreter)" if interp else name
