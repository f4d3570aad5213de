"""Prefill time of both paths, per MoE layer, per forward (chunk) and per prompt.

Follows sglang-kt 0.7.2 as docs/sglang-kt.md#the-two-prefill-paths describes it (composition:
docs/cost-model.md):
- hybrid (forward of M tokens < threshold): per MoE layer the CPU experts (rank 0, full I) and the
  rank's GPU experts run concurrently, then the CPU output is copied back:
  max(T_cpu(M, E-n), T_gpu(M, n)) + D2H(hidden, ids, weights) + H2D(out) + sync.
- layerwise (M >= threshold > 0, native methods only): per MoE layer, serially, load the whole layer
  through the per-expert pipeline A (CPU write) -> B (H2D) -> C (repack), then run all E experts on
  the GPU. BF16/MXFP4 copy resident GPU experts GPU->GPU, the others re-send every expert.
- every layer also runs attention and its dense matmuls on the GPU, and at TP > 1 two all-reduces
  (after attention, after the MoE), the same on both paths.
- a prompt of L tokens runs floor(L/C) forwards of C tokens and a tail of L mod C; each forward picks
  its path by its own token count (kttune.spec.forwards, docs/sglang-kt.md#the-per-forward-switch).
"""

from __future__ import annotations

from dataclasses import dataclass

from kttune.config import LaunchConfig
from kttune.cost.components import FORWARD_OVERHEAD_MS, HYBRID_SYNC_MS, Components
from kttune.spec.forwards import Forward, forward_plan, switch_path


@dataclass(frozen=True)
class LayerTimes:
    """One MoE layer's MoE time for one forward, with the parts that explain it (ms)."""

    path: str  # "hybrid" | "layerwise"
    total_ms: float
    cpu_ms: float = 0.0
    gpu_ms: float = 0.0
    transfer_ms: float = 0.0
    load_ms: float = 0.0
    stage_a_ms: float = 0.0
    stage_b_ms: float = 0.0
    stage_c_ms: float = 0.0


def hybrid_moe_layer(c: Components, cfg: LaunchConfig, tokens: int) -> LayerTimes:
    m = c.model
    n = min(cfg.num_gpu_experts, m.num_experts)
    cpu = c.cpu_moe_ms(tokens, m.num_experts - n, cfg.cpuinfer_threads, cfg.threadpool_count, cfg.numa_nodes)
    gpu = c.gpu_moe_ms(tokens, n)
    h = m.hidden_size
    xfer = c.d2h_ms(tokens * (h * 2 + m.top_k * 12)) + c.h2d_ms(tokens * h * 2) if n < m.num_experts else 0.0
    total = c.calibration.apply(c.method.name, "hybrid", max(cpu, gpu) + xfer + HYBRID_SYNC_MS, tokens)
    return LayerTimes("hybrid", total, cpu_ms=cpu, gpu_ms=gpu, transfer_ms=xfer)


def layerwise_load_ms(c: Components, cfg: LaunchConfig) -> tuple[float, float, float, float]:
    """(load, A, B, C) in ms for streaming one MoE layer to the GPU, as sglang-kt 0.7.2's per-expert
    pipeline runs it (docs/sglang-kt.md#layerwise-prefill-at-tp--1): rank 0's kt-kernel writes each
    expert whole, every TP rank's shard of it (stage A does not shrink with TP); every rank then
    copies its own shard (I/tp) over its own link, all at once (stage B), and post-processes it
    (stage C). Rank 0 waits for the copy of expert e-1 before it writes expert e+1, and every rank
    passes a `dist.barrier` before it starts a copy, so at TP > 1 each expert's copy follows a
    barrier: the pipeline's step is max(A, B + barrier, C). The load is the measured pipeline of this
    method when the profile has it (TP 1), else fill + E_s x step x the measured overlap ratio.
    A, B, C are each stage alone, summed over the layer.

    At TP > 1 with the loop measured at TP 1 (the pipeline probe runs one GPU): that measured time,
    changed only by what TP changes in each step (docs/cost-model.md#tp-layerwise-load): the
    slowest stage becomes max(A, B_tp, C_tp), with B and C over each rank's 1/tp of the bytes
    (stage A still writes the whole expert), and a barrier is added. The host's own per-step cost
    in the loop (issuing the copies, waiting on events), which the measured TP 1 loop holds, stays."""
    streamed = streamed_experts_per_layer(c, cfg)
    if streamed <= 0:
        return 0.0, 0.0, 0.0, 0.0
    a = c.stage_a_ms(c.cpu_bytes_per_expert, cfg.cpuinfer_threads)
    b = c.h2d_all_ranks_ms(c.gpu_bytes_per_expert)
    cc = c.stage_c_ms(c.gpu_bytes_per_expert)
    measured = c.pipeline_layer_ms(streamed, cfg.cpuinfer_threads)
    tp1 = c.pipeline_layer_ms(streamed, cfg.cpuinfer_threads, at_tp1=True) if c.tp > 1 else None
    if measured is not None:
        load = measured  # the whole pipeline, measured for this method on this machine
    elif tp1 is not None:
        full = c.gpu_bytes_per_expert * c.tp  # one expert over one link, as the TP 1 loop copied it
        slowest_tp1 = max(a, c.h2d_ms(full), c.stage_c_ms(full))
        load = max(0.0, tp1 + streamed * (max(a, b, cc) - slowest_tp1 + c.barrier_ms()))
    else:
        step = max(a, b + c.barrier_ms(), cc)
        load = (a + b + cc - max(a, b, cc)) + streamed * step * c.overlap_ratio
    return load, streamed * a, streamed * b, streamed * cc


def layerwise_moe_layer(c: Components, cfg: LaunchConfig, tokens: int) -> LayerTimes:
    load, a, b, cc = layerwise_load_ms(c, cfg)
    gpu = c.gpu_moe_ms(tokens, c.model.num_experts)
    total = c.calibration.apply(c.method.name, "layerwise", load + gpu, tokens)
    return LayerTimes("layerwise", total, gpu_ms=gpu, load_ms=load, stage_a_ms=a, stage_b_ms=b, stage_c_ms=cc)


def forward_path(c: Components, cfg: LaunchConfig, tokens: int) -> str:
    """The path of one forward of `tokens` under `cfg` (kttune.spec.forwards.switch_path)."""
    return switch_path(c.method.layerwise, tokens, cfg.gpu_prefill_token_threshold)


def prompt_forwards(c: Components, cfg: LaunchConfig, prompt_tokens: int) -> tuple[Forward, ...]:
    """The forwards one prompt runs under `cfg` (kttune.spec.forwards.forward_plan)."""
    return forward_plan(c.method.layerwise, prompt_tokens, cfg.chunked_prefill_size, cfg.gpu_prefill_token_threshold)


def moe_layer(c: Components, cfg: LaunchConfig, tokens: int) -> LayerTimes:
    if forward_path(c, cfg, tokens) == "layerwise":
        return layerwise_moe_layer(c, cfg, tokens)
    return hybrid_moe_layer(c, cfg, tokens)


def non_moe_ms(c: Components, tokens: int, prefix: int, backend: str | None = None) -> float:
    """Attention (full-attention layers, in the form `backend` runs: `Components.attention_ms`;
    sliding layers see at most the window; linear-attention layers their chunked recurrence,
    `Components.linear_attention_ms`, whatever the prefix) and dense matmuls of every decoder layer
    for one forward."""
    m = c.model
    t = len(m.full_attention_layer_ids) * c.attention_ms(tokens, prefix, backend)
    if m.sliding_layer_ids:
        t += len(m.sliding_layer_ids) * c.attention_ms(tokens, min(prefix, m.sliding_window), backend)
    if m.linear_attention_layer_ids:
        t += len(m.linear_attention_layer_ids) * c.linear_attention_ms(tokens)
    return t + m.num_layers * (c.dense_ms(tokens, prefix, backend) + c.allreduce_layer_ms(tokens) + c.layer_overhead_ms)


@dataclass(frozen=True)
class ForwardTimes:
    tokens: int
    prefix: int
    path: str
    moe_ms: float
    other_ms: float
    layer: LayerTimes

    @property
    def total_ms(self) -> float:
        return self.moe_ms + self.other_ms + FORWARD_OVERHEAD_MS


def forward_time(c: Components, cfg: LaunchConfig, tokens: int, prefix: int = 0) -> ForwardTimes:
    layer = moe_layer(c, cfg, tokens)
    return ForwardTimes(
        tokens,
        prefix,
        layer.path,
        c.model.num_moe_layers * layer.total_ms,
        non_moe_ms(c, tokens, prefix, cfg.attention_backend or None),
        layer,
    )


def prefill_forwards(c: Components, cfg: LaunchConfig, prompt_tokens: int) -> list[ForwardTimes]:
    return [forward_time(c, cfg, size, prefix) for _, size, prefix in prompt_forwards(c, cfg, prompt_tokens)]


def prefill_time_ms(c: Components, cfg: LaunchConfig, prompt_tokens: int) -> float:
    """Whole-prompt prefill time (TTFT with an idle server) in ms."""
    return sum(f.total_ms for f in prefill_forwards(c, cfg, prompt_tokens))


def crossover_tokens(c: Components, cfg: LaunchConfig, max_tokens: int | None = None) -> int | None:
    """Smallest forward size M (multiple of 64) at which the layerwise path is no slower than the
    hybrid path for one forward from an empty prefix; None if it never is up to `max_tokens`."""
    if not c.method.layerwise:
        return None
    hi = max_tokens or max(cfg.chunked_prefill_size, 65536)
    hi_lw = layerwise_moe_layer(c, cfg, hi).total_ms
    if hi_lw > hybrid_moe_layer(c, cfg, hi).total_ms:
        return None
    lo = 64
    if layerwise_moe_layer(c, cfg, lo).total_ms <= hybrid_moe_layer(c, cfg, lo).total_ms:
        return lo
    # layerwise - hybrid decreases with M (fixed load cost, CPU time grows): bisect on multiples of 64
    a, b = lo // 64, hi // 64
    while b - a > 1:
        mid = (a + b) // 2
        if layerwise_moe_layer(c, cfg, mid * 64).total_ms <= hybrid_moe_layer(c, cfg, mid * 64).total_ms:
            b = mid
        else:
            a = mid
    return b * 64


def streamed_experts_per_layer(c: Components, cfg: LaunchConfig) -> int:
    """Experts the layerwise path sends CPU -> GPU for one MoE layer (docs/sglang-kt.md#the-two-prefill-paths)."""
    n = min(cfg.num_gpu_experts, c.model.num_experts)
    return c.model.num_experts if c.method.layerwise_resends_gpu_experts else c.model.num_experts - n


def layerwise_traffic_bytes(c: Components, cfg: LaunchConfig, prompt_tokens: int) -> int:
    """Expert-weight bytes one prompt streams over PCIe (per GPU link): every layerwise forward loads
    every MoE layer once, so traffic = layerwise forwards x MoE layers x streamed experts x bytes
    (docs/cost-model.md#layered-prefill-and-weight-traffic: the cost Layered Prefill removes by loading each layer once per prompt)."""
    forwards = sum(1 for path, _, _ in prompt_forwards(c, cfg, prompt_tokens) if path == "layerwise")
    return forwards * c.model.num_moe_layers * streamed_experts_per_layer(c, cfg) * c.gpu_bytes_per_expert
