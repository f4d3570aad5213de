"""Physical features of each timed operation: what a cost term is linear in. One place for the
formulas the probes' curves are fitted with and the predictions are made with."""

from __future__ import annotations

import math

from kttune.spec.model_spec import GDN_CHUNK


def expected_experts_touched(tokens: float, top_k: int, experts_total: int, experts_subset: int) -> float:
    """Distinct experts of a subset of `experts_subset` (out of `experts_total`) hit by `tokens`
    tokens routing to `top_k` experts each, under uniform routing: subset * (1 - (1 - k/E)^M)."""
    if experts_subset <= 0 or tokens <= 0:
        return 0.0
    p_miss = (1.0 - top_k / experts_total) ** tokens
    return experts_subset * (1.0 - p_miss)


def moe_features(
    tokens: float, hidden: int, inter: int, experts_total: int, top_k: int, experts_subset: int, bytes_per_expert: int
) -> tuple[float, float, float]:
    """(1, bytes of expert weights touched, flops) of an MoE forward over a subset of experts.
    Flops: 2 x 3HI per token-expert pair routed into the subset (gate, up, down)."""
    pairs = tokens * top_k * experts_subset / experts_total
    touched = expected_experts_touched(tokens, top_k, experts_total, experts_subset)
    return (1.0, touched * bytes_per_expert, 2.0 * 3 * hidden * inter * pairs)


MOE_FEATURES = ("overhead_ms", "ms_per_byte", "ms_per_flop")


def matrix_work_per_flop(hidden: int, inter: int, output_flops: float) -> float:
    """The matrix-matrix kernel's work per flop of an expert of `hidden` x `inter`, with a cost of
    `output_flops` flop-equivalents per output element (`kttune.spec.kt_classes.MATRIX_OUTPUT_FLOPS`):
    each routed pair runs 6HI flops and writes 2I + H elements, so 1 + r (2I + H) / 6HI."""
    return 1.0 + output_flops * (2.0 * inter + hidden) / (6.0 * hidden * inter)


def kt_gemm_split(
    moe_row: tuple[float, float, float], tokens: float, matmul_above: int | None, matrix_work: float = 1.0
) -> tuple[float, float, float, float]:
    """A kt-kernel MoE forward's `moe_features` row (1, bytes touched, flops) as (1, bytes touched,
    flops on the vector-matrix kernel, work on the matrix-matrix kernel): its flops go to the
    kernel its length selects (`kt_matmul_above`), all to the second for a class with one kernel;
    the second's are weighted by `matrix_work` (`matrix_work_per_flop`: its cost per output element
    in flop-equivalents)."""
    one, nbytes, flops = moe_row
    if matmul_above is not None and tokens <= matmul_above:
        return (one, nbytes, flops, 0.0)
    return (one, nbytes, 0.0, flops * matrix_work)


CPU_MOE_FEATURES = ("overhead_ms", "ms_per_byte", "ms_per_flop_vector", "ms_per_flop")


def attention_prefill_flops(tokens: float, prefix: float, heads: int, qk_dim: int, v_dim: int) -> float:
    """Causal attention flops of `tokens` new tokens after `prefix` cached ones, one layer:
    QK^T and PV over an average context of prefix + (tokens+1)/2."""
    ctx = prefix + (tokens + 1) / 2.0
    return 2.0 * tokens * ctx * heads * (qk_dim + v_dim)


ATTENTION_FEATURES = ("overhead_ms", "ms_per_flop")


def causal_pairs(tokens: float, prefix: float, cap: float = float("inf")) -> float:
    """Query-key pairs of `tokens` new tokens after `prefix` cached ones, each query seeing every
    earlier token and itself, at most `cap` of them: sum over i = 1..tokens of min(prefix + i, cap)."""
    if tokens <= 0:
        return 0.0
    below = min(tokens, max(0.0, cap - prefix))  # queries that see fewer than `cap` tokens
    seen = below * prefix + below * (below + 1) / 2.0
    return seen if below >= tokens else seen + (tokens - below) * cap


def mla_latent_attention_flops(
    tokens: float, prefix: float, heads: int, kv_lora_rank: int, rope_dim: int, cap: float = float("inf")
) -> float:
    """MLA attention in the latent ("absorbed") form on one layer: each query, per head, against at
    most `cap` of its causal context's latents, q.k over kv_lora + rope and p.v over kv_lora."""
    return 2.0 * causal_pairs(tokens, prefix, cap) * heads * ((kv_lora_rank + rope_dim) + kv_lora_rank)


def sparse_attention_prefill_work(
    tokens: float,
    prefix: float,
    heads: int,
    kv_lora_rank: int,
    rope_dim: int,
    index_topk: int,
    index_heads: int,
    index_head_dim: int,
) -> tuple[float, float, float]:
    """DeepSeek Sparse Attention on one layer, the form SGLang's sparse prefill runs
    (docs/cost-model.md#sparse-attention): (BF16 attention flops, FP8 indexer flops, indexer logit
    bytes). Each query attends to min(context, topk) tokens in MLA's latent form, q.k over
    kv_lora + rope and p.v over kv_lora per head; the indexer scores every causal query-key pair
    with `index_heads` heads of `index_head_dim` in FP8 and writes one fp32 logit per pair, which the
    top-k reads back. The absorbed projections (q_nope into the latent, the latent out to v) are
    kv_b_proj's weights applied per query, counted with the layer's dense matmuls."""
    main = mla_latent_attention_flops(tokens, prefix, heads, kv_lora_rank, rope_dim, index_topk)
    pairs = causal_pairs(tokens, prefix)
    index = 2.0 * pairs * index_heads * index_head_dim
    return main, index, 8.0 * pairs


def gated_delta_rule_prefill_work(
    tokens: float, heads: int, key_head_dim: int, value_head_dim: int, chunk: int = GDN_CHUNK
) -> tuple[float, float]:
    """A Gated DeltaNet layer's recurrence over a prefill forward of `tokens` tokens in the chunked
    form SGLang runs (FLA's `chunk_gated_delta_rule_fwd`): (flops, bytes) over `heads` value heads of
    key width K and value width V, the tokens in tiles of C = `chunk` (the last one padded). Per tile
    and head: A = beta k k^T within the tile, 2 C^2 K (chunk_scaled_dot_kkt_fwd); w = T (beta k) and
    u = T (beta v), 2 C^2 (K + V) (recompute_w_u_fwd); v_new = u - w h and h <- h + k^T v_new,
    4 C K V (chunk_gated_delta_rule_fwd_h); o = q h + (q k^T, masked) v_new, 2 C K V + 2 C^2 (K + V)
    (chunk_fwd_o). The triangular inverse T (solve_tril, about C^3 / 3 multiply-adds a tile: 1.5% at C = 64 and 128-wide heads) is left
    out. Bytes: the state h of every tile, written by fwd_h in bf16 and read back by chunk_fwd_o."""
    if tokens <= 0:
        return 0.0, 0.0
    tiles = math.ceil(tokens / chunk)
    k, v, c = key_head_dim, value_head_dim, chunk
    flops = tiles * heads * (2.0 * c * c * (3 * k + 2 * v) + 6.0 * c * k * v)
    return flops, 2.0 * tiles * heads * k * v * 2


def causal_conv1d_prefill_bytes(tokens: float, channels: int, elem_bytes: int = 2) -> float:
    """The short causal convolution of a Gated DeltaNet layer in a prefill forward of `tokens` tokens
    (SGLang's `causal_conv1d_fn` over the projected q, k and v channels, `channels` on the rank):
    it reads every token's channels and writes as many back, in bf16. Its 2 x kernel flops a channel
    and token (8 at kernel 4: 2 flops a byte moved) and its weights and carried state are small
    beside those bytes, so the bytes are its cost."""
    if tokens <= 0:
        return 0.0
    return 2.0 * elem_bytes * tokens * channels


def attention_block_flops(tokens: float, heads: int, qk_dim: int, v_dim: int, block_params: int) -> float:
    """One attention block of `tokens` tokens from an empty cache (the attention-block probe's
    point): its causal attention plus 2 flops per weight per token for the projections and the router."""
    return attention_prefill_flops(tokens, 0, heads, qk_dim, v_dim) + 2.0 * tokens * block_params


def gemm_features(tokens: float, k_dim: int, n_dim: int) -> tuple[float, float, float]:
    """(1, weight bytes (bf16), flops) of a [tokens, k] x [k, n] matmul."""
    return (1.0, 2.0 * k_dim * n_dim, 2.0 * tokens * k_dim * n_dim)


GEMM_FEATURES = ("overhead_ms", "ms_per_byte", "ms_per_flop")


def copy_features(nbytes: float) -> tuple[float, float]:
    return (1.0, nbytes)


COPY_FEATURES = ("overhead_ms", "ms_per_byte")
