"""Routed experts resident in GPU memory, in sglang's fused-MoE layout, and the MoE over them.

The tensors are what stage A writes per expert (`kttune.kernels.expert_weights.slot_kinds`): w13
[E, 2I, H], w2 [E, H, I] and, by method, their scales; RAWINT4 and MXFP4 after stage C's repack
([E, in/8, out] words, [E, in/32, out] scales; MXFP4's bytes read as int32 words, `kernels.int4`).
The same object serves the hybrid path's n resident experts (built from host experts) and the
layerwise path's full-layer slot (the pipeline's tensors).

The MoE runs on kttune's kernels (`kttune.kernels.grouped_moe`): bf16 grouped GEMM, fp8 scaled
grouped GEMM, Triton w4a16 (int4 or e2m1 nibbles). sglang's `fused_moe` / `fused_marlin_moe` are not
wired in: neither sglang nor sgl-kernel installs on any machine this was measured on (their wheels
pin another torch), so no call into them could be run; the runner's `backends["sglang_ops"]` says
whether they import where it runs.

FP8 with 128x128 block scales: on CUDA the scaled GEMM takes one scale per output row, each row's
first block scale (same bytes and GEMM shape as sglang's w8a8 block kernel, values approximate);
elsewhere the blocks are dequantised exactly (the CPU tests hold the paths to each other with it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kttune.kernels import grouped_moe as gm
from kttune.kernels.expert_weights import FP8_BLOCK, HostExperts, dequant_fp8_block, norm_method, word_kinds
from kttune.kernels.int4 import NIBBLE_CODES, repack_int4
from kttune.spec.methods import REPACKED_METHODS


@dataclass
class GpuExperts:
    method: str
    t: dict[str, torch.Tensor]  # w13, w2 (+ s13, s2)

    @property
    def experts(self) -> int:
        return int(self.t["w13"].shape[0])

    @property
    def nbytes(self) -> int:
        return sum(x.numel() * x.element_size() for x in self.t.values())

    @classmethod
    def from_host(cls, host: HostExperts, experts: range, device, tp: int = 1, rank: int = 0) -> "GpuExperts":
        """Experts `experts` of `host` in GPU layout on `device` (rank `rank`'s I/tp share)."""
        m = norm_method(host.method)
        kinds = host.slot_kinds(tp)
        if m in REPACKED_METHODS:
            kinds = word_kinds(kinds)
        t = {k.name: torch.empty((len(experts),) + k.shape, dtype=k.dtype, device=device) for k in kinds}
        for j, e in enumerate(experts):
            for name, src in host.expected(e, tp, rank).items():
                t[name][j].view(torch.uint8).copy_(src.contiguous().view(torch.uint8))
        if m in REPACKED_METHODS:
            out = {}
            for w, s in (("w13", "s13"), ("w2", "s2")):
                q, sc, _ = repack_int4(t[w], t[s])
                out[w], out[s] = q.contiguous(), sc.contiguous()
            t = out
        return cls(m, t)

    def forward(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, str]:
        """Routed MoE of x [T, H] with local ids / weights [T, k] -> (y bf16 [T, H], backend)."""
        t = self.t
        if self.method == "BF16":
            return gm.moe_bf16(x, t["w13"], t["w2"], ids, weights)
        if self.method in REPACKED_METHODS:
            w = gm.Int4Weights(t["w13"], t["s13"], t["w2"], t["s2"], NIBBLE_CODES[self.method])
            return gm.moe_int4(x, w, ids, weights)
        if self.method == "FP8_PERCHANNEL":
            return gm.moe_fp8(x, gm.Fp8Weights(t["w13"], t["s13"], t["w2"], t["s2"]), ids, weights)
        if self.method == "FP8":
            if x.is_cuda:
                s13, s2 = _row_scales(t["s13"], t["w13"].shape[1]), _row_scales(t["s2"], t["w2"].shape[1])
                y, b = gm.moe_fp8(x, gm.Fp8Weights(t["w13"], s13, t["w2"], s2), ids, weights)
                return y, b + " (block scales as row scales)"
            w13 = torch.stack([_deq13(t["w13"][e], t["s13"][e]) for e in range(self.experts)])
            w2 = torch.stack([dequant_fp8_block(t["w2"][e], t["s2"][e]) for e in range(self.experts)])
            y, _ = gm.moe_bf16(x, w13.to(torch.bfloat16), w2.to(torch.bfloat16), ids, weights, use_grouped=False)
            return y, "torch-fp8-block-dequant"
        raise ValueError(f"no GPU MoE for method {self.method}")


def _deq13(w13: torch.Tensor, s13: torch.Tensor) -> torch.Tensor:
    """w13 = cat(gate, up) rows with cat(gate_scale, up_scale) block rows: dequantise each half."""
    i = w13.shape[0] // 2
    bi = s13.shape[0] // 2
    return torch.cat([dequant_fp8_block(w13[:i], s13[:bi]), dequant_fp8_block(w13[i:], s13[bi:])])


def _row_scales(s: torch.Tensor, rows: int) -> torch.Tensor:
    """Block scales [E, row_blocks, col_blocks] -> one fp32 scale per row [E, rows] (first column
    block). For w13 the gate and up halves each restart their block rows."""
    e, rb, _ = s.shape
    col0 = s[:, :, 0].float()
    if rb * FP8_BLOCK >= rows:  # one block grid over all rows
        return col0.repeat_interleave(FP8_BLOCK, dim=1)[:, :rows].contiguous()
    half = rows // 2
    g, u = col0[:, : rb // 2], col0[:, rb // 2 :]
    return torch.cat(
        [g.repeat_interleave(FP8_BLOCK, 1)[:, :half], u.repeat_interleave(FP8_BLOCK, 1)[:, :half]], 1
    ).contiguous()


def gpu_subset_moe(
    experts: GpuExperts, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor
) -> tuple[torch.Tensor, str]:
    """The hybrid path's GPU share (kt_ep_wrapper's gpu_out): the fused MoE over every token slot with
    the slots of the CPU's experts masked, as sglang's expert map masks them (the `uniform` placement
    puts experts 0..n-1 of each layer on the GPU), so its buffers are sized for all M*k slots.
    Returns bf16 [T, H] (zeros when there are no GPU experts)."""
    n = experts.experts
    if n == 0:
        return torch.zeros(x.shape[0], x.shape[1], dtype=torch.bfloat16, device=x.device), "none"
    return experts.forward(x, ids.masked_fill(ids >= n, -1), weights)
