"""The router model against a Monte-Carlo sample of the routing it describes, and the cost model's
uniform formula."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from kttune.cost.features import expected_experts_touched
from kttune.sim.router import expected_distinct_experts, inclusion_probabilities, monte_carlo_distinct


@settings(max_examples=25, deadline=None)
@given(
    e=st.sampled_from([8, 32, 64, 128]),
    k=st.integers(1, 8),
    b=st.integers(1, 64),
    skew=st.sampled_from([0.0, 0.5, 1.0, 1.5]),
)
def test_formula_matches_monte_carlo(e, k, b, skew):
    k = min(k, e)
    trials = 150
    mc = monte_carlo_distinct(b, k, e, skew, trials, seed=b * 7 + k)
    f = expected_distinct_experts(b, k, e, skew)
    # the count is bounded by e, so its standard deviation is at most e/2: 5 sigma of the mean
    assert abs(mc - f) <= 5 * (e / 2) / math.sqrt(trials) + 1e-9


def test_uniform_is_the_cost_models_formula():
    for b in (1, 7, 100, 4096):
        assert expected_distinct_experts(b, 8, 128, 0.0) == expected_experts_touched(b, 8, 128, 128)
        # a tiny skew is the continuous continuation of uniform routing
        assert math.isclose(
            expected_distinct_experts(b, 8, 128, 1e-9), expected_experts_touched(b, 8, 128, 128), rel_tol=1e-6
        )


@given(e=st.integers(2, 300), k=st.integers(1, 16), skew=st.floats(0.0, 3.0, allow_subnormal=False))
def test_inclusion_probabilities_are_a_top_k_design(e, k, skew):
    k = min(k, e)
    q = inclusion_probabilities(e, k, skew)
    assert math.isclose(sum(q), k, rel_tol=1e-9)
    assert all(0 < x <= 1.0 for x in q)
    assert all(a >= b - 1e-12 for a, b in zip(q, q[1:]))  # ordered by popularity


@given(skew=st.floats(0.0, 2.0, allow_subnormal=False), b=st.integers(1, 2000))
def test_more_tokens_touch_more_experts_and_skew_touches_fewer(skew, b):
    d = expected_distinct_experts(b, 8, 128, skew)
    assert 8 - 1e-9 <= d <= 128
    assert expected_distinct_experts(b + 1, 8, 128, skew) >= d - 1e-9
    assert expected_distinct_experts(b, 8, 128, skew + 0.5) <= d + 1e-9


@given(skew=st.sampled_from([1e3, 1e6, 1e300]), e=st.integers(2, 384), k=st.integers(1, 8))
def test_extreme_skew_routes_every_token_to_the_top_k(skew, e, k):
    """Popularity r^-skew underflows at large skew; the probabilities do not: the top k experts take
    every token, so a batch of any size touches exactly k."""
    k = min(k, e)
    q = inclusion_probabilities(e, k, skew)
    assert sum(q) == pytest.approx(k) and q[:k] == pytest.approx((1.0,) * k)
    assert expected_distinct_experts(1000, k, e, skew) == pytest.approx(k)


def test_every_expert_chosen_when_top_k_is_all():
    assert inclusion_probabilities(4, 4, 1.5) == (1.0, 1.0, 1.0, 1.0)
