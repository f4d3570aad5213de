"""Token routing helpers shared by the GPU MoE kernels: random top-k routing for probes, grouping of
token slots by expert, and the block-aligned layout the Triton int4 kernel walks."""

from __future__ import annotations

from dataclasses import dataclass

import torch


def random_routing(
    tokens: int, experts: int, top_k: int, device="cpu", seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Uniform random top-k routing (distinct experts per token) with positive weights summing to 1,
    as the probes feed both the CPU and the GPU MoE. Returns (topk_ids int64 [tokens, k],
    topk_weights float32 [tokens, k]), contiguous."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    scores = torch.rand(tokens, experts, generator=g)
    ids = scores.topk(top_k, dim=-1).indices
    w = torch.rand(tokens, top_k, generator=g) + 0.1
    w = w / w.sum(-1, keepdim=True)
    return ids.to(torch.int64).contiguous().to(device), w.to(torch.float32).contiguous().to(device)


@dataclass(frozen=True)
class ExpertGroups:
    """Token slots (t = token * k + j) sorted by expert."""

    order: torch.Tensor  # int64 [M*k]: slot indices sorted by expert (stable)
    counts: torch.Tensor  # int64 [E]
    offsets: torch.Tensor  # int32 [E]: cumulative end offsets (torch._grouped_mm's `offs`)


def group_by_expert(topk_ids: torch.Tensor, experts: int) -> ExpertGroups:
    flat = topk_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    # scatter_add instead of bincount: bincount reads the max back to the host (a sync per call)
    counts = torch.zeros(experts, dtype=torch.int64, device=flat.device).scatter_add_(0, flat, torch.ones_like(flat))
    return ExpertGroups(order=order, counts=counts, offsets=torch.cumsum(counts, 0).to(torch.int32))


def align_block_size(topk_ids: torch.Tensor, experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """sglang's `moe_align_block_size` in torch: token slots sorted by expert, each expert's run padded
    to a multiple of `block_m` with the sentinel M*k. Returns (sorted_ids int32 [P], block_expert int32
    [P / block_m], num_valid = M*k)."""
    flat = topk_ids.reshape(-1)
    n = flat.numel()
    device = flat.device
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts)
    padded = (counts + block_m - 1) // block_m * block_m
    starts = torch.cumsum(counts, 0) - counts
    pstarts = torch.cumsum(padded, 0) - padded
    total = int(padded.sum().item())
    e_sorted = flat[order]
    pos = torch.arange(n, device=device) - starts[e_sorted]
    dest = pstarts[e_sorted] + pos
    sorted_ids = torch.full((total,), n, dtype=torch.int32, device=device)
    sorted_ids[dest] = order.to(torch.int32)
    block_expert = torch.repeat_interleave(torch.arange(experts, device=device, dtype=torch.int32), padded // block_m)
    return sorted_ids, block_expert, n
