"""OCP microscaling (MX) expert weights, MXFP4 and MXFP8, in the layout kt-kernel 0.7.2's CPU classes
read (`AMXFP4_KGroup_MOE` / `AVX2MXFP4_MOE`, `AMXMXFP8_KGroup_MOE` / `AVX2MXFP8_MOE`;
docs/weight-formats.md#mxfp4-and-mxfp8-in-host-ram):

    MXFP4  uint8 [out, in/2]  two e2m1 codes a byte, element 2j in the low nibble, 2j+1 in the high
           bf16  [out, in/32] one power-of-two scale per 32 elements (the checkpoint's ue8m0 byte,
                              which kt-kernel's loader turns into the bf16 of the same power)
    MXFP8  e4m3fn [out, in]
           uint8 [out, in/32] the ue8m0 byte itself (2^(code - 127)), converted inside kt-kernel

An e2m1 code is a sign bit over three magnitude bits: 0, 0.5, 1, 1.5, 2, 3, 4, 6. A block's scale is
the power of two that puts its largest magnitude at or under the element format's largest binade
(OCP MX v1.0: 2^(floor(log2 amax) - emax), emax 2 for e2m1 and 8 for e4m3), so an element rounds to
the nearest code and saturates at 6 (e2m1) or 448 (e4m3). Pure torch; the tests hold kt-kernel's
forward to `dequant_*` of the same bytes (tests/probes/test_cpu_moe.py).
"""

from __future__ import annotations

import torch

GROUP = 32
E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
_EMAX = {"e2m1": 2, "e4m3": 8}
UE8M0_BIAS = 127


def _block_exponents(w: torch.Tensor, elem: str, group: int = GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """(`w` as [out, in/group, group] fp32, the blocks' shared exponents [out, in/group] as int32)."""
    out_f, in_f = w.shape
    if in_f % group:
        raise ValueError(f"in_features {in_f} must be a multiple of {group}")
    wg = w.float().reshape(out_f, in_f // group, group)
    amax = wg.abs().amax(dim=-1).clamp_min(2.0**-126)
    exp = torch.floor(torch.log2(amax)).to(torch.int32) - _EMAX[elem]
    return wg, exp.clamp(-UE8M0_BIAS, UE8M0_BIAS)


def _e2m1_codes(x: torch.Tensor) -> torch.Tensor:
    """Nearest e2m1 code (uint8, sign in bit 3) of each element of `x` (already divided by its scale)."""
    mag = x.abs().clamp(max=6.0)
    idx = (mag.unsqueeze(-1) - E2M1_VALUES).abs().argmin(dim=-1).to(torch.uint8)
    return idx | ((x < 0).to(torch.uint8) << 3)


def quantize_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`w` [out, in] -> (uint8 [out, in/2] packed e2m1, bf16 scales [out, in/32])."""
    wg, exp = _block_exponents(w, "e2m1")
    scale = torch.pow(2.0, exp.float())
    codes = _e2m1_codes(wg / scale.unsqueeze(-1)).reshape(w.shape[0], -1)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed.contiguous(), scale.to(torch.bfloat16).contiguous()


def dequant_mxfp4(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """fp32 [out, in] of `quantize_mxfp4`'s bytes."""
    lo, hi = packed & 0xF, packed >> 4
    codes = torch.stack((lo, hi), dim=-1).reshape(packed.shape[0], -1).long()
    vals = E2M1_VALUES[codes & 7] * torch.where(codes & 8 > 0, -1.0, 1.0)
    return vals * scale.float().repeat_interleave(GROUP, dim=1)


def quantize_mxfp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`w` [out, in] -> (e4m3fn [out, in], uint8 ue8m0 scales [out, in/32])."""
    wg, exp = _block_exponents(w, "e4m3")
    q = (wg / torch.pow(2.0, exp.float()).unsqueeze(-1)).clamp(-448.0, 448.0)
    return (
        q.reshape(w.shape).to(torch.float8_e4m3fn).contiguous(),
        (exp + UE8M0_BIAS).to(torch.uint8).contiguous(),
    )


def dequant_mxfp8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """fp32 [out, in] of `quantize_mxfp8`'s bytes."""
    s = torch.pow(2.0, scale.to(torch.int32).float() - UE8M0_BIAS)
    return q.float() * s.repeat_interleave(GROUP, dim=1)
