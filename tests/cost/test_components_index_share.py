"""IndexShare (GLM-5.2) as SGLang runs it (docs/cost-model.md#sparse-attention): a shared layer holds
no indexer and reuses the top-k of the layer before it, so the indexer's Linears, its prefill scoring
and its decode key reads are those of the indexer layers alone, while the KV pool still holds an
indexer key for every layer."""

from __future__ import annotations

from functools import lru_cache

import pytest

from kttune.cost.components import SPARSE_BACKEND, Components, sparse_kernel_heads
from kttune.hw.features import sparse_attention_prefill_work
from kttune.errors import UserError
from kttune.memory.vram import decode_kv_reads, dsa_index_bytes_per_layer, kv_cell_bytes
from kttune.spec.catalog import catalog_config
from kttune.spec.hf_config import spec_from_config
from tests.helpers import model, profile

MEASURED = "h200-pcie5-xeon-amx-16c"


@lru_cache(maxsize=None)
def comp(name: str, tp: int = 1, backend: str = SPARSE_BACKEND) -> Components:
    m = model(name)
    return Components(profile(MEASURED), m, m.default_method, tp=tp, attention_backend=backend)


def test_glm_5_2_s_indexer_layers_are_the_official_schedule():
    """index_topk_freq 4 and index_skip_topk_offset 3 read by SGLang's rule give the schedule a public
    GLM-5.2 fine-tuning code checks the official config against, written another way: layers 0-2
    and every fourth from layer 2 hold an indexer (21 of 78; it counts 42 native indexer
    projections, wq_b and wk of each); GLM-5, with neither key, has one in every layer."""
    m = model("glm-5.2")
    official = tuple(i for i in range(78) if i < 3 or (i - 2) % 4 == 0)
    assert m.indexer_layer_ids == official and 2 * len(official) == 42
    cfg = catalog_config("glm-5.2")
    assert m.indexer_layer_ids == tuple(i for i, t in enumerate(cfg["indexer_types"]) if t == "full")
    assert model("glm-5").indexer_layer_ids == tuple(range(78))
    assert model("qwen3-30b-a3b").indexer_layer_ids == ()


@pytest.mark.parametrize(
    "keys,shared",
    [
        ({"index_topk_freq": 2}, (2, 4)),  # no offset: max(i - 1, 0) % f
        ({"index_topk_freq": 3, "index_skip_topk_offset": 1}, (1, 2, 4)),  # max(i - o + 1, 0) % f
        ({"index_topk_pattern": "FSFFS"}, (1, 4)),  # a pattern wins over the frequency
        ({"index_topk_pattern": "FSFFS", "index_topk_freq": 2}, (1, 4)),
        ({}, ()),
    ],
)
def test_the_shared_layers_follow_sglang_s_skip_topk(keys, shared):
    cfg = {k: v for k, v in catalog_config("glm-5").items() if k != "num_nextn_predict_layers"}
    cfg.update(num_hidden_layers=5, first_k_dense_replace=1, **keys)
    assert spec_from_config(cfg, "small", "test").sparse_attention.shared_layer_ids == shared


@pytest.mark.parametrize("pattern", ["FS", "FXFFS", ["F"] * 5])
def test_a_pattern_that_does_not_mark_every_layer_is_refused(pattern):
    cfg = dict(catalog_config("glm-5"), num_hidden_layers=5, first_k_dense_replace=1, index_topk_pattern=pattern)
    with pytest.raises(UserError, match="index_topk_pattern"):
        spec_from_config(cfg, "small", "test")


def test_shared_layers_hold_no_indexer_weights():
    """GLM-5.2 is GLM-5 with 57 layers' indexers gone: wq_b, weights_proj, wk and k_norm each."""
    g5, g52 = model("glm-5"), model("glm-5.2")
    dsa = g5.sparse_attention
    per_layer = sum(dsa.projection_params(g5.hidden_size, g5.q_lora_rank)) + 2 * dsa.index_head_dim
    assert g5.non_expert_params_estimate - g52.non_expert_params_estimate == 57 * per_layer


def test_the_kv_pool_still_caches_an_indexer_key_in_every_layer():
    assert kv_cell_bytes(model("glm-5.2"), 1) == kv_cell_bytes(model("glm-5"), 1)


def test_a_decode_step_reads_the_indexer_keys_of_the_indexer_layers_alone():
    g5, g52 = model("glm-5"), model("glm-5.2")
    idx = dsa_index_bytes_per_layer(g5)
    read5 = dict((cap, b) for b, cap in decode_kv_reads(g5, 1, sparse=True))
    read52 = dict((cap, b) for b, cap in decode_kv_reads(g52, 1, sparse=True))
    assert read5[float("inf")] == 78 * idx and read52[float("inf")] == 21 * idx
    assert read5[2048.0] == read52[2048.0]  # the top-k latents of every layer


@pytest.mark.parametrize("tokens,prefix", [(8192, 0), (4096, 60_000)])
def test_a_prefill_layer_charges_the_mean_layer_s_indexer(tokens, prefix):
    """Past the top-k, attention_ms is the latent attention plus the indexer (its fp8 scoring and its
    logits); under IndexShare the mean layer carries 21 / 78 of the indexer, the attention the same
    (the two models' attention shapes are GLM-5's)."""
    c5, c52 = comp("glm-5"), comp("glm-5.2")
    m, dsa = c5.model, c5.model.sparse_attention
    _, index, logits = sparse_attention_prefill_work(
        tokens, prefix, sparse_kernel_heads(m.num_attention_heads, c5.gpu_sm), m.kv_lora_rank,
        m.qk_rope_head_dim, dsa.index_topk, dsa.index_heads, dsa.index_head_dim,
    )  # fmt: skip
    indexer = c5._attn_fit.coef[1] * index / c5.fp8_speedup + logits * c5.hbm_ms_per_byte
    assert c5.attention_ms(tokens, prefix) - c52.attention_ms(tokens, prefix) == pytest.approx(
        indexer * (1 - 21 / 78), rel=1e-9
    )


def test_the_indexer_s_linears_run_on_the_indexer_layers_alone():
    """The dense matmuls' indexer share on a layer past the top-k: GLM-5.2's mean layer carries 21 / 78
    of GLM-5's indexer parameters."""
    c5, c52 = comp("glm-5"), comp("glm-5.2")
    run5, whole5 = c5._indexer_shares(10_000, None)
    run52, whole52 = c52._indexer_shares(10_000, None)
    per5, per52 = c5._per_layer_dense_params, c52._per_layer_dense_params
    assert run52 * per52 == pytest.approx(run5 * per5 * 21 / 78, rel=1e-9)
    assert whole52 * per52 == pytest.approx(whole5 * per5 * 21 / 78, rel=1e-9)
