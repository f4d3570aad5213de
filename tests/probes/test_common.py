"""A disturbed or short point is timed again and the median of its timings kept (the machine's speed
moves both ways; a third timing, where two disagree, keeps one busy moment out); points that stay
disturbed are reported. The disturbance is real: a host that is busy for part or all of the first
timing (sleeps on calls), quiet for the second."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from kttune.hw.profile import Curve, Point
from kttune.probes.common import (
    AGREE_LIMIT,
    SCATTER_LIMIT,
    NullReporter,
    busy_note,
    disturbed,
    disturbed_note,
    measure,
    retime,
    retime_by_thread_law,
    scatter,
)
from kttune.probes.cpu_moe import CpuMoeOptions, CpuMoeTask, _measure_curve
from kttune.spec.moe_shape import MoeLayerShape


def _work(ms: float = 0.5) -> None:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < ms / 1e3:
        pass


def _pt(x, ms, p10, p90, n=10):
    return Point(x=x, t_ms=ms, t_ms_p10=p10, t_ms_p90=p90, n=n)


def _median_of_timings(p: Point) -> float:
    ms = sorted(t["ms"] for t in p.extra["timings"])
    return (ms[(len(ms) - 1) // 2] + ms[len(ms) // 2]) / 2


def test_a_scattered_point_is_timed_again_and_the_median_kept():
    first = _pt(4, 3.0, 1.0, 9.0)
    tight = _pt(4, 1.1, 1.0, 1.2)
    calm = _pt(16, 2.0, 1.9, 2.2)
    asked = []

    def again(p):
        asked.append(p.x)
        return tight

    out = retime([first, calm], again, NullReporter(), "t", every=False)
    assert asked == [4, 4]  # the calm point is not timed again; 3.0 against 1.1 asks for a third
    assert out[0].t_ms == 1.1 and [t["ms"] for t in out[0].extra["timings"]] == [3.0, 1.1, 1.1]
    assert out[0].extra["timings"][0]["scatter"] == 9.0 and out[1] == calm
    # twice slower after a scattered first timing: the machine's typical time is the slower one
    slow = _pt(4, 5.0, 4.9, 5.1)
    (kept,) = retime([first], lambda p: slow, NullReporter(), "t", every=False)
    assert kept.t_ms == 5.0 and (kept.t_ms_p10, kept.t_ms_p90) == (4.9, 5.1) and len(kept.extra["timings"]) == 3
    # keep="fastest" (a curve whose point stays one whole run) keeps the fastest try as it was
    (fast,) = retime([first], lambda p: slow, NullReporter(), "t", every=False, keep="fastest")
    assert fast.t_ms == 3.0 and fast.t_ms_p90 == 9.0 and len(fast.extra["timings"]) == 3


def test_the_median_of_two_timings_is_their_mean_with_the_tighter_spread():
    """Two timings that agree: their mean, with the tighter timing's own spread widened to hold it
    (the quality checks read a timing's own spread; the record holds the distance between the two)."""
    first = _pt(4, 1.0, 0.95, 1.05, n=5)
    (kept,) = retime([first], lambda p: _pt(4, 1.2, 1.15, 1.25, n=5), NullReporter(), "t")
    assert kept.t_ms == 1.1 and (kept.t_ms_p10, kept.t_ms_p90, kept.n) == (1.1, 1.25, 10)
    assert not disturbed(kept)


def test_a_scattered_timing_asks_for_a_third_before_a_median():
    """A scattered first timing and a tight second that agree: for the median a third timing is
    taken, so the point kept is a tight timing; the fastest rule needs none (it keeps the tight one)."""
    first = _pt(4, 1.2, 0.5, 3.0, n=5)
    asked = []

    def again(p):
        asked.append(p.x)
        return _pt(4, 1.0 + 0.01 * len(asked), 0.98, 1.05, n=5)

    (kept,) = retime([first], again, NullReporter(), "t", every=False)
    assert len(asked) == 2 and kept.t_ms == 1.02 and scatter(kept) <= SCATTER_LIMIT
    asked.clear()
    (fast,) = retime([first], again, NullReporter(), "t", every=False, keep="fastest")
    assert len(asked) == 1 and fast.t_ms == 1.01


def test_an_unknown_keep_rule_is_refused():
    import pytest

    with pytest.raises(ValueError, match="keep must be one of"):
        retime([_pt(4, 1.0, 0.9, 1.1)], lambda p: p, NullReporter(), "t", keep="slowest")


def test_two_timings_that_agree_take_no_third():
    first = _pt(4, 1.0, 0.95, 1.05, n=5)  # short: 5 ms of timing in all
    close = _pt(4, 1.1, 1.05, 1.15, n=5)
    asked = []

    def again(p):
        asked.append(p.x)
        return close

    (kept,) = retime([first], again, NullReporter(), "t")
    assert asked == [4] and abs(kept.t_ms - 1.05) < 1e-12 and not disturbed(kept)
    # a long timing that did not scatter is left as it is
    long = _pt(64, 300.0, 290.0, 310.0, n=5)
    assert retime([long], again, NullReporter(), "t") == [long]


def _curve_busy_while_first_timed(delayed):
    """One CPU MoE size timed by `_measure_curve` on a host busy until the first timing is over: a
    call sleeps 5 ms when `delayed(call number)` while busy. Its point."""
    busy = {"on": True, "calls": 0}

    def run(n):
        def fn():
            busy["calls"] += 1
            _work(0.5)
            if busy["on"] and delayed(busy["calls"]):
                time.sleep(0.005)

        return fn

    opts = CpuMoeOptions(shapes=(), tokens=(4,), warmup=1, repeats=10, min_total_s=0.0, max_repeats=10)
    task = CpuMoeTask("BF16", 1, 1, MoeLayerShape(64, 32, 4, 2), (4,))

    class Quiet(NullReporter):
        def step(self, description, advance=1.0):
            if "4 tok" in description:  # the first timing is over: the host quietens
                busy["on"] = False

    (pt,), _ = _measure_curve(run, task, [4], opts, Quiet(), "t")
    return pt


def test_a_point_timed_wholly_inside_a_busy_moment_is_caught():
    """The host is busy (every call delayed 5 ms) for the whole of the point's first timing: its
    samples agree with each other, so its spread says nothing; the second pass, on a quiet host,
    finds the call's own time."""
    pt = _curve_busy_while_first_timed(lambda call: True)
    first = pt.extra["timings"][0]
    assert first["ms"] > 5.0 and first["scatter"] <= SCATTER_LIMIT  # tight and slow
    assert len(pt.extra["timings"]) == 3  # 5 ms against 0.5: the two disagree, a third is taken
    assert pt.t_ms < 3.0 and pt.t_ms == _median_of_timings(pt)


def test_the_cpu_moe_curve_times_a_scattered_size_again():
    pt = _curve_busy_while_first_timed(lambda call: call % 5 < 3)  # three calls in five delayed
    first = pt.extra["timings"][0]
    assert first["scatter"] > SCATTER_LIMIT and first["ms"] > 4.0  # most first samples slept 5 ms
    assert pt.t_ms < 3.0 and scatter(pt) <= first["scatter"]


def test_a_repeat_timing_that_fails_keeps_the_first():
    """A second timing that raises (kt-kernel out of memory, say) loses nothing: the first stands and
    the point and a note say why it was not timed again."""
    first = _pt(4, 3.0, 1.0, 9.0)

    def fails(p):
        raise MemoryError("no room for the second layer")

    rep = NullReporter()
    (kept,) = retime([first], fails, rep, "t")
    assert kept.t_ms == 3.0 and [t["ms"] for t in kept.extra["timings"]] == [3.0]
    assert "MemoryError" in kept.extra["retime_error"] and "could not be timed again" in rep.notes[0]
    assert disturbed(kept)  # still scattered: the note about disturbed points counts it


def test_points_that_stay_disturbed_are_reported():
    calm = measure(_work, x=1, warmup=1, repeats=5)
    noisy = _pt(2, 3.0, 1.0, 9.0)
    apart = Point(
        x=4, t_ms=1.0, t_ms_p10=0.95, t_ms_p90=1.05, n=5, extra={"timings": [{"ms": 2.0}, {"ms": 1.0}, {"ms": 1.6}]}
    )
    assert 1.6 > AGREE_LIMIT * 1.0 and disturbed(apart)
    quiet = Curve(kind="cpu_moe", x_unit="tokens", points=(calm,))
    assert disturbed_note([quiet], "CPU MoE") is None or scatter(calm) > SCATTER_LIMIT
    note = disturbed_note([Curve(kind="cpu_moe", x_unit="tokens", points=(noisy, apart))], "CPU MoE")
    assert note.startswith("CPU MoE: 2 of 2 points disturbed") and "--fresh" in note


def test_the_note_counts_a_streamed_layer_slower_per_byte_than_a_smaller_one():
    """The first quick probe of a fresh H100 instance: its 2.1 GB RAWINT4 layer at 11 threads tight
    and slow (116 ms after 32 ms for 1.07 GB); the probe's pipeline note counts it, and counts nothing
    on the same instance's next probe."""
    from kttune.hw.profile import load_profile

    folder = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "2026-12-05-h100-pcie5-xeon-amx-16c"
    first = load_profile(folder / "quick-transfer-h100b.profile.json")
    again = load_profile(folder / "quick-transfer-h100b-again.profile.json")
    pipeline = [c for c in first.curves if c.kind == "pipeline"]
    note = disturbed_note(pipeline, "layerwise pipeline")
    n = sum(len(c.points) for c in pipeline)
    assert note.startswith(f"layerwise pipeline: 1 of {n} points disturbed") and "slower per byte" in note
    assert disturbed_note([c for c in again.curves if c.kind == "pipeline"], "layerwise pipeline") is None


def test_the_busy_note_names_a_busy_instances_probe_and_not_a_quiet_ones():
    """H200 instance f's first quick probe named 14 of its 166 points (its runner scattered twice as
    much as on other instances); H100 instance t's named none. Only the first gets the whole-probe note,
    which counts the points and points at the cure (a quiet machine, not --repeat)."""
    from kttune.hw.profile import load_profile

    results = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    f = load_profile(results / "2026-12-06-h200-pcie5-xeon-amx-16c" / "quick-transfer-h200f.profile.json")
    t = load_profile(results / "2026-12-06-h100-pcie5-xeon-amx-16c" / "quick-transfer-h100t.profile.json")
    note = busy_note(f.curves)
    assert note.startswith("this machine was busy while probed: 14 of 166 points read as disturbed")
    assert "--repeat does not cure" in note and "docs/probe.md#a-busy-machine" in note
    assert busy_note(t.curves) is None


def test_a_point_its_curve_shows_to_be_off_is_timed_again_though_its_own_timing_is_tight():
    """`suspect` names points the curve's other points show to be off (a streamed layer slower per
    byte than a smaller one): tight and slow, their own spread does not say so."""
    tight_slow = _pt(2048, 116.5, 114.0, 118.0)
    tight_fine = _pt(1024, 32.2, 31.9, 32.6)
    asked = []

    def again(p):
        asked.append(p.x)
        return _pt(p.x, 56.2, 55.8, 56.9)

    out = retime([tight_fine, tight_slow], again, NullReporter(), "t", every=False, suspect=lambda p: p.x == 2048)
    assert out[0] == tight_fine and set(asked) == {2048}
    assert out[1].t_ms == 56.2 and out[1].extra["timings"][0]["ms"] == 116.5
    # without `suspect` the same tight points are left as they are
    assert retime([tight_fine, tight_slow], again, NullReporter(), "t", every=False) == [tight_fine, tight_slow]


def _moe_curve(threads: int, ms: dict[int, float]) -> Curve:
    return Curve(
        kind="cpu_moe",
        x_unit="tokens",
        points=tuple(Point(x=x, t_ms=t, t_ms_p10=t, t_ms_p90=t, n=5) for x, t in ms.items()),
        params={"method": "BF16", "threads": threads, "hidden": 256, "inter": 128, "experts": 8, "top_k": 2},
    )


def test_a_count_slower_than_a_larger_pool_allows_is_timed_again_there():
    """The thread law's points are timed again on their own curve (its thread count) and the median
    of their timings kept with every timing; the other points and curves stay as they were."""
    eleven = _moe_curve(11, {16: 30.0, 64: 40.0})  # 16 tokens: over 13/11 x 1.1 x 20 = 26
    thirteen = _moe_curve(13, {16: 20.0, 64: 34.0})
    asked = []

    def remeasure(c, p):
        asked.append((c.params["threads"], p.x))
        return replace(p, t_ms=25.0, t_ms_p10=25.0, t_ms_p90=25.0)  # within AGREE_LIMIT: no third timing

    rep = NullReporter()
    out = retime_by_thread_law([eleven, thirteen], remeasure, rep, "cpu_moe")
    assert asked == [(11, 16)]
    assert out[1] is thirteen and out[0].points[1] is eleven.points[1]
    kept = out[0].points[0]
    assert kept.t_ms == 27.5 and [t["ms"] for t in kept.extra["timings"]] == [30.0, 25.0]
    assert "cpu_moe BF16 11t: 1 point(s) slower than a larger pool allows" in rep.notes[0]
    # a measurement within the law is returned as it was, nothing timed
    assert (
        retime_by_thread_law([_moe_curve(11, {16: 23.0}), thirteen], remeasure, rep, "cpu_moe")[0].points[0].t_ms
        == 23.0
    )
    assert asked == [(11, 16)]


def test_a_point_timed_again_twice_keeps_every_timing_in_order():
    """A point the first pass timed twice and the thread law sends back keeps the first pass's record
    ahead of the new timing, so `disturbed` reads all of them."""
    first = Point(x=16, t_ms=30.0, t_ms_p10=30.0, t_ms_p90=30.0, n=5)
    (kept,) = retime([first], lambda p: replace(p, t_ms=28.0, t_ms_p10=28.0, t_ms_p90=28.0), NullReporter(), "t")
    assert [t["ms"] for t in kept.extra["timings"]] == [30.0, 28.0]
    eleven = Curve(kind="cpu_moe", x_unit="tokens", points=(kept,), params={"method": "BF16", "threads": 11})
    thirteen = Curve(
        kind="cpu_moe", x_unit="tokens", points=(Point(x=16, t_ms=20.0),), params={"method": "BF16", "threads": 13}
    )
    out = retime_by_thread_law(
        [eleven, thirteen],
        lambda c, p: replace(p, t_ms=24.0, t_ms_p10=24.0, t_ms_p90=24.0, extra={}),
        NullReporter(),
        "cpu_moe",
    )
    assert [t["ms"] for t in out[0].points[0].extra["timings"]] == [30.0, 28.0, 24.0]
    assert out[0].points[0].t_ms == 28.0  # the median of all three, not of the two tries
