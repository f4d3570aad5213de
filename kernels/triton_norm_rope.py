"""Triton kernels of the attention block's elementwise ops: RMSNorm and the rotary embedding, each
one launch, as sglang runs them (sgl-kernel's fused RMSNorm and rotary kernels, docs/path-runner.md).

The torch versions in `kttune.kernels.decoder` run these ops in row pieces of a few elementwise
kernels each (so their fp32 temporaries stay small): about 400 launches for one qwen3-30b-a3b
attention block at 11,755 tokens, where the block's device time is 5.5 ms. Launched one by one
from the host, they made the block host-bound (5-9 ms of launches on the H200 box), so its timing
followed the host's single-thread speed (docs/tune.md#spread). These kernels keep no temporaries
and take one launch per op.

Importable without Triton (`available()` says whether they can run). With `TRITON_INTERPRET=1` they
run on CPU tensors through Triton's interpreter, which is how CI without a GPU checks them against
the torch versions.
"""

from __future__ import annotations

import math

import torch

from kttune.kernels.triton_support import HAVE_TRITON as _HAVE_TRITON
from kttune.kernels.triton_support import available, tl, triton  # noqa: F401 (available: this module's)

if _HAVE_TRITON:

    @triton.jit
    def _rms_norm_kernel(x, w, out, rows, d, sx, so, eps, BLOCK: tl.constexpr, ROWS: tl.constexpr):
        pid = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        cm = cols < d
        wv = tl.load(w + cols, mask=cm, other=0.0).to(tl.float32)
        for r in tl.static_range(ROWS):
            row = pid * ROWS + r
            m = cm & ((cols * 0 + row) < rows)
            xv = tl.load(x + row * sx + cols, mask=m, other=0.0).to(tl.float32)
            inv = tl.rsqrt(tl.sum(xv * xv, axis=0) / d + eps)
            tl.store(out + row * so + cols, (xv * inv * wv).to(out.dtype.element_ty), mask=m)

    @triton.jit
    def _rope_kernel(x, pos, heads, st, sh, log2_theta, D: tl.constexpr, HALF: tl.constexpr, HEADS_PER: tl.constexpr):
        tok = tl.program_id(0)
        hb = tl.program_id(1)
        i = tl.arange(0, HALF)
        im = i < D // 2
        p = tl.load(pos + tok).to(tl.float32)
        ang = p * tl.exp2(-(2 * i).to(tl.float32) / D * log2_theta)
        c, s = tl.cos(ang), tl.sin(ang)
        for j in tl.static_range(HEADS_PER):
            h = hb * HEADS_PER + j
            m = im & ((i * 0 + h) < heads)
            base = x + tok * st + h * sh
            x1 = tl.load(base + i, mask=m, other=0.0).to(tl.float32)
            x2 = tl.load(base + D // 2 + i, mask=m, other=0.0).to(tl.float32)
            tl.store(base + i, (x1 * c - x2 * s).to(x.dtype.element_ty), mask=m)
            tl.store(base + D // 2 + i, (x2 * c + x1 * s).to(x.dtype.element_ty), mask=m)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim of x (any leading shape; the last dim contiguous, rows evenly
    strided) into a new tensor of x's dtype, computed in fp32 in one launch."""
    d = x.shape[-1]
    x2 = x.reshape(-1, d) if x.dim() != 2 else x
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    rows = x2.shape[0]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if rows == 0:
        return out
    block = triton.next_power_of_2(d)
    per = max(1, min(16, 4096 // block))  # rows per program: short rows (per-head norms) share one
    _rms_norm_kernel[(triton.cdiv(rows, per),)](
        x2, w, out, rows, d, x2.stride(0), d, eps, BLOCK=block, ROWS=per, num_warps=4 if block <= 2048 else 8
    )
    return out


def rope_(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """Rotary embedding (neox half-split) of x [T, heads, d] at `positions` [T], in place, one
    launch; x may be a strided view with its last dim contiguous (MLA's rope part). Returns x."""
    t, heads, d = x.shape
    if x.stride(-1) != 1 or d % 2:
        raise ValueError(f"rope_ needs an even, contiguous last dim (shape {tuple(x.shape)}, strides {x.stride()})")
    if t == 0 or heads == 0:
        return x
    per = min(heads, 8)
    _rope_kernel[(t, triton.cdiv(heads, per))](
        x,
        positions.contiguous(),
        heads,
        x.stride(0),
        x.stride(1),
        math.log2(theta),
        D=d,
        HALF=triton.next_power_of_2(d // 2),
        HEADS_PER=per,
        num_warps=1 if d <= 128 else 2,
    )
    return x
