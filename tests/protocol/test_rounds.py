"""The schedule: warm-up before the first timed sample, interleaved rounds, outliers re-measured,
resume and early stop."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kttune.protocol import Protocol, measure_rounds


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8), st.integers(1, 5), st.integers(0, 10**6))
def test_every_item_every_round_once_warmed_first(n_items, repeats, seed):
    items = [f"c{i}" for i in range(n_items)]
    log: list[tuple[str, str, int]] = []

    def warm(i):
        log.append(("warm", i, -1))

    def sample(i, r):
        log.append(("time", i, r))
        return 1.0

    res = measure_rounds(items, sample, Protocol(repeats=repeats, seed=seed), warm=warm)
    timed = [(i, r) for k, i, r in log if k == "time"]
    assert sorted(timed) == sorted((i, r) for i in items for r in range(repeats))
    for i in items:  # one warm-up, before the item's first timed sample
        first_warm = log.index(("warm", i, -1))
        assert [k for k, j, _ in log if j == i].count("warm") == 1
        assert first_warm < min(n for n, e in enumerate(log) if e[:2] == ("time", i))
    for r in range(repeats):  # each round is a permutation of the items
        assert sorted(i for i, rr in timed if rr == r) == sorted(items)
    assert all(res.estimates[i].n == repeats for i in items)


def test_rounds_are_shuffled():
    orders = set()
    p = Protocol(repeats=6, seed=1)
    for r in range(6):
        orders.add(tuple(p.order(list(range(8)), r)))
    assert len(orders) > 1


def test_an_outlier_is_measured_again_and_kept_named():
    calls = {"a": 0}

    def sample(i, r):
        calls[i] += 1
        return 500.0 if calls[i] == 2 else 100.0 + r  # the second sample is disturbed

    res = measure_rounds(["a"], sample, Protocol(repeats=3))
    e = res.estimates["a"]
    assert calls["a"] == 4 and len(e.samples) == 4
    assert [o.value for o in e.outliers] == [500.0] and e.n == 3 and e.median < 110


def test_the_callers_flag_is_an_outlier_reason_and_remeasures_are_bounded():
    res = measure_rounds(
        ["a"],
        lambda i, r: 100.0 + r,
        Protocol(repeats=3, max_remeasure=2),
        flag=lambda i, v: "disturbed" if v == 101.0 else None,
    )
    e = res.estimates["a"]
    # round 1 is always disturbed: its re-measure is named too, and the next round's end measures
    # once more (two re-measures: the bound), which is clean
    assert e.samples == (100.0, 101.0, 101.0, 102.0, 102.0)
    assert [o.reason for o in e.outliers] == ["disturbed"] * 2 and e.n == 3


def test_resume_measures_only_the_missing_rounds():
    seen = []
    known = {"a": [(0, 12.5, None), (1, 11.5, None)], "b": [(0, 12.2, None)]}
    res = measure_rounds(["a", "b"], lambda i, r: seen.append((i, r)) or 12.0, Protocol(repeats=3), known=known)
    assert sorted(seen) == [("a", 2), ("b", 1), ("b", 2)]
    assert res.estimates["a"].samples == (12.5, 11.5, 12.0)


def test_stop_ends_after_the_current_sample_and_keeps_it():
    n = [0]
    res = measure_rounds(
        list("abcd"),
        lambda i, r: n.__setitem__(0, n[0] + 1) or random.uniform(1, 2),
        Protocol(repeats=3),
        stop=lambda: n[0] >= 5,
    )
    assert res.stopped and res.samples.timed == 5 and sum(e.n + len(e.outliers) for e in res.estimates.values()) == 5


def test_unmeasurable_items_are_dropped_with_their_reason():
    res = measure_rounds(
        ["a", "b"],
        lambda i, r: None if i == "b" else 1.0,
        Protocol(repeats=2),
        unmeasurable=lambda i: "over the time cap",
    )
    assert set(res.estimates) == {"a"} and res.samples.unmeasurable == {"b": "over the time cap"}


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 5))
def test_a_resumed_schedule_measures_nothing_more(seed, cut):
    """Run a schedule with outliers, keep its first `cut` samples, resume: the resumed run takes
    exactly the samples the first run took after them (in number), and nothing once all are known."""
    rng = random.Random(seed)
    values = {}

    def sample(i, r):
        k = (i, r, sum(1 for key in values if key[:2] == (i, r)))
        values[k] = rng.choice([1.0, 1.01, 0.99, 3.0])
        return values[k]

    p = Protocol(repeats=4, seed=seed)
    first = measure_rounds(list("abc"), sample, p)
    known = {i: list(vs) for i, vs in first.samples.values.items()}
    again = measure_rounds(list("abc"), lambda i, r: 1.0, p, known=known)
    assert again.samples.timed == 0
