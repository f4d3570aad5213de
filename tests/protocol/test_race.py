"""The race decides by intervals: the true best wins or ties, the slower beyond noise go out early,
a tie within noise goes to the cheaper item."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kttune.protocol import Protocol, race


def noisy(means: dict, sigma: float, seed: int, drift: float = 0.0):
    rng = random.Random(seed)
    per_round: dict[int, float] = {}

    def sample(item, r):
        d = per_round.setdefault(r, 1 + drift * rng.random())  # a drift shared by the round
        return means[item] / d * math.exp(rng.gauss(0, sigma))

    return sample


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.lists(st.floats(0.5, 0.9), min_size=2, max_size=5))
def test_the_true_best_wins_and_the_clearly_slower_go_out(seed, rest):
    means = {"best": 1000.0, **{f"c{i}": 1000.0 * f for i, f in enumerate(rest)}}
    res = race(list(means), noisy(means, 0.01, seed, drift=0.2), Protocol(repeats=3, seed=seed), max_rounds=5)
    assert res.winner == "best"
    for e in res.entries:
        if e.item != "best":  # 10%+ slower at 1% noise (and a 20% drift between rounds): out
            assert e.status == "eliminated" and e.out_after_round <= 5 and "slower than best" in e.reason


def test_a_tie_within_noise_goes_to_the_cheaper():
    means = {"big": 1000.0, "small": 998.0}
    cost = {"big": (40,), "small": (10,)}
    res = race(list(means), noisy(means, 0.01, 1), Protocol(repeats=3), cost=lambda i: cost[i], max_rounds=4)
    assert res.best_measured in means and res.winner == "small"
    assert "cheaper" in res.decision or res.best_measured == "small"


def test_not_told_apart_is_no_tie_the_faster_median_wins():
    """At 10% noise 7 rounds cannot show two items within 5% of each other: the race does not call
    that a tie (which would hand the win to the cheaper on no evidence); the faster median wins."""
    means = {"big": 1000.0, "small": 990.0}
    cost = {"big": (40,), "small": (10,)}
    res = race(list(means), noisy(means, 0.10, 3), Protocol(repeats=3), cost=lambda i: cost[i], max_rounds=4)
    assert res.rounds == 4 + 3  # the extra rounds were raced, to no decision
    assert res.winner == res.best_measured
    other = next(e for e in res.entries if e.item != res.winner)
    assert other.status == "survived" and "not told apart" in other.reason
    assert other.vs_best.low < 0.95 or other.vs_best.high > 1.05


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.floats(0.95, 1.0), st.floats(0.005, 0.08))
def test_a_cheaper_winner_is_shown_within_the_margin_of_the_fastest(seed, f, sigma):
    means = {"fast": 1000.0, "cheap": 1000.0 * f}
    res = race(list(means), noisy(means, sigma, seed), Protocol(repeats=3, seed=seed), cost=lambda i: (i == "fast",))
    if res.winner != res.best_measured:
        c = next(e for e in res.entries if e.item == res.winner).vs_best
        assert 0.95 <= c.low and c.high <= 1.05 and c.ratio >= 0.97


def test_deterministic_samples_decide_in_the_minimum_rounds():
    means = {"a": 3.0, "b": 2.0, "c": 1.0}
    res = race(list(means), lambda i, r: means[i], Protocol(repeats=3), max_rounds=6)
    assert res.winner == "a" and res.rounds == 3 and res.timed_samples == 9
    assert [e.status for e in res.entries] == ["winner", "eliminated", "eliminated"]


def test_exactly_equal_items_tie_and_the_cheapest_wins():
    res = race(["x", "y"], lambda i, r: 5.0, Protocol(repeats=3), cost=lambda i: {"x": (2,), "y": (1,)}[i])
    assert res.winner == "y" and {e.status for e in res.entries} == {"winner", "best measured"}


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6))
def test_a_resumed_race_decides_alike_and_measures_nothing_more(seed):
    means = {"a": 1000.0, "b": 960.0, "c": 900.0, "d": 995.0}
    sample = noisy(means, 0.03, seed)
    p = Protocol(repeats=3, seed=seed)
    first = race(list(means), sample, p, max_rounds=5)
    known = {e.item: [] for e in first.entries}
    # the samples the first race took, from its estimates (values in order, with their rounds)
    for e in first.entries:
        known[e.item] = [(r, v, None) for r, v in zip(e.estimate.rounds, e.estimate.samples)]
    again = race(list(means), lambda i, r: 1.0, p, max_rounds=5, known=known)
    assert again.timed_samples == 0 and again.winner == first.winner
    assert [e.status for e in again.entries] == [e.status for e in first.entries]
