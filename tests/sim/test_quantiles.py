"""Streaming statistics against numpy on the full list: exact below the exact limit, within the
stated relative error above it; exact length counts against the sorted-list rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kttune.sim.quantiles import RELATIVE_ACCURACY, Distribution, LengthCounts, Reservoir, quantile_bins

A = RELATIVE_ACCURACY * (1 + 1e-9)
QS = (0, 1, 10, 50, 90, 99, 100)
values = st.lists(st.floats(1e-6, 1e9, allow_nan=False, allow_subnormal=False), min_size=1, max_size=300)


def _fill(xs, exact_limit, runs=()):
    d = Distribution(exact_limit=exact_limit)
    for x in xs:
        d.add(x)
    for a, s, n in runs:
        d.add_run(a, s, n)
    return d


@settings(max_examples=60, deadline=None)
@given(xs=values, zeros=st.integers(0, 5), infs=st.integers(0, 5))
def test_percentiles_exact_below_the_limit_and_within_the_error_above(xs, zeros, infs):
    ref = np.array(xs)
    exact, sketch = _fill(xs, 10**9), _fill(xs, 0)
    for d in (exact, sketch):
        d.zeros, d.infs = zeros, infs
    assert exact.exact and not sketch.exact
    assert exact.percentiles(QS) == pytest.approx(np.percentile(ref, QS), rel=0, abs=0)
    lo, hi = np.percentile(ref, QS, method="lower"), np.percentile(ref, QS, method="higher")
    lin = np.percentile(ref, QS)
    for got, l, h, want in zip(sketch.percentiles(QS), lo, hi, lin):
        assert l * (1 - A) <= got <= h * (1 + A)
        assert abs(got - want) <= A * want
    for d in (exact, sketch):  # exact in both modes
        assert d.count() == len(xs) and d.max() == ref.max() and d.min() == ref.min()
        assert d.mean() == pytest.approx(ref.mean(), rel=1e-12)
    full = np.concatenate([np.zeros(zeros), ref, np.full(infs, np.inf)])
    for q in (50, 90, 99):
        want = float(np.percentile(full, q, method="higher"))
        assert exact.higher(q) == want
        got = sketch.higher(q)
        assert got == want if want in (0.0, math.inf) else abs(got - want) <= A * want


@settings(max_examples=40, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.floats(1e-3, 1e6, allow_nan=False, allow_subnormal=False), st.integers(1, 40)),
        min_size=1,
        max_size=200,
    )
)
def test_weighted_quantiles_are_the_first_value_whose_weight_reaches_q(pairs):
    xs = np.array([x for x, _ in pairs])
    ws = np.array([w for _, w in pairs], dtype=float)
    order = np.argsort(xs)
    cum = np.cumsum(ws[order])
    want = [xs[order][min(len(xs) - 1, int(np.searchsorted(cum, q / 100 * cum[-1])))] for q in QS]
    for limit in (10**9, 0):
        d = Distribution(weighted=True, exact_limit=limit)
        for x, w in pairs:
            d.add(x, w)
        got = d.weighted_quantiles(QS)
        for g, w in zip(got, want):
            assert (g == w) if limit else abs(g - w) <= A * w
        assert d.mean() == pytest.approx(float((xs * ws).sum() / ws.sum()), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    runs=st.lists(
        st.tuples(
            st.floats(0.01, 1e4, allow_subnormal=False),
            st.floats(0.0, 5.0, allow_subnormal=False),
            st.integers(1, 3000),
        ),
        min_size=1,
        max_size=20,
    ),
    w=st.integers(1, 64),
)
def test_runs_are_their_values(runs, w):
    """A run (first, step, count) is the values first + step x j, as the decode-only stretches give them."""
    xs = np.concatenate([a + s * np.arange(n, dtype=float) for a, s, n in runs])
    for limit in (10**9, 0):
        d = Distribution(weighted=True, exact_limit=limit)
        for a, s, n in runs:
            d.add_run(a, s, n, w)
        assert d.count() == xs.size and d.max() == xs.max()
        order = np.argsort(xs)
        cum = np.cumsum(np.full(xs.size, float(w)))
        want = [xs[order][min(xs.size - 1, int(np.searchsorted(cum, q / 100 * cum[-1])))] for q in QS]
        for g, v in zip(d.weighted_quantiles(QS), want):
            assert (g == v) if limit else abs(g - v) <= A * v
        h = d.histogram()
        assert h["counts"].sum() == pytest.approx(w * xs.size)


def test_the_switch_keeps_memory_fixed():
    """Past the limit the held values go into the fixed-size histogram: nothing grows with the count."""
    d = Distribution(exact_limit=1000)
    for i in range(50_000):
        d.add(1.0 + i % 977)
    assert not d.exact and d._held < 70_000 and d.count() == 50_000
    size = d._hist.size
    for i in range(50_000):
        d.add(5.0)
    assert d._hist.size == size


lengths = st.lists(st.integers(1, 200_000), min_size=1, max_size=400)


def _old_bins(samples, bins=12):
    """The sorted-list rule, written out: index ranges b n / bins, each standing for its middle element."""
    s = sorted(samples)
    if len(set(s)) <= bins:
        xs = sorted(set(s))
        return tuple(xs), tuple(s.count(x) / len(s) for x in xs)
    reps: dict[int, float] = {}
    for b in range(bins):
        lo, hi = b * len(s) // bins, (b + 1) * len(s) // bins
        if hi > lo:
            part = s[lo:hi]
            reps[part[len(part) // 2]] = reps.get(part[len(part) // 2], 0.0) + len(part) / len(s)
    return tuple(reps), tuple(reps.values())


@settings(max_examples=80, deadline=None)
@given(xs=lengths, split=st.integers(1, 5))
def test_length_counts_bin_and_summarise_like_the_sorted_list(xs, split):
    c = LengthCounts()
    for part in np.array_split(np.array(xs), split):  # fed in pieces: the result does not depend on it
        c.add(part)
    reps, ws = quantile_bins(c)
    want_r, want_w = _old_bins(xs)
    assert reps == want_r and ws == pytest.approx(want_w)
    s, n = sorted(xs), len(xs)
    st_ = c.statistics()
    assert st_ == {
        "mean": pytest.approx(sum(s) / n),
        "p50": s[n // 2],
        "p90": s[min(n - 1, int(0.9 * n))],
        "max": s[-1],
    }


@settings(max_examples=40, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.integers(1, 10**6), st.floats(0.01, 10.0, allow_subnormal=False)),
        min_size=13,
        max_size=200,
        unique_by=lambda p: p[0],
    )
)
def test_weighted_bins_are_the_quantiles_at_bin_middles(pairs):
    """With real weights each bin has share 1/12 and stands for the weighted quantile at (b + 1/2) / 12."""
    c = LengthCounts()
    c.add(np.array([p for p, _ in pairs]), np.array([w for _, w in pairs]))
    reps, ws = quantile_bins(c)
    assert sum(ws) == pytest.approx(1.0) and len(reps) <= 12 and list(reps) == sorted(reps)
    xs = sorted(pairs)
    total = sum(w for _, w in xs)
    for b in range(12):
        pos, acc = (b + 0.5) / 12 * total, 0.0
        for v, w in xs:
            acc += w
            if acc > pos:
                assert v in reps
                break


def test_reservoir_keeps_everything_short_and_k_of_a_long_stream():
    r = Reservoir(50, seed=1)
    for i in range(30):
        r.add(i)
    assert sorted(r.items) == list(range(30))
    r = Reservoir(50, seed=1)
    for i in range(100_000):
        r.add(i)
    assert len(r.items) == 50 and len(set(r.items)) == 50 and r.seen == 100_000
    # uniform: the kept items are spread over the stream, not its head or tail
    assert 20_000 < float(np.median(r.items)) < 80_000
