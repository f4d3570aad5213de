"""Per-GPU VRAM of a configuration, following SGLang's own sizing, term by term as docs/memory.md lists them.

Pure functions over (ModelSpec, LaunchConfig). All figures are bytes on one GPU rank; rank 0 is
the largest (it also holds the KT staging buffers), so that is the rank reported.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kttune.config import LaunchConfig
from kttune.spec.methods import KtMethod, bytes_per_expert, get_method, gpu_format, layerwise_slot_bytes_per_expert
from kttune.spec.model_spec import ModelSpec
from kttune.units import MIB


# CUDA context, cuBLAS workspaces and allocator slack that exist before SGLang measures free memory.
CUDA_CONTEXT_BYTES = 512 * MIB
# NCCL buffers per rank when TP > 1.
NCCL_BYTES = 512 * MIB
# SGLang's hybrid-SWA pool sizes sliding-window layers at this share of the full pool
# (server_args.swa_full_tokens_ratio default).
SWA_FULL_TOKENS_RATIO = 0.8
# Default decode CUDA-graph batch sizes SGLang captures (cuda_graph_runner: 1, 2, 4, 8, 12, 16, 24, 32, ...).
_CAPTURE_BS = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128,
               136, 144, 152, 160, 168, 176, 184, 192, 200, 208, 216, 224, 232, 240, 248, 256]


def context_length(model: ModelSpec, cfg: LaunchConfig) -> int:
    return cfg.context_length or model.max_position_embeddings


def kv_cell_bytes(model: ModelSpec, tp: int, dtype_bytes: int = 2) -> float:
    """KV bytes per token on one rank (SGLang `get_cell_size_per_token`): MLA caches one latent
    (kv_lora_rank + qk_rope_head_dim) per layer, not divided by TP; GQA caches K and V of the rank's
    KV heads. Sliding-window layers count at SWA_FULL_TOKENS_RATIO (hybrid SWA pool)."""
    if model.attention == "mla":
        per_layer = model.kv_lora_rank + model.qk_rope_head_dim
    else:
        kv_heads_per_rank = max(1, model.num_kv_heads // tp)
        per_layer = kv_heads_per_rank * (model.head_dim + model.v_head_dim)
    layers = len(model.full_attention_layer_ids) + SWA_FULL_TOKENS_RATIO * len(model.sliding_layer_ids)
    return per_layer * layers * dtype_bytes


def kv_pool_bytes(model: ModelSpec, cfg: LaunchConfig) -> float:
    return cfg.max_total_tokens * kv_cell_bytes(model, cfg.tp, cfg.kv_cache_dtype_bytes)


def req_to_token_pool_bytes(model: ModelSpec, cfg: LaunchConfig) -> int:
    """`max_running_requests x (context_len + 4)` int32 (SGLang req_to_token pool)."""
    return cfg.max_running_requests * (context_length(model, cfg) + 4) * 4


def gpu_expert_bytes(model: ModelSpec, method: KtMethod, cfg: LaunchConfig) -> int:
    """Resident GPU experts: n per MoE layer, each sharded I/tp (part of SGLang's 'weights')."""
    fmt = gpu_format(method, model.checkpoint_format)
    per = bytes_per_expert(fmt, model.hidden_size, model.moe_intermediate_size // cfg.tp)
    return model.num_moe_layers * cfg.num_gpu_experts * per


def cuda_graph_bytes(model: ModelSpec, cfg: LaunchConfig) -> int:
    """Decode CUDA graphs: SGLang reserves cuda_graph_max_bs x 2 MB for them (server_args
    `_handle_gpu_memory_settings`); plus KT's pinned `output_gpu` of 2 x bs x H x 2 B for every
    captured bs (docs/memory.md#vram-terms-vrambreakdown)."""
    captured = [b for b in _CAPTURE_BS if b <= cfg.cuda_graph_max_bs] or [1]
    kt_out = sum(2 * b * model.hidden_size * 2 for b in captured)
    return cfg.cuda_graph_max_bs * 2 * MIB + kt_out


def staging_bytes(model: ModelSpec, cfg: LaunchConfig) -> int:
    """KT shared staging buffer on rank 0: chunk x H x bf16 (kt_ep_wrapper SharedStagingBuffer)."""
    return cfg.chunked_prefill_size * model.hidden_size * 2


def prefill_activation_bytes(model: ModelSpec, cfg: LaunchConfig, tokens: int | None = None) -> int:
    """Activations of one prefill forward of `tokens` (default: the chunk) outside the MoE kernel:
    residual/normed hidden states and attention projections (about 10 copies of H), q/k/v heads
    of the rank, and the widest dense or shared-expert MLP intermediate (gate+up), in bf16, with
    logits for one token per request. An estimate to calibrate against SGLang's log; SGLang itself
    reserves a much cruder 1.5 MB per chunk token when it picks --mem-fraction-static."""
    m = tokens if tokens is not None else cfg.chunked_prefill_size
    h = model.hidden_size
    q_width = model.num_attention_heads * (model.head_dim + model.v_head_dim) // cfg.tp
    mlp_width = 2 * max(model.dense_intermediate_size, model.shared_expert_intermediate_size) // cfg.tp
    per_token = (10 * h + q_width + mlp_width) * 2
    # the router's logits and top-k, and the hybrid path's gpu_out/cpu_out buffers
    per_token += model.num_experts * 4 + model.top_k * 8 + 2 * h * 2
    return m * per_token


def moe_activation_bytes(model: ModelSpec, tokens: int, tp: int) -> int:
    """Fused-MoE intermediate caches for `tokens` over all experts (sglang fused_moe.py /
    fused_marlin_moe.py): M*k*max(2I_tp, H)*2 + M*k*I_tp*2, plus the output M*H*2."""
    i_tp = model.moe_intermediate_size // tp
    k = model.top_k
    h = model.hidden_size
    return tokens * k * max(2 * i_tp, h) * 2 + tokens * k * i_tp * 2 + tokens * h * 2


def layerwise_slot_bytes(model: ModelSpec, method: KtMethod, tp: int) -> int:
    """The full-layer slot layerwise prefill allocates lazily: E x bytes per expert at I/tp; the MXFP4
    pipeline keeps two (raw + prepared each) (docs/memory.md#layerwise-extra)."""
    per = layerwise_slot_bytes_per_expert(method, model.hidden_size, model.moe_intermediate_size // tp)
    slots = 2 if method.cpu_format == "mxfp4" else 1
    return slots * model.num_experts * per


def layerwise_transient_bytes(model: ModelSpec, method: KtMethod, tp: int) -> int:
    """INT4 post-processing keeps 4 one-expert transpose buffers and one repack output per expert in
    flight (docs/memory.md#layerwise-extra); byte-copy methods need none."""
    if method.cpu_format != "int4_g32":
        return 0
    return 5 * bytes_per_expert("int4_g32", model.hidden_size, model.moe_intermediate_size // tp)


@dataclass(frozen=True)
class VramBreakdown:
    """Bytes on GPU rank 0. `startup_bytes` is what SGLang holds after launch; `runtime_peak_bytes`
    adds what the first chunk-sized prompt allocates (the lazily allocated layerwise slot included)."""

    cuda_context: int
    non_expert_weights: int
    gpu_experts: int
    kv_cache: int
    req_to_token_pool: int
    cuda_graphs: int
    kt_staging: int
    prefill_activations: int
    layerwise_slot: int
    layerwise_moe_activations: int
    layerwise_transients: int

    @property
    def startup_bytes(self) -> int:
        return (self.cuda_context + self.non_expert_weights + self.gpu_experts + self.kv_cache
                + self.req_to_token_pool + self.cuda_graphs + self.kt_staging)

    @property
    def layerwise_extra_bytes(self) -> int:
        return self.layerwise_slot + self.layerwise_moe_activations + self.layerwise_transients

    @property
    def runtime_peak_bytes(self) -> int:
        return self.startup_bytes + self.prefill_activations + self.layerwise_extra_bytes

    def items(self) -> list[tuple[str, int]]:
        return [(k, v) for k, v in asdict(self).items()]

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(startup_bytes=self.startup_bytes, layerwise_extra_bytes=self.layerwise_extra_bytes,
                 runtime_peak_bytes=self.runtime_peak_bytes)
        return d


def vram_breakdown(model: ModelSpec, cfg: LaunchConfig) -> VramBreakdown:
    method = get_method(cfg.method)
    lw = cfg.layerwise_can_fire(method.layerwise)
    chunk = cfg.chunked_prefill_size
    return VramBreakdown(
        cuda_context=CUDA_CONTEXT_BYTES + (NCCL_BYTES if cfg.tp > 1 else 0),
        non_expert_weights=int(model.non_expert_bytes / cfg.tp),
        gpu_experts=gpu_expert_bytes(model, method, cfg),
        kv_cache=int(kv_pool_bytes(model, cfg)),
        req_to_token_pool=req_to_token_pool_bytes(model, cfg),
        cuda_graphs=cuda_graph_bytes(model, cfg),
        kt_staging=staging_bytes(model, cfg),
        prefill_activations=prefill_activation_bytes(model, cfg),
        layerwise_slot=layerwise_slot_bytes(model, method, cfg.tp) if lw else 0,
        layerwise_moe_activations=moe_activation_bytes(model, chunk, cfg.tp) if lw else 0,
        layerwise_transients=layerwise_transient_bytes(model, method, cfg.tp) if lw else 0,
    )


def max_kv_tokens_that_fit(model: ModelSpec, cfg: LaunchConfig, vram_budget_bytes: int, page: int = 1024) -> int:
    """The largest --max-total-tokens (a multiple of `page`) whose runtime peak fits the budget; 0 if
    none does."""
    without_kv = vram_breakdown(model, cfg.__class__(**{**cfg.to_dict(), "max_total_tokens": 0}))
    free = vram_budget_bytes - without_kv.runtime_peak_bytes
    cell = kv_cell_bytes(model, cfg.tp, cfg.kv_cache_dtype_bytes)
    if free <= 0 or cell <= 0:
        return 0
    return int(free // cell) // page * page


def mem_fraction_static(breakdown: VramBreakdown, vram_budget_bytes: int) -> float:
    """--mem-fraction-static that leaves SGLang's static pools (weights, KV, graphs) their room and
    the runtime peak its headroom: static share of the budget plus a 1% margin, capped at 0.98."""
    static = breakdown.startup_bytes
    frac = static / vram_budget_bytes + 0.01
    return round(min(0.98, max(0.05, frac)), 3)
