"""The protocol's statistics held to laws and to known distributions (not to their own output)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kttune.protocol import Comparison, check_crossing, compare, crossing, estimate, outliers_of

positive = st.floats(0.01, 1e6, allow_nan=False, allow_infinity=False)


@given(st.lists(positive, min_size=1, max_size=12), st.floats(0.01, 100))
@example([0.5, 0.5, 0.55], 0.25)  # a sample exactly min_rel from the median: rounding once moved it across
def test_scaling_the_samples_scales_the_estimate(xs, k):
    """Timing noise is multiplicative: estimate(k x) = k estimate(x), outliers included."""
    a, b = estimate(xs), estimate([k * x for x in xs])
    for f in ("median", "low", "high"):
        assert getattr(b, f) == pytest.approx(k * getattr(a, f), rel=1e-9)
    assert [o.index for o in a.outliers] == [o.index for o in b.outliers]
    assert b.cv == pytest.approx(a.cv, rel=1e-6, abs=1e-12)


@given(st.lists(positive, min_size=1, max_size=12))
def test_the_median_lies_in_the_samples_and_nothing_is_lost(xs):
    e = estimate(xs)
    assert min(xs) <= e.median <= max(xs) and e.low <= e.high
    assert e.n + len(e.outliers) == len(xs) or e.n == len(xs)  # every outlier named, or all kept when all were flagged
    assert sorted(e.kept + tuple(o.value for o in e.outliers)) == pytest.approx(sorted(xs)) or e.n == len(xs)


@given(st.lists(positive, min_size=2, max_size=10))
def test_throughput_is_the_reflection_of_time(xs):
    """tok/s = L / ms: the interval maps exactly, its ends swapped."""
    e = estimate(xs)
    t = e.map(lambda ms: 4096 / (ms / 1e3), decreasing=True)
    assert t.low == pytest.approx(4096e3 / e.high) and t.high == pytest.approx(4096e3 / e.low)
    assert t.median == pytest.approx(4096e3 / e.median)


def test_the_interval_covers_the_true_value_at_its_confidence():
    """Log-normal samples with a known geometric mean: the 95% interval of 5 samples covers it in
    about 95% of 1000 draws (binomial 3-sigma band), the 80% interval in about 80%."""
    rng = random.Random(7)
    for conf in (0.95, 0.80):
        hits = 0
        for _ in range(1000):
            xs = [100 * math.exp(rng.gauss(0, 0.05)) for _ in range(5)]
            e = estimate(xs, confidence=conf, min_rel=1.0)  # no outlier rule: the textbook interval
            hits += e.low <= 100 <= e.high
        band = 3 * math.sqrt(conf * (1 - conf) / 1000)
        assert abs(hits / 1000 - conf) < band, (conf, hits)


def test_outliers_are_named_with_their_reason_and_left_out():
    e = estimate([100, 101, 99, 100.5, 310])
    (o,) = e.outliers
    assert o.index == 4 and o.value == 310 and "above the median" in o.reason
    assert e.n == 4 and e.high < 110
    # the caller's reasons come first (the runner's disturbed forwards)
    f = estimate([100, 101, 99, 100.5], flags={1: "layers 3x apart"})
    assert [(x.index, x.reason) for x in f.outliers] == [(1, "layers 3x apart")] and f.n == 3


def test_tight_or_deterministic_samples_have_no_outliers():
    assert outliers_of([5.0, 5.0, 5.0, 5.0001]) == []  # below the relative floor
    e = estimate([2.0, 2.0, 2.0])
    assert e.low == e.high == e.median == 2.0 and not e.outliers
    assert estimate([3.0]).method == "single"


def test_pairing_cancels_a_drift_that_hits_both_alike():
    """b is 5% faster than a; the machine drifts by up to 30% between rounds. Paired by round the
    ratio is resolved; the same samples unpaired are not told apart."""
    rng = random.Random(3)
    drift = [1 + 0.3 * rng.random() for _ in range(6)]
    a = [100 * d * math.exp(rng.gauss(0, 0.003)) for d in drift]
    b = [105 * d * math.exp(rng.gauss(0, 0.003)) for d in drift]
    ea, eb = estimate(a, min_rel=1.0), estimate(b, min_rel=1.0)
    paired = compare(ea, eb)
    assert paired.paired and paired.verdict == "higher" and abs(paired.ratio - 1.05) < 0.01
    unpaired = compare(ea, estimate(b, rounds=range(10, 16), min_rel=1.0))
    assert not unpaired.paired and unpaired.verdict == "tie"


def test_pairing_counts_only_rounds_where_both_kept_a_sample():
    """Outliers are left out of the pairing too: two estimates over the same five rounds whose
    outliers fall in different rounds share fewer than two kept rounds, and then the ratio is
    Welch's, named unpaired (as a tune race on the CPU variant met it); one more shared round and
    it is paired again."""
    a = estimate([100, 101, 60, 100.5, 99.5], rounds=range(5), flags={0: "disturbed", 3: "disturbed"})
    b = estimate([110, 50, 111, 109.5, 110.5], rounds=range(5), flags={1: "disturbed"})
    assert {o.index for o in a.outliers} == {0, 2, 3}  # round 2: the MAD rule; a keeps rounds 1 and 4
    c = compare(a, b)  # b keeps 0, 2, 3, 4: only round 4 in common
    assert not c.paired and c.n == 2 and c.low < 1.1 < c.high
    b2 = estimate([110, 111, 111, 109.5, 110.5], rounds=range(5), flags={0: "disturbed"})
    c2 = compare(a, b2)  # rounds 1 and 4 in common
    assert c2.paired and c2.n == 2


@settings(max_examples=50, deadline=None)
@given(st.floats(100, 5000), st.floats(0.3, 1.5))
def test_crossing_of_a_power_law(x0, slope):
    """ratio(x) = (x0 / x)^slope crosses 1 at x0; the interval comes from the bounds' curves."""
    xs = [32 * 2 ** (i / 2) for i in range(16)]  # 32 .. ~5800
    if not xs[0] < x0 < xs[-1]:
        return
    ratios = []
    for x in xs:
        r = (x0 / x) ** slope
        ratios.append(Comparison(r, r * 0.97, r * 1.03, 0.95, True, 3))
    c = crossing(xs, ratios)
    assert c.x == pytest.approx(x0, rel=1e-6)
    assert c.low <= c.x <= c.high


def test_crossing_outside_the_range_says_which_side():
    up = [Comparison(2.0, 1.9, 2.1, 0.95, True, 3)] * 3
    assert crossing([1, 2, 3], up).side == "above" and crossing([1, 2, 3], up).x is None


def _sweep(x0: float, spread: float, sizes=(64, 96, 128, 192, 256)):
    """A measured sweep whose ratio (x0 / x) crosses 1 at x0, each ratio known within +-spread."""
    ratios = [Comparison(x0 / x, x0 / x * (1 - spread), x0 / x * (1 + spread), 0.95, True, 3) for x in sizes]
    return list(sizes), crossing(list(sizes), ratios)


def test_a_prediction_inside_a_wide_interval_agrees_beyond_the_tolerance():
    sizes, c = _sweep(100, 0.30)  # the interval is wide: its bounds cross 1 at about 77 and 130
    far = c.high * 0.99
    check = check_crossing(far, sizes, c)
    assert abs(far - 100) / 100 > 0.2 and check.inside and check.agrees
    assert check.measured == pytest.approx(100) and check.error == pytest.approx(abs(far - 100) / 100)


def test_a_prediction_outside_a_tight_interval_agrees_within_the_tolerance_only():
    sizes, c = _sweep(100, 0.01)
    near, far = check_crossing(115, sizes, c), check_crossing(125, sizes, c)
    assert not near.inside and near.agrees
    assert not far.inside and far.agrees is False
    assert check_crossing(None, sizes, c).agrees is False  # the model never has layerwise win


def test_a_crossover_beyond_the_sweep_is_a_bound():
    sizes, below = _sweep(40, 0.02)  # layerwise wins at every size: at or below 64
    assert below.side == "below"
    assert check_crossing(60, sizes, below).agrees and check_crossing(60, sizes, below).edge == "below"
    # 70 is within 20% of 64, but the measured crossover is at most 64: it cannot be judged near
    assert check_crossing(70, sizes, below).agrees is False
    sizes, above = _sweep(400, 0.02)  # hybrid wins at every size: above 256
    assert above.side == "above"
    assert check_crossing(300, sizes, above).agrees and check_crossing(None, sizes, above).agrees
    assert check_crossing(230, sizes, above).agrees is False and check_crossing(230, sizes, above).measured is None


def test_single_samples_judge_without_an_interval():
    sizes = [64, 96, 128]
    assert check_crossing(110, sizes, None, single=100).agrees and not check_crossing(110, sizes, None, 100).inside
    assert check_crossing(60, sizes, None, single=64).edge == "below"
    assert check_crossing(200, sizes, None, single=None).edge == "above"
    assert check_crossing(200, [], None, single=None).agrees is None  # nothing measured


@given(st.floats(-1e6, 1e6, allow_subnormal=False), st.floats(-1e3, 1e3, allow_subnormal=False), st.integers(3, 40))
def test_trend_of_a_line_is_its_slope(a, b, n):
    from kttune.protocol import trend

    t = trend([a + b * i for i in range(n)])
    assert t.slope == pytest.approx(b, abs=1e-6 * max(1, abs(b), abs(a)))


def test_trend_ignores_one_odd_step():
    from kttune.protocol import trend

    ys = [100.0] * 20
    ys[7] = 5000.0  # one large allocation, returned at the next step
    assert trend(ys).slope == 0 and trend(ys).rise == 4900
