"""What sglang-kt 0.7.2 picks for the memory flags a launch command leaves unset, and the KV pool it
sizes from `--mem-fraction-static` at start-up (docs/memory.md#what-sglang-picks-when-a-flag-is-unset).
Pure: formulas over the GPU's memory, the flags and the memory model's breakdown.

Sources: `ServerArgs._handle_gpu_memory_settings` and the mem-fraction heuristic in sglang's
`server_args.py`; `init_memory_pool` / `profile_max_num_token` in
`model_executor/model_runner_kv_cache_mixin.py` (links in docs/memory.md). SGLang sizes by the
GPU's capacity in MiB (`get_device_memory_capacity`).
"""

from __future__ import annotations

from dataclasses import replace

from kttune.config import LaunchConfig
from kttune.spec import compressed_attention as compressed
from kttune.memory.vram import (
    context_length,
    dsa_index_bytes_per_layer,
    kv_cell_bytes,
    linear_state_bytes_per_request,
    vram_breakdown,
)
from kttune.spec.model_spec import ModelSpec
from kttune.units import MIB

# (capacity below, MiB) -> (chunk, decode graph batch below TP 4, at TP 4 and more)
_TIERS = (
    (20 * 1024, 2048, 8, 8),
    (35 * 1024, 2048, 24, 80),
    (60 * 1024, 4096, 32, 160),
    (90 * 1024, 8192, 256, 512),
    (160 * 1024, 8192, 256, 512),
)
_LARGEST = (16384, 256, 512)


def _tier(vram_bytes: int) -> tuple[int, int, int]:
    mib = vram_bytes / MIB
    for below, chunk, bs, bs_tp4 in _TIERS:
        if mib < below:
            return chunk, bs, bs_tp4
    return _LARGEST


def default_chunked_prefill_size(vram_bytes: int) -> int:
    """`--chunked-prefill-size` unset: 2048 below 35 GiB of GPU memory, 4096 below 60, 8192 below
    160, else 16384."""
    return _tier(vram_bytes)[0]


def default_cuda_graph_max_bs(vram_bytes: int, tp: int) -> int:
    """`--cuda-graph-max-bs` unset: 8 below 20 GiB; 24 (80 at TP >= 4) below 35; 32 (160) below 60;
    256 (512) above."""
    _, bs, bs_tp4 = _tier(vram_bytes)
    return bs_tp4 if tp >= 4 else bs


def default_mem_fraction_static(vram_bytes: int, chunk: int, cuda_graph_max_bs: int, tp: int) -> float:
    """`--mem-fraction-static` unset: (capacity - reserved) / capacity, rounded to 0.001, where
    reserved (MiB) = 512 + 1.5 x max(chunk, 2048) + 2 x cuda_graph_max_bs + 1024 x tp / 8, and at
    least 10 GiB on GPUs over 60 GiB."""
    mib = vram_bytes / MIB
    reserved = 512 + 1.5 * max(chunk, 2048) + 2 * cuda_graph_max_bs + tp / 8 * 1024
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mib - reserved) / mib, 3)


# SGLang's default share of the state pool to the KV pool when `--max-mamba-cache-size` is unset
# (server_args.mamba_full_memory_ratio).
MAMBA_FULL_MEMORY_RATIO = 0.9


def _rest_after_weights(model: ModelSpec, cfg: LaunchConfig, vram_bytes: int, mem_fraction_static: float) -> float:
    """What `mem_fraction_static` of the free memory at start (the GPU less the CUDA context) leaves
    after the weights (non-expert and the resident GPU experts)."""
    b = vram_breakdown(model, replace(cfg, max_total_tokens=0))
    return (vram_bytes - b.cuda_context) * mem_fraction_static - (b.non_expert_weights + b.gpu_experts)


def linear_state_slots_at_start(
    model: ModelSpec,
    cfg: LaunchConfig,
    vram_bytes: int,
    mem_fraction_static: float,
    ratio: float = MAMBA_FULL_MEMORY_RATIO,
    running_if_no_radix: int = 0,
) -> int:
    """The state pool SGLang sizes at start for a model with linear-attention layers when
    `--max-mamba-cache-size` is unset (`handle_max_mamba_cache`): `--max-running-requests` slots
    with the radix cache off (`running_if_no_radix`), else the slots that `ratio / (1 + ratio)` of
    the memory left after the weights holds. 0 without such layers."""
    per = linear_state_bytes_per_request(model, cfg.tp)
    if per <= 0:
        return 0
    if running_if_no_radix:
        return running_if_no_radix
    rest = _rest_after_weights(model, cfg, vram_bytes, mem_fraction_static)
    return max(0, int(rest * ratio / (1 + ratio) // per))


def profiling_cell_bytes(model: ModelSpec, tp: int, dtype_bytes: int = 2) -> float:
    """The bytes per token sglang-kt 0.7.2 divides the room by when it sizes the KV pool at start
    (`get_cell_size_per_token`), which for MLA is not what its pool stores: it counts
    `qk_nope_head_dim + qk_rope_head_dim` per layer (192 for DeepSeek-V3 and Kimi-K2) where
    MLATokenToKVPool stores `kv_lora_rank + qk_rope_head_dim` (576), plus the sparse-attention
    indexer's key where there is one; so a pool the fraction sizes holds up to 3x the tokens the
    fraction has room for (docs/memory.md#what-sglang-picks-when-a-flag-is-unset). Every other
    attention: the cell it stores (`kv_cell_bytes`)."""
    if model.compressed_attention is not None:  # DeepSeek-V4: its first, generic sizing (docs/deepseek-v4.md)
        return compressed.first_pass_cell_bytes(model.compressed_attention, model.num_layers)
    if model.attention != "mla":
        return kv_cell_bytes(model, tp, dtype_bytes)
    layers = len(model.full_attention_layer_ids) + len(model.sliding_layer_ids)
    cell = model.head_dim * layers * dtype_bytes  # head_dim = qk_nope + qk_rope for MLA
    return cell + dsa_index_bytes_per_layer(model) * layers


def tokens_in_room(
    model: ModelSpec, cfg: LaunchConfig, vram_bytes: int, mem_fraction_static: float, cell: float
) -> int:
    """Cells of `cell` bytes in the room the fraction leaves after the weights and the state pool
    (`cfg`'s slots), page-aligned; 0 when there is none."""
    rest = _rest_after_weights(model, cfg, vram_bytes, mem_fraction_static)
    rest -= cfg.linear_state_slots * linear_state_bytes_per_request(model, cfg.tp)
    if rest <= 0 or cell <= 0:
        return 0
    page = max(1, cfg.page_size)
    return int(rest // cell) // page * page


def kv_tokens_the_room_holds(model: ModelSpec, cfg: LaunchConfig, vram_bytes: int, mem_fraction_static: float) -> int:
    """The tokens of the KV cell SGLang stores (`kv_cell_bytes`) that the room the fraction leaves
    (after the weights and the state pool) holds: what `profiled_kv_tokens` would be if SGLang counted
    the cell it stores."""
    cell = kv_cell_bytes(model, cfg.tp, cfg.kv_cache_dtype_bytes)
    return tokens_in_room(model, cfg, vram_bytes, mem_fraction_static, cell)


def profiled_kv_tokens(model: ModelSpec, cfg: LaunchConfig, vram_bytes: int, mem_fraction_static: float) -> int:
    """The KV pool SGLang sizes at start from the fraction: what `mem_fraction_static` of the free
    memory at start leaves after the weights and the linear-attention state pool (`cfg`'s slots), in
    tokens of sglang-kt's profiling cell (`profiling_cell_bytes`; for MLA more tokens than that room
    holds), page-aligned; 0 or less is "Not enough memory" at start. `--max-total-tokens` can only
    lower it."""
    cell = profiling_cell_bytes(model, cfg.tp, cfg.kv_cache_dtype_bytes)
    return tokens_in_room(model, cfg, vram_bytes, mem_fraction_static, cell)


def default_max_running_requests(model: ModelSpec, cfg: LaunchConfig) -> int:
    """`--max-running-requests` unset: min(pool / 2, the request pool's rows), the rows being
    min(max(pool / context x 512, 2048), 4096) (each row holds one request's token indices)."""
    pool = cfg.max_total_tokens
    rows = min(max(int(pool / max(1, context_length(model, cfg)) * 512), 2048), 4096)
    return max(1, min(pool // 2, rows))
