"""The VRAM model against SGLang's own sizing and KT's documented layerwise figures."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kttune.memory.vram import (
    decode_kv_read_bytes,
    decode_kv_reads,
    dsa_index_bytes_per_layer,
    LINEAR_STATE_SLOTS_PER_REQUEST,
    kv_cell_bytes,
    layerwise_slot_bytes,
    linear_state_bytes_per_request,
    linear_state_pool_bytes,
    max_kv_tokens_that_fit,
    vram_breakdown,
)
from kttune.spec.hf_config import spec_from_config
from kttune.spec.catalog import catalog_config
from kttune.spec.methods import get_method
from kttune.units import GB, GIB
from tests.helpers import cfg, model


def layerwise_extra(name: str, method: str, chunk: int = 1024) -> int:
    b = vram_breakdown(model(name), cfg(method, chunked_prefill_size=chunk, gpu_prefill_token_threshold=chunk))
    return b.layerwise_extra_bytes


def test_kimi_k2_thinking_layerwise_extra_matches_kt_docs():
    # KT kt-kernel/README.md: "one MoE layer extra VRAM (~9 GB+ Kimi-K2-Thinking)"; docs: "~9GB +
    # incremental cost with prefill length"
    slot = layerwise_slot_bytes(model("kimi-k2-thinking"), get_method("RAWINT4"), 1)
    assert slot == 384 * 24_772_608  # E x RAWINT4 bytes per expert at gs32
    assert 8.5 * GB <= slot <= 9.9 * GB
    extra = layerwise_extra("kimi-k2-thinking", "RAWINT4", chunk=1024)
    assert 9.0 * GB <= extra <= 10.5 * GB  # "~9 GB+": the slot plus small-chunk activations


def test_minimax_m21_layerwise_extra_matches_kt_docs():
    # KT kt-kernel/README.md: "~3.6 GB MiniMax-M2.1"
    slot = layerwise_slot_bytes(model("minimax-m2.1"), get_method("FP8"), 1)
    assert 3.4 * GB <= slot <= 3.8 * GB
    assert abs(slot / GIB - 3.38) < 0.01  # docs/sglang-kt.md#the-layerwise-slot-is-lazy: 3.38 GiB at tp1
    extra = layerwise_extra("minimax-m2.1", "FP8", chunk=1024)
    assert 3.6 * GB <= extra <= 4.2 * GB


def test_layerwise_extra_grows_with_chunk():
    assert layerwise_extra("kimi-k2-thinking", "RAWINT4", 16384) > layerwise_extra("kimi-k2-thinking", "RAWINT4", 1024)


def test_mla_kv_cell_matches_sglang():
    # docs/memory.md#kv-bytes-per-token-kv_cell_bytes: Kimi-K2 (512+64) x 61 x 2 = 70,272 B -> 65,536 tokens = 4.29 GiB per GPU, not divided by TP
    k2 = model("kimi-k2-thinking")
    assert kv_cell_bytes(k2, 1) == 70_272
    assert kv_cell_bytes(k2, 4) == 70_272
    assert round(65536 * kv_cell_bytes(k2, 1) / GIB, 2) == 4.29


def test_gqa_kv_cell_splits_heads_over_tp():
    q = model("qwen3-235b-a22b")  # 4 KV heads x (128 + 128) x 94 layers x 2 B
    assert kv_cell_bytes(q, 1) == 4 * 256 * 94 * 2
    assert kv_cell_bytes(q, 2) == 2 * 256 * 94 * 2
    assert kv_cell_bytes(q, 8) == 1 * 256 * 94 * 2  # a KV head is replicated, never split


def test_hybrid_attention_models_cache_only_attention_layers():
    nxt = model("qwen3-next-80b-a3b")  # 12 of 48 layers hold KV: 2 heads x (256 + 256)
    assert kv_cell_bytes(nxt, 1) == 2 * 512 * 12 * 2


def test_sparse_attention_caches_the_indexer_key_beside_the_latent():
    """SGLang's NSATokenToKVPool: per token and layer the latent (bf16, or in an fp8 cache 512 fp8 +
    4 fp32 scales + 64 bf16 rope = 656 B) and the indexer's 128 fp8 + one fp32 scale = 132 B."""
    glm5 = model("glm-5")
    assert glm5.sparse_attention.index_head_dim == 128 and glm5.attention == "mla"
    assert kv_cell_bytes(glm5, 1) == ((512 + 64) * 2 + 132) * 78 == 100_152
    assert kv_cell_bytes(glm5, 1, dtype_bytes=1) == (656 + 132) * 78
    assert kv_cell_bytes(glm5, 8) == kv_cell_bytes(glm5, 1)  # one latent per rank, as any MLA
    v32 = model("deepseek-v3.2")
    assert kv_cell_bytes(v32, 1) == kv_cell_bytes(model("deepseek-v3"), 1) + 132 * 61
    assert model("deepseek-v3").sparse_attention is None and model("kimi-k2-thinking").sparse_attention is None


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(["qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b", "glm-5", "deepseek-v3.2"]),
    tp=st.sampled_from([1, 2, 4, 8]),
    ctx=st.integers(1, 200_000),
    sparse=st.booleans(),
)
def test_a_decode_step_reads_what_each_layer_attends_to(name, tp, ctx, sparse):
    """Against a layer-by-layer count: a full-attention layer reads every cached token, a sliding one
    the last `sliding_window`, a sparse-attention layer run sparse every token's index key and the
    latents of the top-k (before any cap binds, the whole cell), run dense every latent alone."""
    m = model(name)
    cell = kv_cell_bytes(replace(m, sliding_layer_ids=(), sparse_attention=None), tp) / len(m.full_attention_layer_ids)
    dsa = m.sparse_attention is not None and sparse
    index = dsa_index_bytes_per_layer(m) if dsa else 0
    topk = m.sparse_attention.index_topk if dsa else ctx
    brute = len(m.full_attention_layer_ids) * (index * ctx + cell * min(ctx, topk))
    brute += len(m.sliding_layer_ids) * cell * min(ctx, m.sliding_window)
    assert decode_kv_read_bytes(m, tp, 3, ctx, sparse=sparse) == pytest.approx(3 * brute)
    assert all(cap == float("inf") for _, cap in decode_kv_reads(model("deepseek-v3"), tp, sparse=sparse))
    if ctx <= 128 and (sparse or not m.sparse_attention):  # within every cap: the pool's cell
        full = replace(
            m, sliding_layer_ids=(), full_attention_layer_ids=m.full_attention_layer_ids + m.sliding_layer_ids
        )
        assert decode_kv_read_bytes(m, tp, 1, ctx, sparse=sparse) == pytest.approx(ctx * kv_cell_bytes(full, tp))


@pytest.mark.parametrize("fp8", [False, True])
def test_the_sparse_attention_cell_is_the_tensors_sglang_allocates(fp8):
    """Against the allocation: the pool's per-layer latent buffer and the indexer's paged buffer
    (pages of 64 tokens x 132 B), built with torch from the config's keys, per token of a large pool."""
    torch = pytest.importorskip("torch")
    raw, glm5 = catalog_config("glm-5"), model("glm-5")
    size, page, layers = 64 * 4096, 64, raw["num_hidden_layers"]
    lora, rope, idx = raw["kv_lora_rank"], raw["qk_rope_head_dim"], raw["index_head_dim"]
    dim, dtype = (lora + lora // 128 * 4 + rope * 2, torch.uint8) if fp8 else (lora + rope, torch.bfloat16)
    kv = torch.empty((size + page, 1, dim), dtype=dtype, device="meta")
    index_k = torch.empty(((size + page + 1) // page, page * (idx + idx // 128 * 4)), dtype=torch.uint8, device="meta")
    per_token = layers * (kv.numel() * kv.element_size() + index_k.numel() * index_k.element_size()) / size
    assert kv_cell_bytes(glm5, 1, dtype_bytes=1 if fp8 else 2) == pytest.approx(per_token, rel=0.001)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_linear_state_per_request_is_sglangs_mamba_state(tp):
    """Qwen3-Next's 36 Gated DeltaNet layers (config: 16 key / 32 value heads of 128, conv kernel 4):
    SGLang's Mamba2StateShape keeps a bf16 conv state of (32x128 + 2x16x128) / tp channels x 3 and an
    fp32 temporal state of 32 / tp heads x 128 x 128, per layer (docs/memory.md#linear-attention-state)."""
    nxt = model("qwen3-next-80b-a3b")
    assert linear_state_bytes_per_request(nxt, tp) == 36 * ((4096 + 4096) // tp * 3 * 2 + 32 // tp * 128 * 128 * 4)
    assert linear_state_bytes_per_request(nxt, 1) == 77_266_944  # 73.7 MiB


def test_the_state_pool_is_the_tensors_sglang_allocates():
    """Against the allocation itself: the conv and temporal tensors SGLang's MambaPool creates
    ([layers, slots + 1, ...] in bf16 and fp32), built with torch from the config's keys."""
    torch = pytest.importorskip("torch")
    raw = catalog_config("qwen3-next-80b-a3b")
    nxt = model("qwen3-next-80b-a3b")
    c = cfg("BF16", max_running_requests=5, tp=2)
    layers, slots, tp = len(nxt.linear_attention_layer_ids), 15, 2
    conv_dim = (
        raw["linear_value_head_dim"] * raw["linear_num_value_heads"]
        + 2 * raw["linear_num_key_heads"] * raw["linear_key_head_dim"]
    )
    conv = torch.empty(
        (layers, slots + 1, conv_dim // tp, raw["linear_conv_kernel_dim"] - 1), dtype=torch.bfloat16, device="meta"
    )
    ssm = torch.empty(
        (
            layers,
            slots + 1,
            raw["linear_num_value_heads"] // tp,
            raw["linear_value_head_dim"],
            raw["linear_key_head_dim"],
        ),
        dtype=torch.float32,
        device="meta",
    )
    want = conv.numel() * conv.element_size() + ssm.numel() * ssm.element_size()
    assert linear_state_pool_bytes(nxt, c) == want
    assert vram_breakdown(nxt, c).linear_state == want


def test_the_state_pool_is_part_of_startup_and_only_for_linear_layers():
    nxt = model("qwen3-next-80b-a3b")
    c = cfg("BF16", max_running_requests=8)
    with_pool = vram_breakdown(nxt, c)
    assert with_pool.linear_state == (LINEAR_STATE_SLOTS_PER_REQUEST * 8 + 1) * linear_state_bytes_per_request(nxt, 1)
    given = vram_breakdown(nxt, replace(c, linear_state_slots=2))
    assert with_pool.startup_bytes - given.startup_bytes == (24 - 2) * linear_state_bytes_per_request(nxt, 1)
    for name in ("qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b"):
        m = model(name)
        assert m.linear_attention is None and vram_breakdown(m, cfg("BF16")).linear_state == 0


def test_key_heads_that_do_not_split_are_replicated_and_the_ssm_dtype_is_read():
    raw = dict(catalog_config("qwen3-next-80b-a3b"), linear_num_key_heads=2, mamba_ssm_dtype="bfloat16")
    m = spec_from_config(raw, "two-key-heads", "test")
    # 2 key heads over 4 ranks: SGLang replicates them to 4 groups before sharding the conv channels
    assert linear_state_bytes_per_request(m, 4) == 36 * ((4096 + 2 * 4 * 128) // 4 * 3 * 2 + 8 * 128 * 128 * 2)
    assert linear_state_bytes_per_request(m, 2) == 36 * ((4096 + 2 * 2 * 128) // 2 * 3 * 2 + 16 * 128 * 128 * 2)


@pytest.mark.parametrize(
    "name,method,gib",
    [("deepseek-v3", "FP8", 2.38), ("kimi-k2-thinking", "RAWINT4", 1.38), ("minimax-m2", "FP8", 0.82)],
)
def test_one_gpu_expert_per_layer_costs_documented_vram(name, method, gib):
    # docs/memory.md (resident GPU experts): "1 per-layer expert costs L_moe x B_gpu: DS-V3 FP8 2.38 GiB, Kimi-K2 RAWINT4 1.38 GiB, MiniMax-M2 FP8 0.82 GiB"
    m = model(name)
    one = vram_breakdown(m, cfg(method, num_gpu_experts=1)).gpu_experts
    assert abs(one / GIB - gib) < 0.01


def test_gpu_experts_shard_over_tp():
    m = model("deepseek-v3")
    tp1 = vram_breakdown(m, cfg("FP8", num_gpu_experts=4)).gpu_experts
    tp2 = vram_breakdown(m, cfg("FP8", num_gpu_experts=4, tp=2)).gpu_experts
    assert abs(tp2 / tp1 - 0.5) < 0.01


def test_converted_methods_keep_gpu_experts_in_checkpoint_format():
    # AMXINT4 CPU weights are converted; GPU experts come from the original (FP8 for DeepSeek) checkpoint
    m = model("deepseek-v3")
    amx = vram_breakdown(m, cfg("AMXINT4", num_gpu_experts=2)).gpu_experts
    fp8 = vram_breakdown(m, cfg("FP8", num_gpu_experts=2)).gpu_experts
    assert amx == fp8


@pytest.mark.parametrize(
    "threshold,chunk,method,fires",
    [
        (0, 8192, "FP8", False),  # threshold 0 = off
        (4096, 8192, "FP8", True),
        (8192, 8192, "FP8", True),  # >= fires
        (16384, 8192, "FP8", False),  # a forward never exceeds the chunk
        (4096, 8192, "AMXINT4", False),  # no layerwise path for AMX methods
    ],
)
def test_layerwise_slot_only_when_layerwise_can_fire(threshold, chunk, method, fires):
    b = vram_breakdown(
        model("minimax-m2.1"), cfg(method, gpu_prefill_token_threshold=threshold, chunked_prefill_size=chunk)
    )
    assert (b.layerwise_slot > 0) == fires
    assert (
        b.startup_bytes == vram_breakdown(model("minimax-m2.1"), cfg(method, chunked_prefill_size=chunk)).startup_bytes
    )


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 64),
    chunk=st.sampled_from([1024, 2048, 4096, 8192, 16384]),
    kv=st.integers(4096, 300_000),
    lw=st.booleans(),
)
def test_vram_is_monotone_in_experts_chunk_and_kv(n, chunk, kv, lw):
    m = model("qwen3-30b-a3b")
    c = cfg(
        "BF16",
        num_gpu_experts=n,
        chunked_prefill_size=chunk,
        max_total_tokens=kv,
        gpu_prefill_token_threshold=1024 if lw else 0,
    )
    peak = vram_breakdown(m, c).runtime_peak_bytes
    assert vram_breakdown(m, replace(c, num_gpu_experts=n + 1)).runtime_peak_bytes > peak
    assert vram_breakdown(m, replace(c, max_total_tokens=kv + 1024)).runtime_peak_bytes > peak
    assert vram_breakdown(m, replace(c, chunked_prefill_size=chunk * 2)).runtime_peak_bytes > peak


def test_max_kv_tokens_fits_and_one_more_page_does_not():
    m = model("qwen3-30b-a3b")
    c = cfg("BF16", num_gpu_experts=8, gpu_prefill_token_threshold=4096)
    budget = 40 * GIB
    kv = max_kv_tokens_that_fit(m, c, budget)
    assert kv > 0
    assert vram_breakdown(m, replace(c, max_total_tokens=kv)).runtime_peak_bytes <= budget
    assert vram_breakdown(m, replace(c, max_total_tokens=kv + 1024)).runtime_peak_bytes > budget
