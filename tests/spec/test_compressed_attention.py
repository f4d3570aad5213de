"""DeepSeek-V4's compressed attention (kttune.spec.compressed_attention) against SGLang's own rules,
written out here from sglang-kt's code (docs/deepseek-v4.md cites each), and against brute-force sums."""

import math

import pytest

from kttune.errors import UserError
from kttune.spec import compressed_attention as ca_mod
from kttune.spec.catalog import catalog_config
from kttune.spec.hf_config import non_expert_params, spec_from_config

FLASH = "deepseek-v4-flash"


@pytest.fixture(scope="module")
def flash():
    return spec_from_config(catalog_config(FLASH), FLASH, "catalog")


def test_the_shipped_config_reads_as_compressed_attention_with_mxfp4_experts(flash):
    ca = flash.compressed_attention
    assert flash.attention == "csa" and flash.default_method == "MXFP4"
    assert flash.num_layers == flash.num_moe_layers == 43  # hash layers 0-2 have routed experts too
    assert ca.c4_layer_ids == tuple(range(2, 43, 2)) and ca.c128_layer_ids == tuple(range(3, 42, 2))
    assert ca.ratio_slots == 44  # the MTP layer's slot
    assert (ca.window, ca.index_topk, ca.hc_mult) == (128, 512, 4)


def test_parameters_add_up_to_the_published_size(flash):
    """DeepSeek-V4-Flash is published at 284B parameters: 43 layers of 256 experts of 3 x 4096 x 2048
    and the rest; the non-expert part by SGLang's tensor shapes: every layer's attention (wq_a, wq_b,
    wkv, wo_a, wo_b) 106,956,352 with its norms and sinks, a c4 layer's compressor and indexer
    19,142,272 more, a c128 layer's compressor 4,260,352, the hyper-connections 786,486 a layer."""
    routed = 43 * 256 * 3 * 4096 * 2048
    p = non_expert_params(catalog_config(FLASH), FLASH)
    per_layer = 106_956_352 + 786_486 + 2 * 4096 + 256 * 4096 + 256 + 3 * 4096 * 2048
    expected = 43 * per_layer + 21 * 19_142_272 + 20 * 4_260_352 + 2 * 129_280 * 4096 + 4096 + 4 * 16384 + 4 + 1
    assert p.total == expected
    assert abs((routed + p.total) / 284e9 - 1) < 0.01


def test_a_key_and_an_index_key_are_sglangs_bytes(flash):
    ca = flash.compressed_attention
    assert ca.key_bytes == 448 + 64 * 2 + 8  # the assert in DeepSeekV4SingleKVPool.create_buffer
    assert ca.index_key_bytes == 128 + 4


@pytest.mark.parametrize("r", [0.1, 0.25, 0.8])
def test_bytes_per_full_token_is_sglangs_calculator(flash, r):
    """`get_bytes_per_full_token` of SGLang's DeepSeek-V4 calculator, written out for Flash: the SWA
    key in all 44 slots at share r, a c4 key and an index key per 4 tokens on 21 layers, a c128 key
    per 128 on 20, and the fp32 compress states per SWA token (8 rows of 8,192 + 2,048 B per 128 on
    c4 layers, 128 rows of 4,096 B per 128 on c128 layers)."""
    kv, idx = 584, 132
    want = r * kv * 44 + kv * 21 / 4 + kv * 20 / 128 + idx * 21 / 4
    want += r * (8 / 128) * 8192 * 21 + r * (128 / 128) * 4096 * 20 + r * (8 / 128) * 2048 * 21
    assert flash.compressed_attention.bytes_per_full_token(r) == pytest.approx(want, rel=1e-12)
    assert flash.compressed_attention.bytes_per_full_token(0.1) == pytest.approx(15_955.85)


def test_the_pool_sglang_sizes_in_20_gib(flash):
    """20 GiB at the default share: floor(20 GiB / 15,955.85) rounded down to the 256-token page."""
    full = ca_mod.full_tokens_in(flash.compressed_attention, 20 * 2**30, None, page=256)
    assert full == 1_345_792
    assert ca_mod.pool_bytes(flash.compressed_attention, full) <= 20 * 2**30


def test_the_swa_share_holds_two_chunks_when_chunk_and_pool_are_given():
    assert ca_mod.swa_ratio(None, 8192) == ca_mod.swa_ratio(65536, None) == 0.1
    assert ca_mod.swa_ratio(100_000, 16384) == pytest.approx(2 * 16384 * 1.05 / 100_000)
    assert ca_mod.swa_ratio(200_000, 4096) == 0.1
    assert ca_mod.swa_ratio(10_000, 16384) == 0.9


def test_the_pool_of_a_long_chunk_costs_more_and_the_tokens_that_fit_invert_it(flash):
    ca = flash.compressed_attention
    assert ca_mod.pool_bytes(ca, 100_000, 16384) > ca_mod.pool_bytes(ca, 100_000, 2048)
    room = 6 * 2**30
    for chunk in (None, 2048, 16384, 65536):
        n = ca_mod.full_tokens_in(ca, room, chunk)
        assert ca_mod.pool_bytes(ca, n, chunk) <= room < ca_mod.pool_bytes(ca, n + 1, chunk)


def _brute(tokens: int, prefix: int) -> tuple[float, float, float, float]:
    w = c4 = c128 = pairs = 0.0
    for s in range(prefix + 1, prefix + tokens + 1):
        w += min(s, 128)
        c4 += min(max(s // 4, 1), 512)
        c128 += max(s // 128, 1)
        pairs += s // 4
    return w, c4, c128, pairs


@pytest.mark.parametrize("tokens, prefix", [(4096, 0), (8192, 16384), (512, 100_000), (2048, 1000)])
def test_the_keys_each_query_attends_to_are_the_per_position_sums(flash, tokens, prefix):
    ca = flash.compressed_attention
    got = (*ca.keys_attended(tokens, prefix), ca.indexed_pairs(tokens, prefix))
    for g, want in zip(got, _brute(tokens, prefix)):
        assert g == pytest.approx(want, rel=0.01)


def test_decode_reads_a_window_the_top_k_and_every_coarse_entry(flash):
    ca = flash.compressed_attention
    terms = dict((cap, b) for b, cap in ca_mod.decode_reads(ca, 43) if cap != math.inf)
    assert terms[128] == 584 * 43 and terms[2048] == 584 * 21 / 4
    unbounded = sum(b for b, cap in ca_mod.decode_reads(ca, 43) if cap == math.inf)
    assert unbounded == pytest.approx(132 * 21 / 4 + 584 * 20 / 128)


def test_compress_ratios_outside_deepseek_v4_are_still_refused():
    cfg = {**catalog_config("deepseek-v3"), "compress_ratios": [0] * 62}
    with pytest.raises(UserError, match="compress_ratios"):
        spec_from_config(cfg, "v3-with-ratios", "test")


def test_a_bad_compress_ratio_list_is_one_clear_error():
    cfg = catalog_config(FLASH)
    with pytest.raises(UserError, match="compress_ratios must list 0, 4 or 128"):
        spec_from_config({**cfg, "compress_ratios": [0, 4, 16] * 15}, "bad", "test")
    with pytest.raises(UserError, match="compress_ratios must list"):
        spec_from_config({**cfg, "compress_ratios": [0, 4]}, "short", "test")
