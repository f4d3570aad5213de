"""DeepSeek-V4's compressed attention in the cost and memory models (docs/deepseek-v4.md): each query
over a window, a top-k of compressed entries or every coarse entry, never the whole context; and the
KV pools and the launch KT's own tutorial runs."""

from __future__ import annotations

from functools import lru_cache

import pytest

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.cost.prefill import non_moe_ms
from kttune.hw.features import attention_prefill_flops
from kttune.memory import vram
from kttune.spec import compressed_attention as ca_mod
from kttune.spec.methods import get_method
from kttune.units import GIB
from tests.helpers import model, profile

MEASURED = "h200-pcie5-xeon-amx-16c"
FLASH = "deepseek-v4-flash"


@lru_cache(maxsize=None)
def comp(tp: int = 1) -> Components:
    m = model(FLASH)
    return Components(profile(MEASURED), m, m.default_method, tp=tp)


def test_attention_grows_with_the_context_far_slower_than_dense_attention():
    """From a 64K to a 512K prefix a query's attended keys grow only by the c128 layers' entries (one
    per 128 tokens) while the c4 layers' indexer scores every entry (one per 4 tokens, 64 x 128 FP8
    heads): the mean layer's attention of a 1,024-token forward grows by less than the context's 8x,
    and stays a small part of dense attention over the same heads."""
    c = comp()
    a64, a512 = c.attention_ms(1024, 65536), c.attention_ms(1024, 524288)
    assert 2.0 < a512 / a64 < 8.0
    m = model(FLASH)
    dense = c._attn_fit((1.0, attention_prefill_flops(1024, 524288, m.num_attention_heads, 512, 512)))
    assert a512 < dense / 4


def test_every_layer_attends_and_a_forward_costs_more_with_more_tokens():
    c = comp()
    m = model(FLASH)
    assert len(m.full_attention_layer_ids) == m.num_layers
    short, long_ = non_moe_ms(c, 1024, 0), non_moe_ms(c, 8192, 0)
    assert 0 < short < long_ < 8 * short * 1.5


def test_the_kv_pool_is_sglangs_pools_at_the_launchs_swa_share():
    m = model(FLASH)
    ca = m.compressed_attention
    cfg = LaunchConfig("MXFP4", 1, 8, 16384, 4096, 100_000, 11)
    r = 2 * 16384 * 1.05 / 100_000  # two chunks in flight raise the share from 0.1
    assert vram.kv_pool_bytes(m, cfg) == pytest.approx(100_000 * ca.bytes_per_full_token(r))
    assert vram.kv_cell_bytes(m, 1) == pytest.approx(ca.bytes_per_full_token(0.1))
    budget = 40 * GIB
    n = vram.max_kv_tokens_that_fit(m, cfg, budget)
    assert n > 0
    assert vram.vram_breakdown(m, LaunchConfig("MXFP4", 1, 8, 16384, 4096, n, 11)).runtime_peak_bytes <= budget
    assert vram.vram_breakdown(m, LaunchConfig("MXFP4", 1, 8, 16384, 4096, n + 1024, 11)).runtime_peak_bytes > budget


def test_kts_tutorial_launch_fits_its_gpus():
    """KT's DeepSeek-V4-Flash tutorial launch, validated on 8 x RTX 5090 (32 GB): TP 8, 144 GPU
    experts, chunk 2,048 under a 4,096 threshold (no forward goes layerwise), a 32,768-token pool, 4
    requests, --mem-fraction-static 0.80. Its runtime peak per GPU must fit the 32 GB, its static
    part what the fraction leaves."""
    m = model(FLASH)
    cfg = LaunchConfig(
        "MXFP4", 8, 144, 2048, 4096, 32768, 8, threadpool_count=2, max_running_requests=4, cuda_graph_max_bs=4
    )
    b = vram.vram_breakdown(m, cfg)
    assert b.runtime_peak_bytes < 32e9
    assert b.startup_bytes < 0.80 * 32e9
    assert b.layerwise_extra_bytes == 0 or cfg.chunked_prefill_size < cfg.gpu_prefill_token_threshold


def test_decode_reads_a_bounded_cache_per_layer():
    """A decode step at 1M context reads the window, the top-k entries and the indexer keys of the
    c4 layers and every c128 entry: far less than one latent of every token on every layer."""
    m = model(FLASH)
    read = vram.decode_kv_read_bytes(m, 1, 1, 1_048_576)
    ca = m.compressed_attention
    assert read < 1_048_576 * ca.key_bytes * m.num_layers / 20
    assert read == pytest.approx(sum(b * min(1_048_576, cap) for b, cap in ca_mod.decode_reads(ca, m.num_layers)))


def test_resident_mxfp4_experts_are_held_raw_too_when_a_threshold_is_set():
    """sglang-kt's DeepSeek-V4 MXFP4 method keeps each resident expert raw (e2m1 and fp32 scales per 32)
    beside its swizzled copy when --kt-gpu-prefill-token-threshold > 0 (mxfp4_deepseek.py)."""
    m = model(FLASH)
    n = 3 * 4096 * 2048
    off = vram.gpu_expert_bytes(m, get_method("MXFP4"), LaunchConfig("MXFP4", 1, 8, 8192, 0, 65536, 11))
    on = vram.gpu_expert_bytes(m, get_method("MXFP4"), LaunchConfig("MXFP4", 1, 8, 8192, 4096, 65536, 11))
    assert off == 43 * 8 * (n // 2 + n // 32)
    assert on - off == 43 * 8 * (n // 2 + n // 32 * 4)
