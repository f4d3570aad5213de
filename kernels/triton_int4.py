"""Triton kernels of the layerwise int4 path: the stage C repack and the int4 weight-only MoE GEMM.

Importable without Triton (`available()` says whether they can run). With `TRITON_INTERPRET=1` they
run on CPU tensors through Triton's interpreter, which is how CI without a GPU can exercise them.

Layouts are described in `kttune.kernels.int4`.
"""

from __future__ import annotations


import torch

from kttune.kernels.triton_support import HAVE_TRITON as _HAVE_TRITON
from kttune.kernels.triton_support import available, tl, triton  # noqa: F401 (available: this module's)

if _HAVE_TRITON:

    @triton.jit
    def _transpose_kernel(
        src,
        dst,
        R,
        C,
        s_b,
        s_r,
        s_c,
        d_b,
        d_c,
        d_r,
        BR: tl.constexpr,
        BC: tl.constexpr,
    ):
        # dst[b, c, r] = src[b, r, c]; tiles are read along c and written along r (both coalesced,
        # Triton moves the tile through shared memory in between).
        pid_r = tl.program_id(0)
        pid_c = tl.program_id(1)
        b = tl.program_id(2).to(tl.int64)
        r = pid_r * BR + tl.arange(0, BR)
        c = pid_c * BC + tl.arange(0, BC)
        m = (r[:, None] < R) & (c[None, :] < C)
        x = tl.load(src + b * s_b + r[:, None].to(tl.int64) * s_r + c[None, :] * s_c, mask=m)
        xt = tl.trans(x)
        mt = (c[:, None] < C) & (r[None, :] < R)
        tl.store(dst + b * d_b + c[:, None].to(tl.int64) * d_c + r[None, :] * d_r, xt, mask=mt)

    @triton.jit
    def _int4_moe_gemm_kernel(
        a_ptr,
        q_ptr,
        s_ptr,
        c_ptr,
        sorted_ids_ptr,
        block_expert_ptr,
        N,
        num_valid,
        a_div,
        stride_am,
        stride_qe,
        stride_qk,
        stride_qn,
        stride_se,
        stride_sg,
        stride_sn,
        stride_cm,
        K: tl.constexpr,
        GROUP: tl.constexpr,
        E2M1: tl.constexpr,
        F32: tl.constexpr,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
    ):
        # C[t, :] = A[t // a_div, :] @ dequant(W[e(t)]) for the BM token slots of one expert's block.
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        offs_m = pid_m * BM + tl.arange(0, BM)
        tok = tl.load(sorted_ids_ptr + offs_m)
        mask_m = tok < num_valid
        e = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        a_rows = (tok // a_div).to(tl.int64)
        offs_n = pid_n * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        a_ptrs = a_ptr + a_rows[:, None] * stride_am + offs_k[None, :]
        q_ptrs = q_ptr + e * stride_qe + (offs_k // 8)[:, None] * stride_qk + offs_n[None, :] * stride_qn
        s_ptrs = s_ptr + e * stride_se + (offs_k // GROUP)[:, None] * stride_sg + offs_n[None, :] * stride_sn
        shifts = ((offs_k % 8) * 4)[:, None]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in range(0, K // BK):  # K is constexpr: one compile per expert shape
            a = tl.load(a_ptrs, mask=mask_m[:, None], other=0.0)
            q = tl.load(q_ptrs)
            s = tl.load(s_ptrs)
            nib = (q >> shifts) & 0xF
            if E2M1:  # OCP FP4 (MXFP4): sign bit 3, exponent bits 2-1, mantissa bit 0, bias 1
                ex = (nib >> 1) & 3  # not `e`: that is the block's expert
                m = (nib & 1).to(tl.float32)
                mag = tl.where(ex == 0, 0.5 * m, (2.0 + m) * tl.exp2((ex - 2).to(tl.float32)))
                v = tl.where(nib >= 8, -mag, mag)
            else:  # int4 stored q + 8 (RAWINT4)
                v = (nib - 8).to(tl.float32)
            w = v * s.to(tl.float32)
            if F32:  # Triton's CPU interpreter converts fp32 -> bf16 wrongly; check the logic in fp32 there
                acc += tl.dot(a.to(tl.float32), w)
            else:
                acc += tl.dot(a, w.to(tl.bfloat16))
            a_ptrs += BK
            q_ptrs += (BK // 8) * stride_qk
            s_ptrs += (BK // GROUP) * stride_sg
        c_ptrs = c_ptr + tok.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None])


def _need() -> None:
    if not _HAVE_TRITON:
        from kttune.extras import missing

        raise missing("triton", "the Triton int4 kernels (the torch variants in kttune.kernels need none)")


def transpose_last2(src: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """[.., R, C] -> [.., C, R] contiguous, by the Triton tile transpose (2-D or 3-D input)."""
    _need()
    squeeze = src.dim() == 2
    s3 = src.unsqueeze(0) if squeeze else src
    B, R, C = s3.shape
    if out is None:
        out = torch.empty((B, C, R), dtype=src.dtype, device=src.device)
        out_view = out
    else:
        out_view = out.unsqueeze(0) if squeeze else out
    assert out_view.shape == (B, C, R) and out_view.stride(-1) == 1, "out must be [.., C, R] with contiguous rows"
    BR, BC = 64, 64
    grid = (triton.cdiv(R, BR), triton.cdiv(C, BC), B)
    _transpose_kernel[grid](
        s3,
        out_view,
        R,
        C,
        s3.stride(0),
        s3.stride(1),
        s3.stride(2),
        out_view.stride(0),
        out_view.stride(1),
        out_view.stride(2),
        BR=BR,
        BC=BC,
    )
    return out_view[0] if squeeze else out_view


def repack_int4(
    packed: torch.Tensor,
    scales: torch.Tensor,
    out_q: torch.Tensor | None = None,
    out_s: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """compressed-tensors ([.., out, in/8] int32, [.., out, in/32] bf16) -> ([.., in/8, out],
    [.., in/32, out]). Accepts one matrix or a batch of experts."""
    return transpose_last2(packed, out_q), transpose_last2(scales, out_s)


# Tile of the int4 MoE GEMM (BM is picked per call from the tokens per expert).
DEFAULT_CONFIG = {"BN": 128, "BK": 64, "num_warps": 4, "num_stages": 3}


def pick_block_m(rows_per_expert: float) -> int:
    """Token-block height: small blocks when each expert sees few tokens (decode-like), larger when
    the GEMM can fill a tile."""
    if rows_per_expert <= 16:
        return 16
    if rows_per_expert <= 32:
        return 32
    return 64


def int4_moe_gemm(
    a: torch.Tensor,
    qweight: torch.Tensor,
    qscales: torch.Tensor,
    sorted_ids: torch.Tensor,
    block_expert: torch.Tensor,
    num_valid: int,
    a_div: int,
    block_m: int,
    out: torch.Tensor | None = None,
    config: dict | None = None,
    codes: str = "int4",
) -> torch.Tensor:
    """C[t] = A[t // a_div] @ W_e(t) for every token slot t < num_valid, with W from the repacked 4-bit
    layout (qweight [E, K/8, N], qscales [E, K/32, N]; `codes` "int4" or "e2m1", `kernels.int4`).
    Output bf16 on CUDA (fp32 under the CPU interpreter). `sorted_ids`/`block_expert` come from
    `kernels.routing.align_block_size`."""
    _need()
    E, KW, N = qweight.shape
    K = KW * 8
    assert a.shape[1] == K and a.stride(1) == 1
    cfg = dict(DEFAULT_CONFIG)
    cfg.update(config or {})
    BN = cfg["BN"] if N % cfg["BN"] == 0 else 64
    BK = cfg["BK"]
    assert N % BN == 0 and K % BK == 0, f"N={N} K={K} must be multiples of {BN}/{BK}"
    interp = a.device.type == "cpu"  # only reachable under TRITON_INTERPRET=1
    if out is None:
        out = torch.empty((num_valid, N), dtype=torch.float32 if interp else torch.bfloat16, device=a.device)
    grid = (block_expert.numel(), N // BN)
    _int4_moe_gemm_kernel[grid](
        a,
        qweight,
        qscales,
        out,
        sorted_ids,
        block_expert,
        N,
        num_valid,
        a_div,
        a.stride(0),
        qweight.stride(0),
        qweight.stride(1),
        qweight.stride(2),
        qscales.stride(0),
        qscales.stride(1),
        qscales.stride(2),
        out.stride(0),
        K=K,
        GROUP=32,
        E2M1=codes == "e2m1",
        F32=interp,
        BM=block_m,
        BN=BN,
        BK=BK,
        **({} if interp else {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}),
    )
    return out
