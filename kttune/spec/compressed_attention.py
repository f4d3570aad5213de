"""DeepSeek-V4's compressed sparse attention, as sglang-kt runs it: the layer shapes read from
config.json, and the pure formulas the memory and cost models take from them
(docs/deepseek-v4.md, which cites the upstream code for every rule here).

Every decoder layer attends, with one 512-wide latent that is both key and value (MQA, `head_dim`
512 of which the last `qk_rope_head_dim` 64 rotate), over three kinds of keys:

- the last `sliding_window` (128) raw tokens of the sequence (every layer: the SWA pool);
- on a "c4" layer (`compress_ratios[i]` 4), up to `index_topk` (512) of the sequence's compressed
  entries, one per 4 tokens, chosen by an indexer that scores every entry with `index_n_heads` x
  `index_head_dim` FP8 heads;
- on a "c128" layer (ratio 128), every compressed entry, one per 128 tokens.

Ratio-0 layers attend over the window alone. `compress_ratios` has one entry more than the decoder
layers: the MTP layer's slot (SGLang's pool calculator counts it). The residual stream is `hc_mult` (4)
streams wide (hyper-connections), mixed before and after each sublayer.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

# SGLang's DeepSeek-V4 KV formats (`DeepSeekV4SingleKVPool`, `DeepSeekV4IndexerPool`;
# docs/deepseek-v4.md#the-kv-pools): a key of the SWA, c4 and c128 pools is its 448 no-rope dims in
# fp8, its 64 rope dims in bf16, one ue8m0 scale byte per 64 fp8 dims and one byte of padding; an
# indexer key is 128 fp8 dims and one fp32 scale.
KV_SCALE_BLOCK = 64
KV_PAD = 1
INDEX_SCALE_BLOCK = 128
# The compress states (fp32 rows of kv and score halves; a c4 row also holds the overlapping group)
# keep `ring` rows per SWA page of 128 tokens (`get_compress_state_ring_size`, not speculative).
STATE_RING = {4: 8, 128: 128}
STATE_PAGE = 128
# SGLang forces these for DeepseekV4ForCausalLM (server_args.py): the page, the requests when unset,
# the SWA pool's share of the full tokens when unset (raised to hold two chunks in flight when
# --chunked-prefill-size and --max-total-tokens are both given; 0.9 at most).
PAGE_SIZE = 256
DEFAULT_MAX_RUNNING_REQUESTS = 256
SWA_RATIO = 0.1
SWA_RATIO_MAX = 0.9
CHUNKS_IN_FLIGHT = 2  # overlap scheduling on (SGLang's default)
CHUNK_SLACK = 1.05


@dataclass(frozen=True)
class CompressedAttentionSpec:
    """DeepSeek-V4's attention shape (config.json keys in comments)."""

    window: int  # sliding_window
    c4_layer_ids: tuple[int, ...]  # compress_ratios[i] == 4
    c128_layer_ids: tuple[int, ...]  # compress_ratios[i] == 128
    ratio_slots: int  # len(compress_ratios): the decoder layers and the MTP layer's slot
    head_dim: int  # head_dim: the latent, key and value alike
    rope_dim: int  # qk_rope_head_dim
    index_heads: int  # index_n_heads
    index_head_dim: int  # index_head_dim
    index_topk: int  # index_topk
    o_lora_rank: int  # o_lora_rank
    o_groups: int  # o_groups
    hc_mult: int  # hc_mult: residual streams

    # ---- bytes of one cached entry ----------------------------------------------------------------
    @property
    def key_bytes(self) -> int:
        """One key of the SWA, c4 or c128 pool (584 for DeepSeek-V4-Flash)."""
        nope = self.head_dim - self.rope_dim
        return nope + 2 * self.rope_dim + nope // KV_SCALE_BLOCK + KV_PAD

    @property
    def index_key_bytes(self) -> int:
        """One indexer key (132)."""
        return self.index_head_dim + 4 * (self.index_head_dim // INDEX_SCALE_BLOCK)

    def state_row_bytes(self, ratio: int) -> int:
        """One fp32 compress-state row of a c4 (attention and indexer) or c128 layer: kv and score
        halves, twice as wide where the groups overlap (c4)."""
        overlap = 2 if ratio == 4 else 1
        row = 2 * overlap * self.head_dim * 4
        if ratio == 4:
            row += 2 * overlap * self.index_head_dim * 4
        return row

    def bytes_per_full_token(self, swa_ratio: float) -> float:
        """What SGLang's DeepSeek-V4 calculator divides the KV room by (`get_bytes_per_full_token`):
        per token of the full context, its SWA share (`swa_ratio`) in every ratio slot, a c4 entry per
        4 tokens on each c4 layer with its indexer key, a c128 entry per 128 on each c128 layer, and
        the compress states kept per SWA token (docs/deepseek-v4.md#the-kv-pools)."""
        c4, c128 = len(self.c4_layer_ids), len(self.c128_layer_ids)
        kv = self.key_bytes
        per_full = kv * c4 / 4 + kv * c128 / 128 + self.index_key_bytes * c4 / 4
        per_swa = kv * self.ratio_slots
        per_swa += STATE_RING[4] / STATE_PAGE * self.state_row_bytes(4) * c4
        per_swa += STATE_RING[128] / STATE_PAGE * self.state_row_bytes(128) * c128
        return per_full + swa_ratio * per_swa

    # ---- what a forward attends to ----------------------------------------------------------------
    def keys_attended(self, tokens: float, prefix: float) -> tuple[float, float, float]:
        """Summed over a forward's `tokens` new queries after `prefix` cached tokens, the keys each
        layer kind attends to: (the window's, per layer; a c4 layer's compressed entries; a c128
        layer's), each query at sequence length s attending to min(s, window) raw tokens and
        min(max(s // 4, 1), topk) resp. max(s // 128, 1) entries (continuous sums)."""
        lo, hi = prefix, prefix + tokens
        return (
            _sum_min(lo, hi, 1, self.window),
            _sum_min(lo, hi, 4, self.index_topk, floor=1.0),
            _sum_min(lo, hi, 128, math.inf, floor=1.0),
        )

    def indexed_pairs(self, tokens: float, prefix: float) -> float:
        """(Query, compressed entry) pairs a c4 layer's indexer scores in the forward: every entry of
        the sequence so far for each query."""
        return _sum_min(prefix, prefix + tokens, 4, math.inf)


def _sum_min(lo: float, hi: float, ratio: int, cap: float, floor: float = 0.0) -> float:
    """Over the queries at sequence lengths s = lo + 1 .. hi, the sum of max(floor, min(s // ratio,
    cap)), as an integral: s // ratio averages (s - (ratio - 1) / 2) / ratio, and s itself
    s + 1/2 over a unit step."""
    lo, hi = lo + 0.5 - (ratio - 1) / 2, hi + 0.5 - (ratio - 1) / 2
    rate = 1.0 / ratio
    if hi <= lo:
        return 0.0

    def area(s: float) -> float:  # integral of min(rate * s, cap) from 0 to s (0 below 0)
        s = max(s, 0.0)
        knee = cap / rate
        return rate * s * s / 2 if s <= knee else rate * knee * knee / 2 + cap * (s - knee)

    total = area(hi) - area(lo)
    if floor > 0:  # where rate * s < floor the floor holds
        edge = min(max(floor / rate, lo), hi)
        total += floor * (edge - lo) - (area(edge) - area(lo))
    return total


def swa_ratio(max_total_tokens: int | None, chunked_prefill_size: int | None) -> float:
    """The SWA pool's share of the full tokens SGLang sets for DeepSeek-V4 when the launch leaves
    --swa-full-tokens-ratio unset: 0.1, raised to hold two chunks in flight (x 1.05) when the chunk
    and the pool are both given, at most 0.9 (server_args.py; docs/deepseek-v4.md#the-kv-pools)."""
    if not (max_total_tokens and chunked_prefill_size):
        return SWA_RATIO
    needed = CHUNKS_IN_FLIGHT * chunked_prefill_size * CHUNK_SLACK
    return min(SWA_RATIO_MAX, max(SWA_RATIO, needed / max_total_tokens))


# ---- parameters ------------------------------------------------------------------------------------


def attention_params(hidden: int, heads: int, q_lora_rank: int, ca: CompressedAttentionSpec) -> dict[str, int]:
    """One layer's attention parameters by part (sglang's deepseek_v4.py `MQALayer`): the Linears
    every layer has (wq_a, wq_b, wkv, the grouped low-rank output wo_a and wo_b), the fp8 ones apart
    from wo_a, which SGLang holds in bf16; the extra Linears of a c4 layer (its compressor's wkv_gate
    over two overlapping groups, the indexer's wq_b, weights_proj and compressor) and of a c128 layer
    (its compressor); and the small tensors (norms, sinks, the compressors' position biases and norms)."""
    d = ca.head_dim
    fp8 = hidden * q_lora_rank + q_lora_rank * heads * d + hidden * d
    out_width = heads * d // max(1, ca.o_groups)
    wo_a = ca.o_groups * ca.o_lora_rank * out_width
    wo_b = ca.o_groups * ca.o_lora_rank * hidden
    c4_main = 2 * 2 * d * hidden  # kv and gate halves over the overlapping pair of groups
    c4_index_q = q_lora_rank * ca.index_heads * ca.index_head_dim
    c4_index_w = hidden * ca.index_heads
    c4_index_comp = 2 * 2 * ca.index_head_dim * hidden
    c128_main = 2 * d * hidden
    return {
        "fp8": fp8 + wo_b,
        "bf16": wo_a,
        "c4_fp8": c4_index_q,
        "c4_bf16": c4_main + c4_index_w + c4_index_comp,
        "c128_bf16": c128_main,
        "small": q_lora_rank + d + heads,
        "c4_small": 4 * 2 * d + d + 4 * 2 * ca.index_head_dim + ca.index_head_dim,
        "c128_small": 128 * d + d,
    }


def hyper_connection_params(hidden: int, ca: CompressedAttentionSpec) -> tuple[int, int]:
    """(Per decoder layer, at the end) the hyper-connections' fp32 parameters: each layer mixes its
    `hc_mult` streams before and after attention and the FFN with a (2 + m) m x m h matrix, a bias of
    (2 + m) m and 3 scales; the head mixes them once with m x m h, m and 1."""
    m = ca.hc_mult
    block = (2 + m) * m * m * hidden + (2 + m) * m + 3
    return 2 * block, m * m * hidden + m + 1


# ---- the KV pools --------------------------------------------------------------------------------------


def pool_bytes(ca: CompressedAttentionSpec, full_tokens: float, chunked_prefill_size: int | None = None) -> float:
    """The KV pools SGLang allocates for `full_tokens` tokens of context (--max-total-tokens) at the SWA
    share it sets for the launch (`swa_ratio`; its calculator's accounting, the pages' padding aside)."""
    if full_tokens <= 0:
        return 0.0
    return full_tokens * ca.bytes_per_full_token(swa_ratio(int(full_tokens), chunked_prefill_size))


def full_tokens_in(ca: CompressedAttentionSpec, room: float, chunked_prefill_size: int | None, page: int = 1) -> int:
    """The most full tokens (a multiple of `page`) whose pools (`pool_bytes`, with the chunk raising the
    SWA share) take at most `room` bytes: `pool_bytes` grows with the tokens, so the largest that fits
    is found by bisection."""
    if room <= 0:
        return 0
    most = int(room / ca.bytes_per_full_token(SWA_RATIO))  # the share is at least SWA_RATIO
    fits = bisect.bisect_left(range(1, most + 1), True, key=lambda n: pool_bytes(ca, n, chunked_prefill_size) > room)
    return fits // page * page


def first_pass_cell_bytes(ca: CompressedAttentionSpec, num_layers: int) -> int:
    """The bytes per token SGLang's first, generic sizing divides the KV room by for DeepSeek-V4
    (`get_cell_size_per_token`: a latent of head_dim + rope dims and an indexer key on every decoder
    layer; 30,444 for Flash). Where --max-total-tokens is given, the pool is capped at the tokens that
    room holds (`set_num_tokens_hybrid_swa_compress`), so a launch whose fraction leaves less than
    this much per token gets fewer tokens than it asked for (docs/deepseek-v4.md#the-kv-pools)."""
    return (ca.head_dim + ca.rope_dim + ca.index_key_bytes) * num_layers


def decode_reads(ca: CompressedAttentionSpec, num_layers: int) -> tuple[tuple[float, float], ...]:
    """What one request's decode step reads of its cache, as (bytes per context token, tokens read
    at most) terms (`kttune.memory.vram.decode_kv_reads`): every layer's window; each c4 layer's
    indexer keys (one per 4 tokens, all of them) and the top-k entries it picks (one per 4 tokens, at
    most 4 x top-k tokens' worth); each c128 layer's entries (one per 128 tokens, all)."""
    c4, c128 = len(ca.c4_layer_ids), len(ca.c128_layer_ids)
    return (
        (ca.key_bytes * num_layers, float(ca.window)),
        (ca.index_key_bytes * c4 / 4, math.inf),
        (ca.key_bytes * c4 / 4, 4.0 * ca.index_topk),
        (ca.key_bytes * c128 / 128, math.inf),
    )
