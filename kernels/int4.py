"""Int4 group-32 expert weights: the compressed-tensors format stage A writes, and the layout our GPU
int4 MoE kernel reads.

Stage A (kt-kernel `write_weight_scale_to_buffer_task`, method RAWINT4) writes each matrix as the
checkpoint stores it (compressed-tensors "pack-quantized", symmetric, group 32; docs/weight-formats.md#layouts-on-disk-and-on-the-gpu):

    packed  int32 [out, in/8]   nibble j of word w holds element 8*w + j, stored as q + 8 (q in [-8, 7])
    scales  bf16  [out, in/32]  w[o, i] = q[o, i] * scales[o, i // 32]

Stage C repacks it into the "k-packed, n-contiguous" layout (GPTQ's qweight order, the one sglang
transposes into before `gptq_marlin_repack`), which `kernels.triton_int4.int4_moe_gemm` reads with
coalesced loads along the output dimension:

    qweight int32 [in/8, out]
    qscales bf16  [in/32, out]

MXFP4 (`kernels.mx`) has the same bytes per element and per group: its uint8 `[out, in/2]`, element
2j in the low nibble, read as int32 `[out, in/8]` on a little-endian host, puts element 8w+j in nibble
j of word w, as here; only a nibble's meaning differs (an e2m1 code, `CODES`). So the runner's MXFP4
experts go through the same repack and GEMM with the e2m1 decode (docs/path-runner.md#mxfp4).

Pure torch here (CPU and CUDA); the Triton repack lives in `kernels.triton_int4`.
"""

from __future__ import annotations

import torch

GROUP = 32
PACK = 8  # int4 values per int32
_SHIFTS = torch.arange(0, 32, 4, dtype=torch.int32)
# What a nibble means: "int4" stored q + 8 (RAWINT4), "e2m1" an OCP FP4 code, sign in bit 3 (MXFP4).
CODES = ("int4", "e2m1")
# The codes of each repacked method's nibbles (kttune.spec.methods.REPACKED_METHODS).
NIBBLE_CODES = {"RAWINT4": "int4", "MXFP4": "e2m1"}


def decode_nibbles(nib: torch.Tensor, codes: str = "int4") -> torch.Tensor:
    """float32 values of 4-bit codes `nib` (integers 0..15)."""
    if codes == "int4":
        return (nib - 8).float()
    if codes == "e2m1":
        from kttune.kernels.mx import E2M1_VALUES

        mag = E2M1_VALUES.to(nib.device)[(nib & 7).long()]
        return torch.where(nib >= 8, -mag, mag)
    raise ValueError(f"unknown nibble codes {codes!r} ({', '.join(CODES)})")


def mxfp4_words(packed: torch.Tensor) -> torch.Tensor:
    """MXFP4 uint8 `[.., out, in/2]` -> the same bytes as int32 `[.., out, in/8]` (nibble j of word w
    = element 8w+j): the word layout stage C and the GEMM read."""
    if packed.dtype != torch.uint8 or packed.shape[-1] % 4:
        raise ValueError(
            f"MXFP4 bytes must be uint8 with a multiple of 4 per row, got {packed.dtype} {tuple(packed.shape)}"
        )
    return packed.contiguous().view(torch.int32)


def quantize_int4_g32(w: torch.Tensor, group: int = GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int4 group quantisation of `w` [out, in] into compressed-tensors pack-quantized
    (int32 [out, in/8], bf16 scales [out, in/group]). Mirrors compressed-tensors `pack_to_int32`
    (offset 8, little-endian nibbles)."""
    out_f, in_f = w.shape
    if in_f % group or in_f % PACK:
        raise ValueError(f"in_features {in_f} must be a multiple of {group} and {PACK}")
    wg = w.float().reshape(out_f, in_f // group, group)
    scales = (wg.abs().amax(dim=-1) / 7.0).clamp_min(1e-8).to(torch.bfloat16)
    q = torch.round(wg / scales.float().unsqueeze(-1)).clamp(-8, 7).to(torch.int32).reshape(out_f, in_f)
    return pack_int4(q), scales


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """int32 values in [-8, 7] of shape [rows, cols] -> int32 [rows, cols/8] (offset-8 nibbles; the
    top nibble wraps into the sign bit exactly as the checkpoint stores it)."""
    rows, cols = q.shape
    u = (q + 8).to(torch.int32).reshape(rows, cols // PACK, PACK)
    acc = torch.zeros((rows, cols // PACK), dtype=torch.int32, device=q.device)
    for j in range(PACK):
        acc |= u[..., j] << (4 * j)
    return acc


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """int32 [rows, cols/8] -> int32 values in [-8, 7], [rows, cols]."""
    rows, words = packed.shape
    shifts = _SHIFTS.to(packed.device)
    nib = (packed.unsqueeze(-1) >> shifts) & 0xF
    return (nib - 8).reshape(rows, words * PACK)


def dequantize_int4_g32(packed: torch.Tensor, scales: torch.Tensor, group: int = GROUP) -> torch.Tensor:
    """compressed-tensors int4 [out, in/8] + scales [out, in/group] -> float32 [out, in]."""
    q = unpack_int4(packed).float()
    out_f, in_f = q.shape
    return (q.reshape(out_f, in_f // group, group) * scales.float().unsqueeze(-1)).reshape(out_f, in_f)


def repack_int4_reference(packed: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The stage C repack in plain torch: ([out, in/8], [out, in/32]) -> ([in/8, out], [in/32, out]).
    A pure transpose of words and scales (nibble order inside a word is kept). Batched inputs
    [E, out, in/8] are repacked expert by expert."""
    return packed.transpose(-2, -1).contiguous(), scales.transpose(-2, -1).contiguous()


def dequantize_repacked(
    qweight: torch.Tensor, qscales: torch.Tensor, group: int = GROUP, codes: str = "int4"
) -> torch.Tensor:
    """Repacked 4-bit ([in/8, out], [in/32, out]) -> float32 weight [out, in] (for checks and the
    torch path); `codes` says what a nibble means."""
    words, out_f = qweight.shape
    shifts = _SHIFTS.to(qweight.device)
    nib = (qweight.unsqueeze(1) >> shifts.view(1, PACK, 1)) & 0xF  # [in/8, 8, out]
    q = decode_nibbles(nib, codes).reshape(words * PACK, out_f)  # [in, out]
    s = qscales.float().repeat_interleave(group, dim=0)  # [in, out]
    return (q * s).t().contiguous()


def repack_int4(
    packed: torch.Tensor,
    scales: torch.Tensor,
    out_q: torch.Tensor | None = None,
    out_s: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Stage C for RAWINT4: repack one matrix into the layout `int4_moe` reads. Runs the Triton
    kernel on CUDA tensors (when Triton imports), torch's transpose otherwise. Writes into `out_q` /
    `out_s` when given (e.g. the expert's place in the full-layer GPU slot). Returns
    (qweight, qscales, backend)."""
    if packed.is_cuda:
        from kttune.kernels import triton_int4

        if triton_int4.available():
            q, s = triton_int4.repack_int4(packed, scales, out_q, out_s)
            return q, s, "triton"
    q, s = repack_int4_reference(packed, scales)
    if out_q is not None:
        out_q.copy_(q)
        q = out_q
    if out_s is not None:
        out_s.copy_(s)
        s = out_s
    return q, s, "torch"
