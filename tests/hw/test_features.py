"""The physical features the cost fits are linear in, against independent counts."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kttune.hw.features import (
    attention_prefill_flops,
    causal_pairs,
    expected_experts_touched,
    gemm_features,
    moe_features,
    sparse_attention_prefill_work,
)


@pytest.mark.parametrize(
    "tokens,top_k,experts,subset",
    [(1, 8, 128, 128), (16, 8, 128, 100), (64, 8, 384, 380), (4, 2, 8, 6), (48, 8, 256, 32)],
)
def test_experts_touched_matches_a_simulation(tokens, top_k, experts, subset):
    # uniform routing: every token picks top_k distinct experts; count the distinct ones of the subset
    rng = random.Random(0)
    runs = 800
    hit = 0
    for _ in range(runs):
        chosen = set()
        for _ in range(tokens):
            chosen.update(rng.sample(range(experts), top_k))
        hit += sum(1 for e in chosen if e < subset)
    assert expected_experts_touched(tokens, top_k, experts, subset) == pytest.approx(hit / runs, rel=0.03)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 10**5), k=st.integers(1, 8), e=st.integers(8, 512), s=st.integers(0, 512))
def test_experts_touched_is_bounded_and_grows_with_tokens(m, k, e, s):
    s = min(s, e)
    t = expected_experts_touched(m, k, e, s)
    assert 0 <= t <= s
    assert expected_experts_touched(m + 1, k, e, s) >= t


def test_moe_flops_count_every_token_expert_pair():
    # all experts on one side: 2 flops per MAC x 3 matrices x H x I per routed pair
    one, touched, flops = moe_features(10, 64, 32, 16, 4, 16, 1000)
    assert one == 1.0 and flops == 2 * 3 * 64 * 32 * 10 * 4
    assert touched == pytest.approx(1000 * expected_experts_touched(10, 4, 16, 16))
    assert moe_features(10, 64, 32, 16, 4, 8, 1000)[2] == flops / 2  # half the experts, half the pairs


def test_attention_flops_by_brute_force():
    # causal: token j (0-based) of the new ones attends to prefix + j + 1 keys
    tokens, prefix, heads, qk, v = 7, 5, 3, 16, 8
    brute = sum(2 * heads * (qk + v) * (prefix + j + 1) for j in range(tokens))
    assert attention_prefill_flops(tokens, prefix, heads, qk, v) == pytest.approx(brute)


@settings(max_examples=100, deadline=None)
@given(
    tokens=st.integers(0, 300), prefix=st.integers(0, 300), cap=st.one_of(st.integers(1, 400), st.just(float("inf")))
)
def test_causal_pairs_counts_each_query_s_context(tokens, prefix, cap):
    assert causal_pairs(tokens, prefix, cap) == sum(min(prefix + i, cap) for i in range(1, tokens + 1))


def _reference_dsa_prefill(tokens, prefix, heads, lora, rope, topk, index_heads, index_dim):
    """One sparse-attention layer written out query by query in torch (the indexer's scores over the
    causal context, its top-k, attention over the chosen latents): what FlopCounterMode counts."""
    import torch

    g = torch.Generator().manual_seed(0)
    ctx_all = prefix + tokens
    q = torch.randn(tokens, heads, lora + rope, generator=g)
    latent = torch.randn(ctx_all, lora + rope, generator=g)
    iq = torch.randn(tokens, index_heads, index_dim, generator=g)
    ik = torch.randn(ctx_all, index_dim, generator=g)
    w = torch.randn(index_heads, generator=g)
    for i in range(tokens):
        ctx = prefix + i + 1
        scores = (torch.relu(iq[i] @ ik[:ctx].T) * w[:, None]).sum(0)
        chosen = latent[:ctx][scores.topk(min(ctx, topk)).indices]
        probs = torch.softmax(q[i] @ chosen.T, dim=-1)
        probs @ chosen[:, :lora]


@pytest.mark.parametrize(
    "tokens,prefix,topk",
    [(12, 0, 32), (40, 0, 16), (24, 50, 16), (9, 3, 10)],
)
def test_sparse_attention_work_is_what_a_reference_layer_counts(tokens, prefix, topk):
    from torch.utils.flop_counter import FlopCounterMode

    heads, lora, rope, index_heads, index_dim = 4, 16, 8, 3, 8
    with FlopCounterMode(display=False) as counter:
        _reference_dsa_prefill(tokens, prefix, heads, lora, rope, topk, index_heads, index_dim)
    main, index, logit_bytes = sparse_attention_prefill_work(
        tokens, prefix, heads, lora, rope, topk, index_heads, index_dim
    )
    assert main + index == counter.get_total_flops()
    # one fp32 logit per causal query-key pair, written by the indexer and read back by the top-k
    assert logit_bytes == 8 * sum(prefix + i for i in range(1, tokens + 1))


def test_gemm_features():
    assert gemm_features(3, 4, 5) == (1.0, 2.0 * 4 * 5, 2.0 * 3 * 4 * 5)
