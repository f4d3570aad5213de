"""The physical features the cost fits are linear in, against independent counts."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kttune.hw.features import attention_prefill_flops, expected_experts_touched, gemm_features, moe_features


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


def test_gemm_features():
    assert gemm_features(3, 4, 5) == (1.0, 2.0 * 4 * 5, 2.0 * 3 * 4 * 5)
