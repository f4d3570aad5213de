"""Sparse attention (DeepSeek-V3.2, GLM-5) as SGLang dispatches it (docs/cost-model.md#sparse-attention):
on its nsa backend, dense on Hopper while a forward's sequence fits the top-k, the indexer and top-k
latent attention beyond it and on GPUs without the dense kernels, the rank's heads padded as FlashMLA
pads them, and a decode step that reads the latents of the top-k tokens alone; on the backend kttune
launches with (triton), no indexer: dense attention and every latent read."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kttune.cost.components import SPARSE_BACKEND, Components, sparse_kernel_heads, sparse_prefill_is_dense
from kttune.hw.derive import Change, derive_profile
from kttune.hw.registry import load_shipped
from kttune.memory.vram import EXPAND_EVERY_PREFIX, kv_cell_bytes
from tests.helpers import model, profile

MEASURED = "h200-pcie5-xeon-amx-16c"
SPARSE = ("deepseek-v3.2", "glm-5")


@lru_cache(maxsize=None)
def comp(name: str, tp: int = 1, dense: bool = False, gpu: str | None = None, backend: str = SPARSE_BACKEND):
    m = model(name)
    if dense:
        m = replace(m, sparse_attention=None)
    p = profile(MEASURED)
    if gpu is not None:
        p = derive_profile(load_shipped(MEASURED), Change(gpu=gpu, n_gpus=tp)).profile
    return Components(p, m, m.default_method, tp=tp, attention_backend=backend)


@pytest.mark.parametrize("name", SPARSE)
@settings(max_examples=25, deadline=None)
@given(tokens=st.integers(1, 2048), prefix=st.integers(0, 2047))
def test_on_hopper_a_forward_within_the_top_k_is_the_dense_mla_attention(name, tokens, prefix):
    """SGLang's MHA path for a sequence no longer than the top-k (one shot: the prefix's latents
    expanded with the new tokens'): the same time as the model without an indexer expanded so; one
    token past it, the sparse kernels (and their time) instead."""
    c, d = comp(name), comp(name, dense=True, backend=EXPAND_EVERY_PREFIX)
    assert c.gpu_sm == 90
    prefix = min(prefix, 2048 - tokens)
    assert c.attention_ms(tokens, prefix) == d.attention_ms(tokens, prefix)
    assert c.attention_ms(tokens, 2049 - tokens) != d.attention_ms(tokens, 2049 - tokens)


@pytest.mark.parametrize("gpu,sm", [("rtx5090", 120), ("a100", 80)])
def test_gpus_without_the_dense_kernels_run_every_forward_sparse(gpu, sm):
    """A derived profile knows its GPU's compute capability from the GPU table; off SM 90 / 100 even a
    short forward runs the latent form, 576 + 512 wide per head and pair against MHA's 192 + 128."""
    c, d = comp("deepseek-v3.2", gpu=gpu), comp("deepseek-v3.2", dense=True, gpu=gpu)
    assert c.gpu_sm == sm and not sparse_prefill_is_dense(sm, 512, 2048)
    assert c.attention_ms(512, 0) > d.attention_ms(512, 0)


def test_long_contexts_cost_the_indexer_not_the_attention():
    """Past the top-k a query attends to 2,048 latents however long its context: at 114,688 cached
    tokens a 16K-token chunk costs a fraction of the dense form, the indexer the bulk of it."""
    c, d = comp("deepseek-v3.2"), comp("deepseek-v3.2", dense=True, backend=EXPAND_EVERY_PREFIX)
    assert c.attention_ms(16384, 114688) < 0.3 * d.attention_ms(16384, 114688)
    no_indexer = replace(c.model.sparse_attention, index_heads=0)
    bare = Components(c.profile, replace(c.model, sparse_attention=no_indexer), c.method_name, attention_backend="nsa")
    assert bare.attention_ms(16384, 114688) < 0.5 * c.attention_ms(16384, 114688)


@pytest.mark.parametrize("name", SPARSE)
def test_the_sparse_kernel_pads_a_rank_s_heads(name):
    """FlashMLA's sparse kernel runs at least 64 heads on Hopper: DeepSeek-V3.2's 128 heads cost the
    same at TP 2 and TP 4 in a sparse forward (the indexer is replicated too), half in a dense one."""
    assert sparse_kernel_heads(32, 90) == 64 and sparse_kernel_heads(64, 100) == 128
    assert sparse_kernel_heads(128, 90) == 128
    heads = model(name).num_attention_heads
    lo, hi = comp(name, tp=heads // 32), comp(name, tp=heads // 64)
    assert lo.attention_ms(8192, 8192) == hi.attention_ms(8192, 8192)
    assert lo.attention_ms(1024, 0) < hi.attention_ms(1024, 0)


@pytest.mark.parametrize("name", SPARSE)
def test_decode_reads_the_index_keys_of_every_token_and_the_latents_of_the_top_k(name):
    c = comp(name)
    m = c.model
    w = c.decode_dense_ms(1, 0)
    # within the top-k a step reads the whole cell of every token, as any model does
    assert c.decode_dense_ms(4, 1000) - w == pytest.approx(4 * 1000 * kv_cell_bytes(m, 1) * c.hbm_ms_per_byte)
    # past it, every 1,000 tokens more add only the indexer's keys (132 B a layer)
    step = c.decode_dense_ms(4, 101_000) - c.decode_dense_ms(4, 100_000)
    layers = len(m.full_attention_layer_ids)
    assert step == pytest.approx(4 * 1000 * 132 * layers * c.hbm_ms_per_byte)
    assert c.decode_dense_ms(4, 100_000) - w < 0.2 * (comp(name, dense=True).decode_dense_ms(4, 100_000) - w)


@pytest.mark.parametrize("name", SPARSE)
def test_off_the_nsa_backend_the_indexer_is_skipped(name):
    """kttune launches MLA models with --attention-backend triton, as KT's DeepSeek-V3.2 tutorial does;
    SGLang's other backends give the indexer no metadata, so the model attends to every token and
    a decode step reads every latent, the pool's indexer keys left unread."""
    c, d = comp(name, backend=""), comp(name, dense=True, backend="")
    assert not c.runs_sparse_attention and comp(name).runs_sparse_attention
    for t, p in ((1024, 0), (16384, 114688)):
        assert c.attention_ms(t, p) == d.attention_ms(t, p)
    w = c.decode_dense_ms(4, 0)
    latent = (m := c.model).kv_lora_rank + m.qk_rope_head_dim
    layers = len(m.full_attention_layer_ids)
    assert c.decode_dense_ms(4, 50_000) - w == pytest.approx(4 * 50_000 * 2 * latent * layers * c.hbm_ms_per_byte)


def test_glm_5_runs_sparse_from_the_first_token_on_blackwell():
    """SGLang forces the sparse form for GLM-5's architecture on SM 100 on; DeepSeek-V3.2 keeps the
    dense path for short sequences there."""
    assert not sparse_prefill_is_dense(100, 1024, 2048, "glm_moe_dsa")
    assert sparse_prefill_is_dense(100, 1024, 2048, "deepseek_v32")
    assert sparse_prefill_is_dense(90, 1024, 2048, "glm_moe_dsa")


def _indexer_module_params(m) -> tuple[int, int]:
    """The indexer's Linears as sglang-kt builds them (`Indexer.__init__` in nsa_indexer.py: wq_b from
    the query's LoRA latent, weights_proj from the hidden state, one gate a head; wk from the hidden
    state), counted off torch modules: (query side, key side)."""
    torch = pytest.importorskip("torch")
    dsa, h = m.sparse_attention, m.hidden_size
    wq_b = torch.nn.Linear(m.q_lora_rank, dsa.index_heads * dsa.index_head_dim, bias=False, device="meta")
    weights_proj = torch.nn.Linear(h, dsa.index_heads, bias=False, device="meta")
    wk = torch.nn.Linear(h, dsa.index_head_dim, bias=False, device="meta")
    return wq_b.weight.numel() + weights_proj.weight.numel(), wk.weight.numel()


@pytest.mark.parametrize("name", SPARSE)
def test_the_indexer_s_linears_run_where_the_backend_runs_them(name):
    """The indexer's Linears are replicated on every rank and run on nsa alone, the key side alone
    for a sequence within the top-k (`Indexer._forward_cuda_k_only`): off nsa a layer's matmuls lose
    them whole, and on nsa each rank holds them whole whatever the TP size. The shares are checked
    against torch modules of the indexer's shapes."""
    m = model(name)
    query, key = _indexer_module_params(m)
    assert m.sparse_attention.projection_params(m.hidden_size, m.q_lora_rank) == (query, key)
    base = comp(name)._per_layer_dense_params
    per_layer = (m.non_expert_params_estimate - 2 * m.vocab_size * m.hidden_size) / m.num_layers
    for tp in (1, 2, 8):
        nsa, off = comp(name, tp=tp), comp(name, tp=tp, backend="")
        whole = (query + key) / per_layer * base
        assert off.rank_dense_params(100_000) == pytest.approx((base - whole) / tp)
        assert nsa.rank_dense_params(100_000) == pytest.approx((base - whole) / tp + whole)
        assert nsa.rank_dense_params(2048) == pytest.approx((base - whole) / tp + key / per_layer * base)
        assert nsa.rank_dense_params(None) == nsa.rank_dense_params(100_000)
    c, d = comp(name), comp(name, backend="")
    assert d.dense_ms(512) < c.dense_ms(512) < c.dense_ms(512, 2048)
    # a decode step reads the indexer's weights on nsa alone
    assert d.decode_dense_ms(1, 0) < c.decode_dense_ms(1, 0)


def test_a_model_without_an_indexer_splits_its_matmuls_evenly_whatever_the_backend():
    for tp in (1, 4):
        c = Components(profile(MEASURED), model("deepseek-v3"), "FP8", tp=tp, attention_backend="")
        base = c._per_layer_dense_params
        assert c.rank_dense_params(4096) == c.rank_dense_params(None, SPARSE_BACKEND) == pytest.approx(base / tp)
