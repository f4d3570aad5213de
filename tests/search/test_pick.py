"""The Pareto front and the pick, as laws over arbitrary evaluations (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kttune.search.evaluate import Evaluation
from kttune.search.pick import pareto_front, pick
from tests.helpers import cfg


def ev(ttft: float, tok_s: float, kv: int = 65536) -> Evaluation:
    # pick and pareto_front read the times, the throughput and the KV size only
    return Evaluation(cfg("BF16", max_total_tokens=kv), ttft, (), 1, 1e3 / tok_s, tok_s, None, None)


evals = st.lists(
    st.builds(ev, st.floats(1, 1e6), st.floats(0.1, 1e4), st.sampled_from([32768, 65536])), min_size=1, max_size=30
)


def dominates(a: Evaluation, b: Evaluation) -> bool:
    return (
        a.mean_ttft_ms <= b.mean_ttft_ms
        and a.decode_tok_s >= b.decode_tok_s
        and (a.mean_ttft_ms < b.mean_ttft_ms or a.decode_tok_s > b.decode_tok_s)
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evals)
def test_the_front_is_exactly_the_undominated(es):
    front = pareto_front(es)
    assert all(not dominates(o, f) for f in front for o in es)  # nothing beats a front member
    for e in es:  # everything else is beaten or matched (throughputs within 1e-9 tok/s count as equal)
        assert any(f.mean_ttft_ms <= e.mean_ttft_ms and f.decode_tok_s >= e.decode_tok_s - 1e-9 for f in front)
    assert [f.mean_ttft_ms for f in front] == sorted(f.mean_ttft_ms for f in front)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evals, st.floats(0, 1, allow_subnormal=False), st.floats(0, 1, allow_subnormal=False))
def test_more_decode_weight_never_picks_slower_decode(es, w1, w2):
    front = pareto_front(es)
    lo, hi = sorted((w1, w2))
    a, b = pick(front, lo), pick(front, hi)
    assert b.decode_tok_s >= a.decode_tok_s * (1 - 1e-9)  # up to rounding of the two scores
    assert b.mean_ttft_ms >= a.mean_ttft_ms * (1 - 1e-9)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evals)
def test_the_extremes_pick_each_objectives_best(es):
    front = pareto_front(es)
    # the front treats decode rates within 1e-9 as one point (pareto_front), so compare up to that
    assert pick(front, 0.0).mean_ttft_ms == min(e.mean_ttft_ms for e in es)
    assert pick(front, 1.0).decode_tok_s == pytest.approx(max(e.decode_tok_s for e in es), rel=1e-9, abs=1e-9)


def test_ties_prefer_the_larger_kv_pool():
    small, big = ev(100, 50, kv=32768), ev(100, 50, kv=65536)
    assert pick([small, big], 0.5) is big
    assert pareto_front([small, big]) == [big]
