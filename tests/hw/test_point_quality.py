"""Whether a point can be trusted (kttune.hw.point_quality): its spread, and whether its timings agree."""

from __future__ import annotations

from pathlib import Path

from kttune.hw.point_quality import (
    AGREE_LIMIT,
    SCATTER_LIMIT,
    STREAM_PAST_CACHE_BYTES,
    disturbed,
    disturbed_points,
    off_per_byte,
    scatter,
    slow_per_byte,
)
from kttune.hw.profile import Curve, Point, load_profile


def _pt(ms, p10, p90, timings=None):
    extra = {"timings": [{"ms": t} for t in timings]} if timings else {}
    return Point(x=4, t_ms=ms, t_ms_p10=p10, t_ms_p90=p90, n=5, extra=extra)


def test_a_point_is_disturbed_when_scattered_or_timed_apart():
    assert scatter(_pt(1.0, 0.5, 1.5)) == 3.0 and scatter(Point(x=1, t_ms=1.0)) == 1.0
    assert disturbed(_pt(1.0, 0.5, 0.5 * SCATTER_LIMIT + 0.01))
    assert not disturbed(_pt(1.0, 0.9, 1.1))
    # timed three times: the two fastest decide, a slow first timing does not
    assert not disturbed(_pt(1.0, 0.9, 1.1, [3.0, 1.0, 1.05]))
    assert disturbed(_pt(1.0, 0.9, 1.1, [1.0, AGREE_LIMIT * 1.0 + 0.05]))


RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
H100B = str(RESULTS / "2026-12-05-h100-pcie5-xeon-amx-16c" / "quick-transfer-h100b{}.profile.json")


def _rawint4_pipeline(tag: str, threads: int) -> Curve:
    prof = load_profile(H100B.format(tag))
    (c,) = [c for c in prof.curves if c.kind == "pipeline" and c.matches(method="RAWINT4", threads=threads)]
    return c


def test_a_streamed_layer_slower_per_byte_than_a_smaller_one_is_disturbed():
    """Three quick probes of one H100 instance in four minutes: the first timed the 2.1 GB RAWINT4
    layer at 11 threads in 116 ms (p10-p90 93-118: tight) after 32 ms for 1.07 GB, 1.8x the time per
    byte; the next two read 56 and 82 ms, in proportion. The check flags that point alone, and on
    no other curve of those probes."""
    first = _rawint4_pipeline("", 11)
    assert [p.x for p in slow_per_byte(first)] == [max(first.xs)]
    assert not any(disturbed(p) for p in first.points)  # its own timings do not show it
    assert disturbed_points(first) == slow_per_byte(first)
    for tag in ("-again", "-late"):
        assert slow_per_byte(_rawint4_pipeline(tag, 11)) == []
    for tag in ("", "-again", "-late"):
        prof = load_profile(H100B.format(tag))
        flagged = [c for c in prof.curves if slow_per_byte(c)]
        assert flagged == ([first] if tag == "" else [])


def test_the_per_byte_check_holds_streamed_sizes_alone_and_pipeline_curves_alone():
    def curve(kind, *pts):
        return Curve(kind=kind, x_unit="bytes", points=tuple(Point(x=x, t_ms=t) for x, t in pts))

    gib = 2**30
    # a fixed cost amortised: less per byte at the larger size, never flagged
    assert slow_per_byte(curve("pipeline", (gib, 30.0), (2 * gib, 50.0), (4 * gib, 95.0))) == []
    # below the floor, a cache-resident small point may be cheaper per byte: not held to it
    small = STREAM_PAST_CACHE_BYTES // 4
    assert slow_per_byte(curve("pipeline", (small, 1.0), (gib, 60.0))) == []
    # the same numbers on another kind of curve: not this check's business
    assert slow_per_byte(curve("h2d", (gib, 30.0), (2 * gib, 116.0))) == []
    bad = curve("pipeline", (gib, 30.0), (2 * gib, 30.0 * 2 * AGREE_LIMIT + 1))
    assert [p.x for p in slow_per_byte(bad)] == [2 * gib]


def test_a_smaller_layer_dearer_per_byte_than_a_larger_is_timed_again_but_not_marked():
    """An H100 quick probe (h100h, 2026-12-05) timed DeepSeek-V3's 1.06 GB FP8 half layer at 11
    threads in 46 ms (p10-p90 32-55: not beyond 2x) beside 48 ms for the 2.1 GB one, so the line the
    10.9 GB layer is read from came out flat. `off_per_byte` names that point for a second timing;
    `slow_per_byte` (a larger layer dearer per byte) does not, nor is it marked disturbed (a fixed cost
    can do the same), and the instance's late probe, in proportion, has no such point."""
    h100h = str(RESULTS / "2026-12-05-h100-pcie5-xeon-amx-16c" / "quick-transfer-h100h{}.profile.json")

    def fp8(tag):
        prof = load_profile(h100h.format(tag))
        (c,) = [c for c in prof.curves if c.kind == "pipeline" and c.matches(method="FP8", threads=11)]
        return c

    first = fp8("")
    assert [p.x for p in off_per_byte(first)] == [min(first.xs)]
    assert slow_per_byte(first) == [] and disturbed_points(first) == []
    assert off_per_byte(fp8("-late")) == []
    # both ways on made-up points; a fixed cost amortised within 1.3x is left alone
    gib = 2**30

    def curve(*pts):
        return Curve(kind="pipeline", x_unit="bytes", points=tuple(Point(x=x, t_ms=t) for x, t in pts))

    assert off_per_byte(curve((gib, 30.0), (2 * gib, 50.0), (4 * gib, 95.0))) == []
    assert [p.x for p in off_per_byte(curve((gib, 40.0), (2 * gib, 50.0)))] == [gib]  # 1.6x per byte
    assert [p.x for p in off_per_byte(curve((gib, 20.0), (2 * gib, 60.0)))] == [2 * gib]  # slow_per_byte's
    assert off_per_byte(Curve(kind="h2d", x_unit="bytes", points=curve((gib, 40.0), (2 * gib, 50.0)).points)) == []
