"""Per-GPU VRAM of a configuration, following SGLang's own sizing, term by term as docs/memory.md lists them.

Pure functions over (ModelSpec, LaunchConfig). All figures are bytes on one GPU rank; rank 0 is
the largest (it also holds the KT staging buffers), so that is the rank reported.
"""

from __future__ import annotations

import bisect
import math

from dataclasses import asdict, dataclass, replace

from kttune.config import LaunchConfig
from kttune.spec import compressed_attention as compressed
from kttune.spec.methods import (
    KtMethod,
    bytes_per_expert,
    get_method,
    gpu_format,
    layerwise_slot_bytes_per_expert,
    mxfp4_raw_bytes_per_expert,
)
from kttune.spec.model_spec import GDN_CHUNK, ModelSpec
from kttune.units import MIB


# CUDA context, cuBLAS workspaces and allocator slack that exist before SGLang measures free memory.
CUDA_CONTEXT_BYTES = 512 * MIB
# NCCL buffers per rank when TP > 1.
NCCL_BYTES = 512 * MIB
# SGLang's hybrid-SWA pool sizes sliding-window layers at this share of the full pool
# (server_args.swa_full_tokens_ratio default).
SWA_FULL_TOKENS_RATIO = 0.8
# Default decode CUDA-graph batch sizes SGLang captures (cuda_graph_runner: 1, 2, 4, 8, 12, 16, 24, 32, ...).
_CAPTURE_BS = [
    1,
    2,
    4,
    8,
    12,
    16,
    24,
    32,
    40,
    48,
    56,
    64,
    72,
    80,
    88,
    96,
    104,
    112,
    120,
    128,
    136,
    144,
    152,
    160,
    168,
    176,
    184,
    192,
    200,
    208,
    216,
    224,
    232,
    240,
    248,
    256,
]


# Share of the VRAM budget kept free for what the model does not see (allocator fragmentation,
# kernels' workspaces); `kttune search` and `kttune explain` take it as --vram-margin.
DEFAULT_VRAM_MARGIN = 0.05


def usable_vram_bytes(vram_bytes_per_gpu: int, margin: float = DEFAULT_VRAM_MARGIN) -> int:
    """The margin rule, the one place it is applied: a launch fits when its runtime peak is at most
    the budget less `margin` of it."""
    return int(vram_bytes_per_gpu * (1.0 - margin))


def vram_needed_bytes(runtime_peak_bytes: int, margin: float = DEFAULT_VRAM_MARGIN) -> float:
    """The budget a runtime peak needs under the margin rule (the inverse of `usable_vram_bytes`)."""
    return runtime_peak_bytes / (1.0 - margin)


def context_length(model: ModelSpec, cfg: LaunchConfig) -> int:
    return cfg.context_length or model.max_position_embeddings


# DeepSeek Sparse Attention's cache (SGLang NSATokenToKVPool): fp8 values with one fp32 scale per
# this many, for the indexer's keys always and for the latent in an fp8 KV cache; the rope part of
# the latent stays bf16.
DSA_QUANT_BLOCK = 128


def dsa_index_bytes_per_layer(model: ModelSpec) -> int:
    """The sparse-attention indexer's key SGLang caches per token and layer: `index_head_dim` fp8
    bytes and an fp32 scale per DSA_QUANT_BLOCK (132 B for 128); 0 without sparse attention."""
    if model.sparse_attention is None:
        return 0
    idx = model.sparse_attention.index_head_dim
    return idx + idx // DSA_QUANT_BLOCK * 4


def kv_cell_bytes(model: ModelSpec, tp: int, dtype_bytes: int = 2) -> float:
    """KV bytes per token on one rank (SGLang `get_cell_size_per_token`): MLA caches one latent
    (kv_lora_rank + qk_rope_head_dim) per layer, not divided by TP; GQA caches K and V of the rank's
    KV heads. Sliding-window layers count at SWA_FULL_TOKENS_RATIO (hybrid SWA pool). A model with
    sparse attention (`sparse_attention`) also caches its indexer's fp8 key and scale per layer,
    and in an fp8 cache stores the latent as fp8 with scales and the rope part in bf16
    (docs/memory.md#kv-bytes-per-token-kv_cell_bytes). DeepSeek-V4 (compressed attention): the bytes
    SGLang's pools hold per token of the full context at the SWA share SGLang sets when the launch does
    not raise it (kttune.spec.compressed_attention, docs/deepseek-v4.md#the-kv-pools); `kv_pool_bytes`
    takes the launch's own share."""
    if model.compressed_attention is not None:  # DeepSeek-V4: its calculator's cell at the default SWA share
        return model.compressed_attention.bytes_per_full_token(compressed.SWA_RATIO)
    layers = len(model.full_attention_layer_ids) + SWA_FULL_TOKENS_RATIO * len(model.sliding_layer_ids)
    return (_kv_bytes_per_layer(model, tp, dtype_bytes) + dsa_index_bytes_per_layer(model)) * layers


def _kv_bytes_per_layer(model: ModelSpec, tp: int, dtype_bytes: int) -> float:
    """One token's attention cache in one layer on one rank, the sparse-attention indexer's key aside."""
    if model.attention == "mla":
        lora, rope = model.kv_lora_rank, model.qk_rope_head_dim
        if model.sparse_attention and dtype_bytes == 1:
            return lora + lora // DSA_QUANT_BLOCK * 4 + rope * 2
        return (lora + rope) * dtype_bytes
    kv_heads_per_rank = max(1, model.num_kv_heads // tp)
    return kv_heads_per_rank * (model.head_dim + model.v_head_dim) * dtype_bytes


def decode_kv_reads(
    model: ModelSpec, tp: int, dtype_bytes: int = 2, sparse: bool = False
) -> tuple[tuple[float, float], ...]:
    """What one request's decode step reads of its cache on one rank, as (bytes per context token,
    tokens read at most; inf: all of them) terms: full-attention layers read every token;
    sliding-window layers the last `sliding_window`. A sparse-attention model run `sparse` (SGLang's
    nsa backend) reads every token's indexer key in each layer with an indexer of its own
    (`indexer_layer_ids`: IndexShare's shared layers reuse the top-k before them) and the latents of
    the top-k tokens alone; on any
    other backend the indexer is skipped and every latent read, its keys left unread
    (docs/cost-model.md#sparse-attention). Linear-attention layers read their recurrent state and
    write it back whatever the context (`linear_state_bytes_per_request`, twice): a term of one
    token (docs/cost-model.md#linear-attention-layers). Terms of 0 bytes are left out."""
    per_layer = _kv_bytes_per_layer(model, tp, dtype_bytes)
    full = len(model.full_attention_layer_ids)
    terms: list[tuple[float, float]] = [(2.0 * linear_state_bytes_per_request(model, tp), 1.0)]
    if model.compressed_attention is not None:
        terms += compressed.decode_reads(model.compressed_attention, model.num_layers)
    elif model.sparse_attention and sparse:
        terms += [(dsa_index_bytes_per_layer(model) * len(model.indexer_layer_ids), math.inf)]
        terms += [(per_layer * full, float(model.sparse_attention.index_topk))]
    else:
        terms += [(per_layer * full, math.inf)]
    if model.sliding_layer_ids:
        terms += [(per_layer * len(model.sliding_layer_ids), float(model.sliding_window))]
    return tuple((b, cap) for b, cap in terms if b > 0)


def decode_kv_read_bytes(
    model: ModelSpec, tp: int, batch: float, context: float, dtype_bytes: int = 2, sparse: bool = False
) -> float:
    """The cache one decode step of `batch` requests at an average `context` tokens reads on one rank
    (`decode_kv_reads`, each request taken at the average)."""
    return batch * sum(b * min(context, cap) for b, cap in decode_kv_reads(model, tp, dtype_bytes, sparse))


# SGLang's state slots per running request for linear-attention models with the radix cache on
# (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO, model_runner_kv_cache_mixin.py): it runs at most
# `--max-mamba-cache-size // 3` requests at once; the other slots keep cached prefixes' states.
LINEAR_STATE_SLOTS_PER_REQUEST = 3
# The conv state's element (SGLang's default SGLANG_MAMBA_CONV_DTYPE, bf16).
LINEAR_CONV_STATE_BYTES = 2


def has_linear_state(model: ModelSpec) -> bool:
    """Whether the model has linear-attention layers, whose requests each keep a state."""
    return model.linear_attention is not None and bool(model.linear_attention_layer_ids)


def _key_head_groups(model: ModelSpec, tp: int) -> int:
    """The linear-attention key heads over all ranks: the model's, or where they do not split over
    the ranks, tp of them (SGLang's extra_groups_for_head_shards adds tp - groups: the groups
    replicated over the shards)."""
    groups = model.linear_attention.num_key_heads
    return tp if groups % tp else groups


def linear_conv_channels(model: ModelSpec, tp: int) -> int:
    """The channels of a linear-attention layer's short convolution on one rank: its q, k and v
    projections, (value_dim + 2 x key heads x key_head_dim) / tp, key heads that do not split over
    the ranks replicated up to tp first (SGLang's conv state shape; the prefill convolution runs over
    the same channels). 0 for a model without such layers."""
    lin = model.linear_attention
    if lin is None:
        return 0
    return (lin.value_dim + 2 * _key_head_groups(model, tp) * lin.key_head_dim) // tp


def linear_state_bytes_per_request(model: ModelSpec, tp: int) -> int:
    """One request's recurrent state on one rank over every linear-attention layer (SGLang
    `Mamba2StateShape.create` and `mamba_cache_per_req`, docs/memory.md#linear-attention-state): the
    conv state, (value_dim + 2 x key heads x key_head_dim) / tp channels x (conv kernel - 1), and the
    temporal state, value heads / tp x value_head_dim x key_head_dim. Key heads that do not split
    over the ranks are replicated up to tp first. 0 for a model without such layers."""
    lin = model.linear_attention
    if not has_linear_state(model):
        return 0
    conv = linear_conv_channels(model, tp) * (lin.conv_kernel - 1) * LINEAR_CONV_STATE_BYTES
    temporal = lin.num_value_heads // tp * lin.value_head_dim * lin.key_head_dim * lin.ssm_state_bytes
    return (conv + temporal) * len(model.linear_attention_layer_ids)


def linear_state_slots(model: ModelSpec, cfg: LaunchConfig) -> int:
    """The state pool's slots (`--max-mamba-cache-size`): the configuration's, else what kttune
    launches with, LINEAR_STATE_SLOTS_PER_REQUEST per running request. 0 without linear layers."""
    if not has_linear_state(model):
        return 0
    return cfg.linear_state_slots or LINEAR_STATE_SLOTS_PER_REQUEST * cfg.max_running_requests


def with_linear_state_slots(model: ModelSpec, cfg: LaunchConfig) -> LaunchConfig:
    """`cfg` with its state slots spelled out (what kttune launches with when it leaves them 0)."""
    slots = linear_state_slots(model, cfg)
    return cfg if slots == cfg.linear_state_slots else replace(cfg, linear_state_slots=slots)


def linear_state_pool_bytes(model: ModelSpec, cfg: LaunchConfig) -> int:
    """The state pool SGLang allocates at start (MambaPool: its slots and one spare)."""
    slots = linear_state_slots(model, cfg)
    return (slots + 1) * linear_state_bytes_per_request(model, cfg.tp) if slots else 0


def kv_pool_bytes(model: ModelSpec, cfg: LaunchConfig) -> float:
    """The KV pool of `cfg.max_total_tokens` tokens (DeepSeek-V4: its pools at the SWA share SGLang
    sets for the launch's chunk and pool, `compressed_attention.pool_bytes`)."""
    if model.compressed_attention is not None:
        return compressed.pool_bytes(model.compressed_attention, cfg.max_total_tokens, cfg.chunked_prefill_size)
    return cfg.max_total_tokens * kv_cell_bytes(model, cfg.tp, cfg.kv_cache_dtype_bytes)


def req_to_token_pool_bytes(model: ModelSpec, cfg: LaunchConfig) -> int:
    """`max_running_requests x (context_len + 4)` int32 (SGLang req_to_token pool)."""
    return cfg.max_running_requests * (context_length(model, cfg) + 4) * 4


def gpu_expert_bytes(model: ModelSpec, method: KtMethod, cfg: LaunchConfig) -> int:
    """Resident GPU experts: n per MoE layer, each sharded I/tp (part of SGLang's 'weights'). MXFP4 with
    a layerwise threshold keeps each resident expert raw (fp32 scales) beside its swizzled copy, for the
    full-GPU prefill fallback (sglang-kt's `mxfp4_deepseek.py`, `_keep_raw_for_full_gpu_fallback`;
    docs/memory.md#layerwise-extra)."""
    fmt = gpu_format(method, model.checkpoint_format)
    i_tp = model.moe_intermediate_size // cfg.tp
    per = bytes_per_expert(fmt, model.hidden_size, i_tp)
    if fmt == "mxfp4" and method.layerwise and cfg.gpu_prefill_token_threshold > 0:
        per += mxfp4_raw_bytes_per_expert(model.hidden_size, i_tp)
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


BF16 = 2
FP32 = 4


@dataclass(frozen=True)
class ActivationPhases:
    """Activation bytes of one prefill forward of M tokens on one rank, by phase of a decoder layer
    as SGLang runs it (docs/memory.md lists the tensors and the upstream code). A layer's phases run
    one after the other and PyTorch's caching allocator reuses what a finished phase freed, so the
    peak is `persistent` plus the largest phase, not the sum."""

    persistent: int  # hidden_states and residual, alive across every layer of the forward
    attention: int  # input norm, q/k/v (MLA: latent, expansion or absorbed q), attention output, o_proj (+ all-reduce)
    router: int  # post-attention norm, router logits and scores in fp32, top-k ids and weights
    hybrid_moe: int  # hybrid path: GPU-expert fused MoE, gpu_out/cpu_out, shared experts (+ all-reduce)
    layerwise_moe: int  # layerwise path: fused MoE over every expert of the layer (0 when it cannot fire)

    @property
    def phase_peak_bytes(self) -> int:
        return max(self.attention, self.router, self.hybrid_moe, self.layerwise_moe)

    @property
    def largest_phase(self) -> str:
        return max(
            ("attention", self.attention),
            ("router", self.router),
            ("hybrid_moe", self.hybrid_moe),
            ("layerwise_moe", self.layerwise_moe),
            key=lambda kv: kv[1],
        )[0]

    @property
    def peak_bytes(self) -> int:
        return self.persistent + self.phase_peak_bytes


# SGLang's MLA prefill over a cached prefix (deepseek_common/attention_backend_handler.py,
# docs/memory.md#activations-by-phase): the triton backend (what `kttune` launches MLA models
# with) runs the absorbed form whenever there is a prefix; fa3, flashinfer and flashmla expand the
# whole prefix with the new tokens at once ("one shot") from this many prefix tokens on
# (SGLANG_CHUNKED_PREFIX_CACHE_THRESHOLD), in pieces of at most MLA_MAX_KV_CHUNK_TOKENS.
MLA_CHUNKED_PREFIX_THRESHOLD = 8192
MLA_MAX_KV_CHUNK_TOKENS = 128 * 1024
MLA_ONE_SHOT_BACKENDS = ("fa3", "flashinfer", "flashmla")
# The --attention-backend kttune's launch commands set (kttune.search.launch), by attention kind.
# DeepSeek-V4 runs SGLang's "compressed" backend whatever the flag says (server_args.py forces it).
LAUNCH_ATTENTION_BACKEND = {"mla": "triton", "gqa": "flashinfer", "csa": "compressed"}
# A command that leaves --attention-backend unset: SGLang picks one by the GPU
# (`sglang_default_mla_backend`; a sparse-attention model: nsa).
SGLANG_DEFAULT_BACKEND = "auto"
# Not an SGLang backend: the path runner's attention, which expands the whole cached latent with the
# new tokens in every forward (kttune.kernels.decoder; docs/path-runner.md#memory).
EXPAND_EVERY_PREFIX = "expand-every-prefix"


def launch_attention_backend(model: ModelSpec, cfg: LaunchConfig) -> str:
    """The --attention-backend a launch runs: its own, else what kttune launches the attention kind
    with. SGLANG_DEFAULT_BACKEND (SGLang's pick, which depends on the GPU: callers that know it pass
    the pick) reads as nsa for a sparse-attention model and, for memory, as fa3: its one-shot
    expansion is the larger."""
    backend = cfg.attention_backend or LAUNCH_ATTENTION_BACKEND[model.attention]
    if backend == SGLANG_DEFAULT_BACKEND:
        return "nsa" if model.sparse_attention else "fa3"
    return backend


def sglang_default_mla_backend(sm: int | None) -> str:
    """SGLang's attention backend for an MLA model when the flag is unset (server_args.py
    `_handle_attention_backend_compatibility`): fa3 on Hopper (SM 90), flashinfer from SM 100 to 109,
    triton elsewhere and on a GPU of unknown compute capability."""
    if sm == 90:
        return "fa3"
    if sm is not None and 100 <= sm < 110:
        return "flashinfer"
    return "triton"


def mla_attention_form(prefix: int, backend: str = "triton") -> str:
    """Which MLA prefill form SGLang runs for a forward over `prefix` cached tokens: "expanded"
    (no prefix), "absorbed" or "one_shot" (`EXPAND_EVERY_PREFIX`: one_shot whenever there is a
    prefix)."""
    if prefix <= 0:
        return "expanded"
    if backend == EXPAND_EVERY_PREFIX:
        return "one_shot"
    if backend in MLA_ONE_SHOT_BACKENDS and prefix >= MLA_CHUNKED_PREFIX_THRESHOLD:
        return "one_shot"
    return "absorbed"


def attention_phase_bytes(
    model: ModelSpec,
    tokens: int,
    tp: int,
    prefix: int | None = None,
    backend: str = "triton",
    form: str | None = None,
    longest_prefix: int = 0,
) -> int:
    """Alive at once in one layer's attention (SGLang deepseek_v2.py / qwen3_moe.py forward): the
    normed input, the projections of the rank's heads (with the output gate where the model has one:
    Qwen3-Next's `qkv_proj` projects q and a gate of q's size) and the attention output, o_proj's
    output and, at TP > 1, the all-reduce output. MLA: with `prefix` given, the form SGLang runs for it on
    `backend` (`mla_attention_form`); without, the larger of the expanded path (kv_b_proj
    expands the latent to per-head K and V: no prefix) and the absorbed one (q projected into the
    latent space: chunks after the first), and on a backend that expands a long prefix in one shot,
    that form at `longest_prefix` (the longest the launch admits) where it reaches
    MLA_CHUNKED_PREFIX_THRESHOLD. The one-shot form expands the fetched latent of the prefix and the
    new tokens together: kv_b_proj's output and the keys for every one of them. `form` overrides the
    dispatch (the path runner expands every prefix: kttune/calibration/runner.py)."""
    m, h = tokens, model.hidden_size
    heads = max(1, model.num_attention_heads // tp)
    per = 2 * h  # normed input, o_proj output
    if tp > 1:
        per += h
    if model.compressed_attention is not None:
        context = (prefix if prefix is not None else longest_prefix) + m
        return compressed_attention_phase_bytes(model, m, heads, context) + m * per * BF16
    if model.attention != "mla":
        kv_heads = max(1, model.num_kv_heads // tp)
        per += (heads + 2 * kv_heads) * model.head_dim + heads * model.v_head_dim
        if model.attention_output_gate:  # Qwen3-Next: the fused q projection holds the gate too
            per += heads * model.head_dim
        return m * per * BF16
    rope, lora = model.qk_rope_head_dim, model.kv_lora_rank
    nope = model.head_dim - rope
    common = model.q_lora_rank + heads * model.head_dim + (lora + rope)  # q_a, q, kv_a latent
    forms = {
        "expanded": heads * (nope + model.v_head_dim) + heads * model.head_dim + heads * model.v_head_dim,
        "absorbed": heads * (lora + rope) + heads * lora + heads * model.v_head_dim,
        "one_shot": heads * model.v_head_dim,
    }

    def form_bytes(f: str, p: int) -> int:
        kv_rows = 0
        if f == "one_shot":
            t = min(p + m, MLA_MAX_KV_CHUNK_TOKENS)
            kv_rows = t * (heads * (nope + model.v_head_dim) + heads * model.head_dim + (lora + rope))
        return m * (common + forms[f]) + kv_rows

    if prefix is not None:
        worst = form_bytes(form or mla_attention_form(prefix, backend), prefix)
    else:
        worst = max(form_bytes("expanded", 0), form_bytes("absorbed", 0))
        if mla_attention_form(longest_prefix, backend) == "one_shot":
            worst = max(worst, form_bytes("one_shot", longest_prefix))
    return (m * per + worst) * BF16 + (m * sparse_indexer_bytes_per_token(model) if backend == "nsa" else 0)


def compressed_attention_phase_bytes(model: ModelSpec, tokens: int, heads: int, context: int) -> int:
    """Alive at once in a c4 layer's attention (the largest of DeepSeek-V4's layer kinds; sglang's
    deepseek_v4.py `MQALayer` and the compressed backend, docs/deepseek-v4.md#activations), on a rank
    of `heads` heads, over a sequence of `context` tokens, besides the normed input and the output:
    the hyper-connections' streams (`hc_mult` x hidden, in and out), the q LoRA latent, q and the
    attention output (heads x head_dim), the shared key-value latent, wo_a's grouped output; the
    compressors' fp32 kv-and-score rows (two overlapping groups of the latent and of the indexer's
    key); the indexer's query (bf16 and fp8), its per-head weights (fp32), the top-k and window
    indices (int32, twice) and its fp32 logits over every compressed entry of the sequence."""
    ca = model.compressed_attention
    h, m = model.hidden_size, tokens
    bf16 = 2 * ca.hc_mult * h + model.q_lora_rank + 2 * heads * ca.head_dim + ca.head_dim
    bf16 += ca.o_groups * ca.o_lora_rank
    fp32 = 2 * 2 * (ca.head_dim + ca.index_head_dim) + ca.index_heads
    index = ca.index_heads * ca.index_head_dim * (BF16 + 1) + 2 * (ca.index_topk + ca.window) * 4
    logits = -(-context // 4) * FP32
    return m * (bf16 * BF16 + fp32 * FP32 + index + logits)


def linear_attention_phase_bytes(model: ModelSpec, tokens: int, tp: int) -> int:
    """Alive at once in one Gated DeltaNet layer's prefill (docs/memory.md#activations-by-phase), at
    the moment FLA's `chunk_fwd_o` runs, when every tensor below is still referenced: the layer's
    normed input and out_proj's output (and the all-reduce's at TP > 1); from
    `Qwen3GatedDeltaNet.forward` (models/qwen3_next.py) the projections `qkvz` (2 keys + 2 values)
    and `ba` (2 a value head), their split `mixed_qkv` (2 keys + values), `z`, `b` and `a`; from the
    GDN backend's `forward_extend` the causal conv's output (2 keys + values) and the fp32 gates `g`
    and `beta`; from FLA's `chunk_gated_delta_rule` (layers/attention/fla/chunk.py) q and k
    l2-normalised anew, g's cumulative sum (fp32), the tile-local inverse `A` (bf16, C a head), the
    WY products `w` (a key per value head) and `u`, `v_new` and the output `o` (a value each), and
    the state of every tile `h` (K x V a value head and tile of C = GDN_CHUNK tokens). Keys are the
    rank's key heads x key width (`_key_head_groups`, as the state counts them), values its value
    heads x value width. 0 for a model without linear-attention layers."""
    lin = model.linear_attention
    if not has_linear_state(model) or tokens <= 0:
        return 0
    m, h = tokens, model.hidden_size
    vh = max(1, lin.num_value_heads // tp)
    keys, values = _key_head_groups(model, tp) * lin.key_head_dim // tp, vh * lin.value_head_dim
    per = 2 * h + (h if tp > 1 else 0)  # normed input, out_proj output, all-reduce output
    per += 2 * keys + 2 * values + 2 * vh  # in_proj_qkvz, in_proj_ba
    per += (2 * keys + values) + values + 2 * vh  # mixed_qkv, z, b, a
    per += 2 * keys + values  # the causal conv's output
    per += 2 * keys  # q, k l2-normalised
    per += GDN_CHUNK * vh  # A, one row of the tile's inverse a value head
    per += vh * lin.key_head_dim + 3 * values  # w; u, v_new, o
    fp32 = 3 * vh * m * FP32  # g, its cumulative sum, beta
    tiles = -(-m // GDN_CHUNK)
    states = tiles * vh * lin.key_head_dim * lin.value_head_dim * BF16
    return m * per * BF16 + fp32 + states


def sparse_indexer_bytes_per_token(model: ModelSpec) -> int:
    """What SGLang's sparse-attention indexer holds per new token at its peak, beside the attention's
    own tensors (`nsa_indexer.py` `forward_cuda`, docs/memory.md#activations-by-phase): its bf16
    query (index heads x index head dim) and that query in fp8 while it scores, and the top-k token
    ids (int32) it returns, which the attention then turns into a page table of the same size; 0
    without sparse attention. Its fp32 logits are not counted: SGLang splits them to fit half the
    memory left free."""
    dsa = model.sparse_attention
    if dsa is None:
        return 0
    query = dsa.index_heads * dsa.index_head_dim
    return max(query * (BF16 + 1) + dsa.index_topk * 4, 2 * dsa.index_topk * 4)


def router_phase_bytes(model: ModelSpec, tokens: int) -> int:
    """The MoE gate (SGLang topk.py): normed input, fp32 router logits plus the scores grouped top-k
    derives from them, and the top-k ids (int32) and weights (fp32)."""
    return tokens * (model.hidden_size * BF16 + 2 * model.num_experts * FP32 + model.top_k * (4 + FP32))


def _shared_and_output_bytes(model: ModelSpec, tokens: int, tp: int) -> int:
    """The MoE block's output (routed plus shared), the shared experts' gate+up and activated
    intermediates and, at TP > 1, the all-reduce output. The normed MoE input is the persistent
    hidden states (SGLang's add-norm writes it in place), not counted again."""
    h = model.hidden_size
    shared = 3 * model.shared_expert_intermediate_size // tp
    return tokens * (h + shared + (h if tp > 1 else 0)) * BF16


def hybrid_moe_phase_bytes(model: ModelSpec, cfg: LaunchConfig, tokens: int) -> int:
    """The hybrid CPU/GPU MoE (kt_ep_wrapper): fused MoE over the GPU experts when there are any,
    the gpu_out and cpu_out buffers (cpu_out copied back from pinned host memory), shared experts."""
    fused = (
        moe_activation_bytes(model, tokens, cfg.tp, w8a8_activations(get_method(cfg.method)))
        if cfg.num_gpu_experts > 0
        else 0
    )
    return fused + 2 * tokens * model.hidden_size * BF16 + _shared_and_output_bytes(model, tokens, cfg.tp)


def activation_phases(
    model: ModelSpec,
    cfg: LaunchConfig,
    tokens: int | None = None,
    prefix: int | None = None,
    attention_backend: str | None = None,
    linear_recurrence: bool = True,
) -> ActivationPhases:
    """The phases of a prefill forward of `tokens` (default: the chunk) after `prefix` cached tokens
    (default: the worst of the MLA forms the backend runs over any prefix the launch admits;
    `attention_phase_bytes`), on `attention_backend` (default: the launch's, `launch_attention_backend`).
    The attention phase is the larger of a full-attention layer's and, with `linear_recurrence` (what
    SGLang runs; the path runner runs a linear layer's projections alone), a linear-attention
    layer's (`linear_attention_phase_bytes`). The layerwise path runs the chunk when it can fire;
    shorter prompts take the hybrid path."""
    m = tokens if tokens is not None else cfg.chunked_prefill_size
    backend = attention_backend or launch_attention_backend(model, cfg)
    longest_prefix = max(0, min(context_length(model, cfg), cfg.max_total_tokens) - m)
    method = get_method(cfg.method)
    lw = cfg.layerwise_can_fire(method.layerwise) and m >= cfg.gpu_prefill_token_threshold
    hybrid_tokens = min(m, cfg.gpu_prefill_token_threshold - 1) if lw else m
    layerwise = 0
    w8a8 = w8a8_activations(method)
    if lw:
        layerwise = (
            moe_activation_bytes(model, m, cfg.tp, w8a8)
            + _shared_and_output_bytes(model, m, cfg.tp)
            + layerwise_transient_bytes(model, method, cfg.tp)
        )
    return ActivationPhases(
        persistent=2 * m * model.hidden_size * BF16,
        attention=max(
            attention_phase_bytes(model, m, cfg.tp, prefix=prefix, backend=backend, longest_prefix=longest_prefix),
            linear_attention_phase_bytes(model, m, cfg.tp) if linear_recurrence else 0,
        ),
        router=router_phase_bytes(model, m),
        hybrid_moe=hybrid_moe_phase_bytes(model, cfg, max(0, hybrid_tokens)),
        layerwise_moe=layerwise,
    )


def prefill_activation_bytes(model: ModelSpec, cfg: LaunchConfig, tokens: int | None = None) -> int:
    """Peak activation bytes of one prefill forward: persistent plus the largest phase."""
    return activation_phases(model, cfg, tokens).peak_bytes


# SGLang's fused MoE runs the tokens of a forward in pieces of at most this many and sizes its
# intermediate caches for one piece (fused_moe_triton/fused_moe.py, CHUNK_SIZE).
FUSED_MOE_CHUNK_TOKENS = 64 * 1024


def w8a8_activations(method: KtMethod) -> bool:
    """Whether SGLang's GPU fused MoE for this method quantises its activations to fp8 (w8a8: the FP8
    methods' block and per-channel kernels); bf16 and int4 weight-only kernels read bf16."""
    return method.name in ("FP8", "FP8_PERCHANNEL")


def moe_activation_bytes(model: ModelSpec, tokens: int, tp: int, w8a8: bool = False) -> int:
    """Fused-MoE buffers for `tokens` over all experts (sglang fused_moe_triton/fused_moe.py): one
    cache of M*k*max(2I_tp, H) bf16 that gate/up (cache1) and the down output (cache3) share, the
    activated cache2 of M*k*I_tp, with M = min(tokens, FUSED_MOE_CHUNK_TOKENS); plus the output
    tokens*H, which is not chunked. w8a8 kernels also quantise the down GEMM's input (cache2) to fp8,
    with an fp32 scale per 128-wide group: the larger of their two quantised inputs."""
    i_tp = model.moe_intermediate_size // tp
    k = model.top_k
    h = model.hidden_size
    m = min(tokens, FUSED_MOE_CHUNK_TOKENS)
    quant = max(m * k * i_tp * (1 + FP32 / 128), m * h * (1 + FP32 / 128)) if w8a8 else 0
    return int(m * k * max(2 * i_tp, h) * 2 + m * k * i_tp * 2 + tokens * h * 2 + quant)


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
    adds the layerwise full-layer slot (allocated lazily by the first long prompt, then kept) and the
    activation peak of a chunk-sized prefill: the persistent activations plus the LARGEST phase
    (`ActivationPhases`), since SGLang frees a phase's temporaries before the next phase runs."""

    cuda_context: int
    non_expert_weights: int
    gpu_experts: int
    kv_cache: int
    linear_state: int  # linear-attention layers' per-request states (Qwen3-Next, Qwen3.5); 0 without
    req_to_token_pool: int
    cuda_graphs: int
    kt_staging: int
    layerwise_slot: int
    activations_persistent: int
    attention_phase: int
    router_phase: int
    hybrid_moe_phase: int
    layerwise_moe_activations: int  # the layerwise MoE phase without its transients
    layerwise_transients: int

    @property
    def startup_bytes(self) -> int:
        return (
            self.cuda_context
            + self.non_expert_weights
            + self.gpu_experts
            + self.kv_cache
            + self.linear_state
            + self.req_to_token_pool
            + self.cuda_graphs
            + self.kt_staging
        )

    @property
    def phase_peak_bytes(self) -> int:
        return max(
            self.attention_phase,
            self.router_phase,
            self.hybrid_moe_phase,
            self.layerwise_moe_activations + self.layerwise_transients,
        )

    @property
    def largest_phase(self) -> str:
        return max(
            ("attention", self.attention_phase),
            ("router", self.router_phase),
            ("hybrid_moe", self.hybrid_moe_phase),
            ("layerwise_moe", self.layerwise_moe_activations + self.layerwise_transients),
            key=lambda kv: kv[1],
        )[0]

    @property
    def prefill_activations(self) -> int:
        """The activation peak: persistent plus the largest phase."""
        return self.activations_persistent + self.phase_peak_bytes

    @property
    def layerwise_extra_bytes(self) -> int:
        return self.layerwise_slot + self.layerwise_moe_activations + self.layerwise_transients

    @property
    def runtime_peak_bytes(self) -> int:
        return self.startup_bytes + self.layerwise_slot + self.prefill_activations

    def items(self) -> list[tuple[str, int]]:
        return [(k, v) for k, v in asdict(self).items()]

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(
            startup_bytes=self.startup_bytes,
            layerwise_extra_bytes=self.layerwise_extra_bytes,
            prefill_activations=self.prefill_activations,
            largest_phase=self.largest_phase,
            runtime_peak_bytes=self.runtime_peak_bytes,
        )
        return d


def vram_breakdown(model: ModelSpec, cfg: LaunchConfig) -> VramBreakdown:
    method = get_method(cfg.method)
    lw = cfg.layerwise_can_fire(method.layerwise)
    ph = activation_phases(model, cfg)
    transients = layerwise_transient_bytes(model, method, cfg.tp) if ph.layerwise_moe else 0
    return VramBreakdown(
        cuda_context=CUDA_CONTEXT_BYTES + (NCCL_BYTES if cfg.tp > 1 else 0),
        non_expert_weights=int(model.non_expert_bytes / cfg.tp),
        gpu_experts=gpu_expert_bytes(model, method, cfg),
        kv_cache=int(kv_pool_bytes(model, cfg)),
        linear_state=linear_state_pool_bytes(model, cfg),
        req_to_token_pool=req_to_token_pool_bytes(model, cfg),
        cuda_graphs=cuda_graph_bytes(model, cfg),
        kt_staging=staging_bytes(model, cfg),
        layerwise_slot=layerwise_slot_bytes(model, method, cfg.tp) if lw else 0,
        activations_persistent=ph.persistent,
        attention_phase=ph.attention,
        router_phase=ph.router,
        hybrid_moe_phase=ph.hybrid_moe,
        layerwise_moe_activations=ph.layerwise_moe - transients,
        layerwise_transients=transients,
    )


def max_kv_tokens_that_fit(model: ModelSpec, cfg: LaunchConfig, vram_budget_bytes: int, page: int = 1024) -> int:
    """The largest --max-total-tokens (a multiple of `page`) whose runtime peak fits the budget; 0 if
    none does."""
    without_kv = vram_breakdown(model, cfg.__class__(**{**cfg.to_dict(), "max_total_tokens": 0}))
    free = vram_budget_bytes - without_kv.runtime_peak_bytes
    if model.compressed_attention is not None:
        return _compressed_tokens_that_fit(model, cfg, vram_budget_bytes, without_kv, page)
    cell = kv_cell_bytes(model, cfg.tp, cfg.kv_cache_dtype_bytes)
    if free <= 0 or cell <= 0:
        return 0
    return int(free // cell) // page * page


def _compressed_tokens_that_fit(
    model: ModelSpec, cfg: LaunchConfig, budget: int, without_kv: VramBreakdown, page: int
) -> int:
    """DeepSeek-V4's largest pool (pages of `page`) whose runtime peak fits: the pools alone give an
    upper bound (`compressed_attention.full_tokens_in`), and the peak also grows with the pool through
    the indexer's logits over every compressed entry of the longest sequence
    (`compressed_attention_phase_bytes`), so the peak itself is bisected below that bound."""
    free = budget - without_kv.runtime_peak_bytes
    hi = compressed.full_tokens_in(model.compressed_attention, free, cfg.chunked_prefill_size, page) // page
    # SGLang's first sizing caps the pool at the room over its larger cell: the fraction that leaves it
    # must stay within MAX_STATIC_SHARE of the budget
    first = compressed.first_pass_cell_bytes(model.compressed_attention, model.num_layers)
    hi = min(hi, int((MAX_STATIC_SHARE * budget - without_kv.startup_bytes) // first) // page)
    if hi <= 0:
        return 0

    def too_big(pages: int) -> bool:
        return vram_breakdown(model, replace(cfg, max_total_tokens=pages * page)).runtime_peak_bytes > budget

    return bisect.bisect_left(range(1, hi + 1), True, key=too_big) * page


def kv_start_room(model: ModelSpec, cfg: LaunchConfig) -> float:
    """The KV room SGLang's start must see for its pool to reach `cfg.max_total_tokens`: the pool
    itself, or for DeepSeek-V4 at least that many tokens of its first sizing's cell
    (`compressed_attention.first_pass_cell_bytes`), which caps the pool where --max-total-tokens is
    given; the part of it the pool does not allocate stays free at run time."""
    pool = kv_pool_bytes(model, cfg)
    if model.compressed_attention is None:
        return pool
    return max(
        pool, cfg.max_total_tokens * compressed.first_pass_cell_bytes(model.compressed_attention, model.num_layers)
    )


# The most of the budget the static pools may take (--mem-fraction-static's cap, 0.98, less its 1% margin).
MAX_STATIC_SHARE = 0.97


def mem_fraction_static(breakdown: VramBreakdown, vram_budget_bytes: int, kv_room: float | None = None) -> float:
    """--mem-fraction-static that leaves SGLang's static pools (weights, KV, graphs) their room and
    the runtime peak its headroom: static share of the budget plus a 1% margin, capped at 0.98.
    `kv_room` (`kv_start_room`) replaces the KV pool where SGLang's start must see more than it
    allocates."""
    static = breakdown.startup_bytes + max(0.0, (kv_room or 0.0) - breakdown.kv_cache)
    frac = static / vram_budget_bytes + 0.01
    return round(min(0.98, max(0.05, frac)), 3)
