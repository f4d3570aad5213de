"""MLA prefill in the form SGLang dispatches for the forward's prefix and the backend
(docs/cost-model.md#mla-prefill-forms): with no prefix every backend expands (MHA); with one, triton
(what kttune launches) attends in the latent form, fa3 / flashinfer too below 8,192 prefix tokens and
in one expanded shot from there; the path runner expands every prefix. All at one flop rate, so the
forms' times differ by their flops alone."""

from __future__ import annotations

from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kttune.cost.components import Components
from kttune.hw.features import attention_prefill_flops, gemm_features
from kttune.memory.vram import EXPAND_EVERY_PREFIX, MLA_CHUNKED_PREFIX_THRESHOLD
from tests.helpers import model, profile

BACKENDS = ("triton", "flashinfer", "fa3", EXPAND_EVERY_PREFIX)


@lru_cache(maxsize=None)
def comp(name: str, tp: int = 1) -> Components:
    m = model(name)
    return Components(profile("h200-pcie5-xeon-amx-16c"), m, m.default_method, tp=tp)


@pytest.mark.parametrize("name", ["deepseek-v3", "kimi-k2-thinking"])
@settings(max_examples=25, deadline=None)
@given(tokens=st.integers(1, 32768), prefix=st.integers(1, 131072), tp=st.sampled_from([1, 2, 4]))
def test_each_backend_runs_its_form_at_one_rate(name, tokens, prefix, tp):
    c = comp(name, tp)
    m = c.model
    heads = m.num_attention_heads // tp
    fit = c._attn_fit
    # no prefix: every backend expands the latent and runs MHA over 192 + 128 per head
    mha0 = fit((1.0, attention_prefill_flops(tokens, 0, heads, m.head_dim, m.v_head_dim)))
    assert all(c.attention_ms(tokens, 0, b) == mha0 for b in BACKENDS)
    # a prefix on triton (kttune's launch, the default): q.k over 512 + 64 and p.v over 512 per head
    pairs = tokens * prefix + tokens * (tokens + 1) / 2
    absorbed = fit((1.0, 2 * pairs * heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim)))
    assert c.attention_ms(tokens, prefix) == pytest.approx(absorbed) == c.attention_ms(tokens, prefix, "triton")
    # one shot: MHA over the same pairs, and kv_b_proj over the prefix's latents
    nope = m.head_dim - m.qk_rope_head_dim
    one_shot = fit((1.0, attention_prefill_flops(tokens, prefix, heads, m.head_dim, m.v_head_dim))) + c._gemm_fit(
        gemm_features(prefix, m.kv_lora_rank, heads * (nope + m.v_head_dim))
    )
    assert c.attention_ms(tokens, prefix, EXPAND_EVERY_PREFIX) == pytest.approx(one_shot)
    fi = c.attention_ms(tokens, prefix, "flashinfer")
    assert fi == pytest.approx(one_shot if prefix >= MLA_CHUNKED_PREFIX_THRESHOLD else absorbed)


def test_the_latent_form_costs_three_times_the_flops_of_mha_per_pair():
    """DeepSeek-V3: 2 x (576 + 512) flops a head and query-key pair against MHA's 2 x (192 + 128), so
    a chunk over a long prefix costs about 3.4x on triton what the expanded forms cost."""
    c = comp("deepseek-v3")
    fixed = c._attn_fit.coef[0]
    ratio = (c.attention_ms(8192, 57344) - fixed) / (c.attention_ms(8192, 57344, EXPAND_EVERY_PREFIX) - fixed)
    assert 3.0 < ratio < 1088 / 320


def test_gqa_models_have_one_form():
    c = comp("qwen3-30b-a3b")
    assert len({c.attention_ms(4096, 20000, b) for b in BACKENDS}) == 1


@pytest.mark.parametrize("gpu,backend", [(None, "fa3"), ("rtx5090", "triton"), ("a100", "triton")])
def test_a_command_without_a_backend_runs_on_sglang_s_pick_for_the_gpu(gpu, backend):
    """SGLang picks fa3 for MLA on Hopper and triton on SM 80 / SM 120 (flashinfer on SM 100, which
    the GPU table holds no card of): `explain -- COMMAND` models the pick, `sglang_default_mla_backend`."""
    from kttune.hw.derive import Change, derive_profile
    from kttune.hw.registry import load_shipped
    from kttune.memory.vram import SGLANG_DEFAULT_BACKEND, sglang_default_mla_backend

    p = load_shipped("h200-pcie5-xeon-amx-16c")
    if gpu:
        p = derive_profile(p, Change(gpu=gpu)).profile
    m = model("deepseek-v3")
    c = Components(p, m, m.default_method, attention_backend=SGLANG_DEFAULT_BACKEND)
    assert c.mla_backend == backend
    assert sglang_default_mla_backend(100) == "flashinfer" and sglang_default_mla_backend(None) == "triton"
    d = Components(p, model("deepseek-v3.2"), "FP8", attention_backend=SGLANG_DEFAULT_BACKEND)
    assert d.runs_sparse_attention  # a sparse-attention model: nsa whatever the GPU
