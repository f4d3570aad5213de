"""Whether a point can be trusted (kttune.hw.point_quality): its spread, and whether its timings agree."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kttune.hw.point_quality import (
    AGREE_LIMIT,
    BUSY_SHARE,
    SCATTER_LIMIT,
    STREAM_PAST_CACHE_BYTES,
    THREAD_LAW_SLACK,
    busy,
    disturbed,
    disturbed_points,
    named_share,
    off_per_byte,
    pipeline_slower_than_larger_pools,
    pool_allows,
    scatter,
    slow_per_byte,
    slower_than_a_larger_write,
    slower_than_larger_pools,
    slower_than_serial,
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


def _curve(*pts, kind: str = "pipeline") -> Curve:
    """A curve of (bytes, ms) points, made up."""
    return Curve(kind=kind, x_unit="bytes", points=tuple(Point(x=x, t_ms=t) for x, t in pts))


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
    gib = 2**30
    # a fixed cost amortised: less per byte at the larger size, never flagged
    assert slow_per_byte(_curve((gib, 30.0), (2 * gib, 50.0), (4 * gib, 95.0))) == []
    # below the floor, a cache-resident small point may be cheaper per byte: not held to it
    small = STREAM_PAST_CACHE_BYTES // 4
    assert slow_per_byte(_curve((small, 1.0), (gib, 60.0))) == []
    # the same numbers on another kind of curve: not this check's business
    assert slow_per_byte(_curve((gib, 30.0), (2 * gib, 116.0), kind="h2d")) == []
    bad = _curve((gib, 30.0), (2 * gib, 30.0 * 2 * AGREE_LIMIT + 1))
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

    assert off_per_byte(_curve((gib, 30.0), (2 * gib, 50.0), (4 * gib, 95.0))) == []
    assert [p.x for p in off_per_byte(_curve((gib, 40.0), (2 * gib, 50.0)))] == [gib]  # 1.6x per byte
    assert [p.x for p in off_per_byte(_curve((gib, 20.0), (2 * gib, 60.0)))] == [2 * gib]  # slow_per_byte's
    assert off_per_byte(_curve((gib, 40.0), (2 * gib, 50.0), kind="h2d")) == []


def test_a_half_layer_below_the_streaming_floor_dearer_per_byte_is_timed_again():
    """H100 instance r's first quick probe (2026-12-06) timed the narrow BF16 half layer (384 MiB,
    below `STREAM_PAST_CACHE_BYTES`) at 11 threads in 27.7 ms beside 38.3 ms for 768 MiB, 1.45x the
    time per byte; its second probe, after the runner's sweeps, read 15.8 and 35.2. The check names
    the first probe's half layer alone and nothing in the second; a cache can only make a small layer
    cheaper per byte, so a small point cheaper per byte than a large one is still left alone."""
    folder = RESULTS / "2026-12-06-h100-pcie5-xeon-amx-16c"

    def narrow(tag):
        prof = load_profile(folder / f"quick-transfer-h100r{tag}.profile.json")
        (c,) = [
            c
            for c in prof.curves
            if c.kind == "pipeline" and c.matches(method="BF16", threads=11, model="narrow-2048x256")
        ]
        return c

    first = narrow("")
    assert min(first.xs) < STREAM_PAST_CACHE_BYTES
    assert [p.x for p in off_per_byte(first)] == [min(first.xs)]
    assert slow_per_byte(first) == [] and disturbed_points(first) == []
    assert off_per_byte(narrow("-late")) == []
    mib = 2**20

    assert off_per_byte(_curve((64 * mib, 1.0), (2**30, 60.0))) == []  # cheaper per byte: not the probe's
    assert [p.x for p in off_per_byte(_curve((64 * mib, 6.0), (2**30, 60.0)))] == [64 * mib]


def _moe(threads: int, ms: dict[int, float]) -> Curve:
    return Curve(
        kind="cpu_moe",
        x_unit="tokens",
        points=tuple(Point(x=x, t_ms=t) for x, t in ms.items()),
        params={"method": "BF16", "threads": threads, "hidden": 1024, "inter": 512, "experts": 32, "top_k": 8},
    )


def test_a_point_slower_than_a_larger_pool_allows_is_named_at_its_count_alone():
    # perfect scaling (the same work split over more workers) names nothing
    sizes = {1: 2.0, 64: 20.0, 256: 60.0}
    even = [_moe(th, {x: t * 13 / th for x, t in sizes.items()}) for th in (11, 13, 15)]
    assert slower_than_larger_pools(even) == {}
    # the 11-thread count timed in a slow moment at 64 tokens: that point, at that count, alone
    slow = {p.x: p.t_ms for p in even[0].points}
    slow[64] *= THREAD_LAW_SLACK * 1.05
    named = slower_than_larger_pools([_moe(11, slow), even[1], even[2]])
    assert {th: [p.x for p in pts] for th, pts in named.items()} == {11: [64]}
    # within the slack it stands; a slow larger pool names nothing below it (the bound comes from the
    # larger count: a point there can read slow, never fast)
    slow[64] = even[0].points[1].t_ms * THREAD_LAW_SLACK * 0.99
    assert slower_than_larger_pools([_moe(11, slow), even[1], even[2]]) == {}
    slower_top = _moe(15, {x: 3 * p.t_ms for x, p in zip(sizes, even[2].points)})
    assert slower_than_larger_pools([even[0], even[1], slower_top]) == {}
    # sizes only pair with the same size
    assert slower_than_larger_pools([_moe(11, {32: 100.0}), _moe(13, {64: 1.0})]) == {}


@given(
    st.lists(st.floats(0.01, 1e4, allow_subnormal=False), min_size=1, max_size=6),
    st.lists(st.integers(1, 128), min_size=2, max_size=4, unique=True),
    st.floats(0.0, 0.999, allow_subnormal=False),
)
def test_a_measurement_within_the_law_is_never_named(work, counts, share):
    """t(T) = serial + parallel / T, any serial share: fewer workers never take more than a larger
    pool's time x the ratio of the counts, so nothing is named."""
    curves = [_moe(th, {2**i: w * (share + (1 - share) / th) for i, w in enumerate(work)}) for th in sorted(counts)]
    assert slower_than_larger_pools(curves) == {}


def test_the_shipped_profiles_fp8_per_channel_11_thread_curve_breaks_the_law():
    """The shipped H200 profile's GLM-4.7 FP8_PERCHANNEL curves: the 11-thread count ran 1.2-1.4x its
    13-thread time at 1-128 tokens (13/11 = 1.18 allows 1.3 with the slack), the count the path runner
    at 11 threads read 13-46% faster than it on another instance (docs/probe.md#disturbed-points)."""
    prof = load_profile(str(Path(__file__).resolve().parents[2] / "profiles" / "h200-pcie5-xeon-amx-16c.json"))
    curves = [c for c in prof.curves_of("cpu_moe") if c.params.get("method") == "FP8_PERCHANNEL"]
    named = slower_than_larger_pools(curves)
    assert [p.x for p in named[11]] == [1, 2, 4, 8, 16, 32, 64, 128]
    assert 15 not in named


H200F = RESULTS / "2026-12-06-h200-pcie5-xeon-amx-16c"
H100T = RESULTS / "2026-12-06-h100-pcie5-xeon-amx-16c"


def test_a_probe_of_a_busy_instance_says_the_machine_was_busy():
    """H200 instance f, 2026-12-06: its runner's repeats scattered 8.8% (median) where the other
    instances' scattered 0.6-7.7%, and its three quick probes named 9-15 of their 166 points, read
    every path 5-93% off. H100 instance t, the same day, a quiet one: its probes named 0 and 1."""
    for tag in ("h200f", "h200f-again", "h200f-late"):
        curves = load_profile(H200F / f"quick-transfer-{tag}.profile.json").curves
        named, total = named_share(curves)
        assert total == 166 and named > BUSY_SHARE * total and busy(curves)
    for tag in ("h100t", "h100t-late"):
        curves = load_profile(H100T / f"quick-transfer-{tag}.profile.json").curves
        assert named_share(curves)[0] <= 1 and not busy(curves)


@given(st.lists(st.floats(1.0, 1.9), min_size=1, max_size=40), st.integers(0, 40))
def test_more_disturbed_points_never_make_a_probe_less_busy(spreads, extra):
    """Monotone: marking more of a probe's points scattered never turns the busy verdict off."""
    quiet = [Point(x=i + 1, t_ms=1.0, t_ms_p10=1.0, t_ms_p90=s) for i, s in enumerate(spreads)]
    loud = [Point(x=len(quiet) + i + 1, t_ms=1.0, t_ms_p10=1.0, t_ms_p90=3.0) for i in range(extra)]
    before = Curve(kind="cpu_moe", x_unit="tokens", points=tuple(quiet))
    after = Curve(kind="cpu_moe", x_unit="tokens", points=tuple(quiet + loud))
    assert named_share([before]) == (0, len(quiet))
    assert named_share([after]) == (extra, len(quiet) + extra)
    assert busy([after]) == (extra > BUSY_SHARE * (len(quiet) + extra))
    assert not busy([before])


def test_probes_merged_on_a_busy_machine_still_read_busy():
    """The median of f's three probes spans the probes' readings, which hides their own scatter; each
    probe's reading is kept in the merged point and judged by its own timings: 36 of 498 named, busy.
    t's two merged: 1 of 332."""
    computed = RESULTS / "2026-12-06-computed"
    f = load_profile(computed / "h200f-merged.profile.json").curves
    assert named_share(f) == (36, 498) and busy(f)
    t = load_profile(computed / "h100t-merged.profile.json").curves
    assert named_share(t) == (1, 332) and not busy(t)


def _loop(layer_ms: float, a: float, b: float, c: float = 0.0, x: float = 2**30) -> Point:
    return Point(x=x, t_ms=layer_ms, extra={"stage_a_ms": a, "stage_b_ms": b, "stage_c_ms": c})


def test_a_loop_slower_than_its_stages_in_turn_is_disturbed():
    """A pipeline overlaps its stages, so its layer takes no longer than the stages one after another;
    past `AGREE_LIMIT` times their sum it waited on something else."""
    calm, stalled = _loop(30.0, 25.0, 15.0), _loop(AGREE_LIMIT * 40.0 + 1.0, 25.0, 15.0)
    curve = Curve("pipeline", "bytes", (calm, stalled))
    assert slower_than_serial(curve) == [stalled]
    assert stalled in disturbed_points(curve) and stalled in off_per_byte(curve)
    assert calm not in disturbed_points(curve)
    assert slower_than_serial(Curve("pipeline", "bytes", (_loop(50.0, 20.0, 10.0, 10.0),))) == []  # stage C counts
    assert slower_than_serial(Curve("pipeline", "bytes", (Point(x=2**30, t_ms=500.0),))) == []  # no stages: no law
    assert slower_than_serial(Curve("cpu_moe", "tokens", (stalled,))) == []


def test_the_busy_instances_loops_are_named_and_a_quiet_ones_are_not():
    """Measured: H100 instance am's late quick probe (2026-12-07; its host loop over the narrow BF16
    layer took 110 and 75 ms at 11 and 13 threads, where the instance's first probe read 39) against
    the quiet instance al's two probes of the same hour, whose loops took 0.4-0.9x their stages' sum."""
    folder = Path(__file__).resolve().parents[2] / "benchmarks/results/2026-12-07-h100-pcie5-xeon-amx-16c"
    busy_probe = load_profile(folder / "quick-transfer-h100am-late.profile.json")
    named = [(c.params.get("model"), c.params.get("threads")) for c in busy_probe.curves for _ in slower_than_serial(c)]
    assert ("narrow-2048x256", 11) in named and ("narrow-2048x256", 13) in named
    for s in ("", "-late"):
        quiet = load_profile(folder / f"quick-transfer-h100al{s}.profile.json")
        assert not [p for c in quiet.curves for p in slower_than_serial(c)]


def test_a_write_slower_than_a_larger_one_is_disturbed():
    """A stage A write of fewer bytes does no less work: past `AGREE_LIMIT` times a larger write's time
    it was descheduled. Measured: H100 instance i's late quick probe's BF16 write of 3.1 MB at 11
    threads, 8.0 ms beside 0.30 ms for 9.4 MB; its 13-thread curve (0.10 and 0.25 ms) is not named."""
    small, large = Point(x=3e6, t_ms=AGREE_LIMIT * 1.0 + 0.01), Point(x=9e6, t_ms=1.0)
    curve = Curve("stage_a_write", "bytes", (small, large))
    assert slower_than_a_larger_write(curve) == [small] and disturbed_points(curve) == [small]
    assert slower_than_a_larger_write(Curve("stage_a_write", "bytes", (Point(x=3e6, t_ms=1.2), large))) == []
    assert slower_than_a_larger_write(Curve("cpu_moe", "tokens", (small, large))) == []
    folder = Path(__file__).resolve().parents[2] / "benchmarks/results/2026-12-05-h100-pcie5-xeon-amx-16c"
    late = load_profile(folder / "quick-transfer-h100i-late.profile.json")
    by_threads = {
        c.params["threads"]: [round(p.x) for p in slower_than_a_larger_write(c)]
        for c in late.curves_of("stage_a_write", method="BF16")
    }
    assert by_threads == {11: [3145728], 13: []}


def _layers(threads: int, *ms: float, method: str = "BF16") -> Curve:
    params = {"method": method, "experts": 128, "threads": threads, "hidden": 2048, "inter": 768}
    return Curve("pipeline", "bytes", tuple(Point(x=2**29 * (i + 1), t_ms=t) for i, t in enumerate(ms)), params=params)


def test_a_layer_streamed_by_fewer_writers_than_a_larger_pool_allows_is_named():
    """Only stage A depends on the writer count, so the thread law holds a pipeline layer at fewer
    writers to a larger count's layer x the ratio of the counts (x its slack); per measurement (the
    same method, shape and experts), never across two."""
    at13 = _layers(13, 20.0, 40.0)
    limit = pool_allows(40.0, 13, 11)
    assert limit == pytest.approx(THREAD_LAW_SLACK * 40.0 * 13 / 11)
    calm, slow = _layers(11, 20.0, limit - 0.1), _layers(11, 20.0, limit + 0.1)
    assert pipeline_slower_than_larger_pools([at13, calm]) == set()
    assert pipeline_slower_than_larger_pools([at13, slow]) == {id(slow.points[1])}
    # the larger count is never named by a smaller one, another method is another measurement, and a
    # curve of another kind or without a thread count (torch's writer) is no pipeline pool
    assert pipeline_slower_than_larger_pools([_layers(13, 20.0, 90.0), _layers(11, 20.0, 40.0)]) == set()
    assert pipeline_slower_than_larger_pools([at13, _layers(11, 20.0, 90.0, method="FP8")]) == set()
    other = Curve("cpu_moe", "tokens", slow.points, params=slow.params)
    torch_writer = Curve("pipeline", "bytes", slow.points, params={**slow.params, "threads": None})
    assert pipeline_slower_than_larger_pools([at13, other, torch_writer]) == set()


def test_the_second_probe_of_instance_aq_is_named_and_its_siblings_are_not():
    """Measured: H100 instance aq (2026-12-07), three quick probes of one call. The second one's
    Qwen3-30B-A3B layer at 11 threads took 29.5 and 70.8 ms (half and whole) beside 21.0 and 44.2 at
    13; the other two probes read 20.0-20.7 and 39.2-44.2 ms at 11. The law names both of the
    second's points and none of the first's; the second's readings are slower than the other probes'
    by more than the law's slack, so what it names was the moment, not the kernel."""
    folder = Path(__file__).resolve().parents[2] / "benchmarks/results/2026-12-07-h100-pcie5-xeon-amx-16c"
    probes = [load_profile(folder / f"quick-transfer-h100aq{s}.profile.json") for s in ("", "-again", "-late")]

    def qwen3_11t(p):
        (c,) = [c for c in p.curves_of("pipeline", method="BF16", threads=11) if c.params["model"] == "Qwen3-30B-A3B"]
        return c

    first, again, late = (qwen3_11t(p) for p in probes)
    assert pipeline_slower_than_larger_pools(probes[0].curves) == set()
    named = pipeline_slower_than_larger_pools(probes[1].curves)
    assert {id(p) for p in again.points} <= named
    for p, q, r in zip(again.points, first.points, late.points):
        assert p.t_ms > THREAD_LAW_SLACK * max(q.t_ms, r.t_ms)
