"""Whether a measured point can be trusted: its spread and, where the probe timed it more than once,
whether its timings agree (docs/probe.md#disturbed-points). The probes time by these rules
(`kttune.probes.common.retime`) and the reports mark what they find. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from kttune.hw.profile import Curve, Point

# A point whose 90th percentile is more than this multiple of its 10th was disturbed while it was
# timed (its samples come back to back, in well under a second): on the H200 box 3-6 of a quick
# probe's 68 kt-kernel MoE points on quiet instances, 16 on one busy instance, where kt-kernel's RAWINT4 call at
# 1-16 tokens read 2-3x the other instances' and predicted Kimi-K2's hybrid layer 107% slow
# (docs/probe.md#disturbed-points).
SCATTER_LIMIT = 2.0
# Two timings of one point whose medians differ by more than this were not both quiet (one process,
# seconds apart: on the development VM a quiet host's probes a minute apart agree within 5%).
AGREE_LIMIT = 1.3


def scatter(p: Point) -> float:
    """p90 / p10 of a point's samples (1.0 where it has no spread)."""
    return p.t_ms_p90 / p.t_ms_p10 if p.t_ms_p10 and p.t_ms_p90 else 1.0


def disturbed(p: Point) -> bool:
    """Whether a point still reads as disturbed: scattered beyond `SCATTER_LIMIT`, or its two fastest
    timings (`extra["timings"]`, where it was timed more than once) more than `AGREE_LIMIT` apart."""
    if scatter(p) > SCATTER_LIMIT:
        return True
    ms = sorted(t["ms"] for t in p.extra.get("timings", ()))
    return len(ms) >= 2 and ms[1] > AGREE_LIMIT * ms[0]


# What a probe's repeat timing (`kttune.probes.common.retime`) records in a point's extra: every
# timing in order, and the error of a repeat that failed. Bookkeeping of that one measurement: a
# point made from others (a median of probes, a thread count read between two) leaves it out.
RETIME_KEYS = ("timings", "retime_error")
# Each probe's timing of a point, its repeat timings (RETIME_KEYS) with it, kept under this key of a
# merged point's extra (`kttune probe --repeat`, `kttune profile merge`: kttune.hw.probe_median).
PROBES_KEY = "probes"


# A layerwise pipeline streams its bytes from host memory far past any last-level cache (300 MiB on
# the Xeon boxes), so a larger point costs no more per byte than a smaller one (its fixed costs
# amortised over more bytes). Points from this size on are held to that.
STREAM_PAST_CACHE_BYTES = 512 * 2**20


def slow_per_byte(curve: Curve) -> list[Point]:
    """The points of a layerwise pipeline curve that took more than `AGREE_LIMIT` times the time
    per byte of a smaller point of the same curve (both past `STREAM_PAST_CACHE_BYTES`): a host whose
    memory bandwidth dropped while they were timed, which their own spread does not show (the points
    come back tight and slow). On every pipeline curve the project has measured, 5 of 257 pairs of
    sizes: the busy H200 instance's, the probe beside four memory neighbours, one H100 quick probe
    whose 2.1 GB RAWINT4 point read 116 ms where the same instance's next probe read 56
    (docs/probe.md#disturbed-points); [] for any other kind of curve."""
    if curve.kind != "pipeline":
        return []
    pts = sorted((p for p in curve.points if p.x >= STREAM_PAST_CACHE_BYTES and p.t_ms > 0), key=lambda p: p.x)
    out = []
    for i, p in enumerate(pts):
        if any(p.t_ms / p.x > AGREE_LIMIT * q.t_ms / q.x for q in pts[:i]):
            out.append(p)
    return out


def slower_than_a_larger_write(curve: Curve) -> list[Point]:
    """The points of a stage A curve (kt-kernel writing experts into a pinned slot) that took more
    than `AGREE_LIMIT` times a larger write of the same curve: a write of fewer bytes does no less
    work. Over every stage A write the project has measured (2,305), 7, each a write of 0.1-1.2 ms
    read at 3.0-8.0 ms (six of them at 4.0 or 8.0 ms, whole scheduler ticks: the writer descheduled),
    among them H100 instance i's late quick probe's BF16 write of 3.1 MB at 11 threads (8.0 ms beside
    0.30 ms for 9.4 MB), which left the instance's merged probes a line with no cost per byte
    (docs/probe.md#disturbed-points).
    [] for any other kind of curve."""
    if curve.kind != "stage_a_write":
        return []
    pts = [p for p in curve.points if p.t_ms > 0]
    return [p for p in pts if any(q.x > p.x and p.t_ms > AGREE_LIMIT * q.t_ms for q in pts)]


def beyond_serial(layer_ms: float, stages_ms: Sequence[float]) -> bool:
    """Whether a pipelined layer took more than `AGREE_LIMIT` times its stages run one after another
    (each stage alone, summed over the layer). The pipeline overlaps its stages, so a layer slower
    than doing them in turn waited on something outside them: a host that stalled while the loop ran
    (on every pipeline point the project has measured, 1,837, the layer took a median 0.65 of its
    stages' sum, 1.14 at the 99th percentile)."""
    serial = sum(stages_ms)
    return serial > 0 and layer_ms > AGREE_LIMIT * serial


def slower_than_serial(curve: Curve) -> list[Point]:
    """The points of a layerwise pipeline curve slower than their own stages run in turn
    (`beyond_serial`, the stages each point's extra records alone): on H100 instance am (2026-12-07)
    the late quick probe's narrow BF16 layer took 110 ms at 11 threads, 1.9x its 43 ms write and 16 ms
    copy summed, where the instance's first probe read the same layer at 39 ms; read off that point,
    Mixtral-8x7B's layer was 2 ms (docs/probe.md#disturbed-points). [] for any other kind of curve."""
    if curve.kind != "pipeline":
        return []
    return [
        p
        for p in curve.points
        if p.extra.get("stage_a_ms")
        and p.extra.get("stage_b_ms")
        and p.t_ms > 0
        and beyond_serial(p.t_ms, (p.extra["stage_a_ms"], p.extra["stage_b_ms"], p.extra.get("stage_c_ms") or 0.0))
    ]


def _named_by_laws(curve: Curve) -> set[int]:
    """The ids of a curve's points that a law over its other points or its own stages names (each law
    returns [] for the kinds it does not hold): the one list `disturbed_points` and `off_per_byte` read."""
    return {id(p) for p in (*slow_per_byte(curve), *slower_than_serial(curve), *slower_than_a_larger_write(curve))}


def off_per_byte(curve: Curve) -> list[Point]:
    """The points of a layerwise pipeline curve worth timing again by the curve's other points or
    their own stages: those `slow_per_byte` or `slower_than_serial` names, and a smaller point that
    took more than `AGREE_LIMIT` times the time per byte of a larger one. The second is not marked disturbed: a fixed cost does make a smaller layer
    dearer per byte (at 15 threads on the H200 box, where the stream driver's callback thread starves,
    1.6-1.7x); but a half layer timed inside a busy moment reads the same way and tilts the curve that
    extrapolates the whole layer (an H100 quick probe of 2026-12-05: DeepSeek-V3's 1.06 GB FP8 half
    layer 46 ms, p10-p90 32-55, beside 48 ms for 2.1 GB, so the 10.9 GB layer read 71% fast). Timed
    again, such a point keeps its fastest timing, so a real fixed cost stays. The second check holds
    a smaller point of any size: a cache can make a small layer cheaper per byte, never dearer. Until
    2026-12-06 it held only points past `STREAM_PAST_CACHE_BYTES`, and so never timed again the quick
    probe's narrow BF16 half layer (384 MiB): on H100 instance r it read 27.7 ms (p10-p90 24.8-33.7)
    beside 38.3 ms for 768 MiB, and the same instance's next probe 15.8, and that one point put
    GLM-4.5-Air's streamed layer at 84 ms where the runner took 140 (the layerwise path 36% fast,
    Mixtral-8x7B's 30%; 2% and 3% with the next probe's reading; docs/probe.md#disturbed-points).
    Over every pipeline curve the project has measured (535), 32 points, 24 before; [] for any other
    kind of curve."""
    if curve.kind != "pipeline":
        return []
    pts = sorted((p for p in curve.points if p.t_ms > 0), key=lambda p: p.x)
    slow = _named_by_laws(curve)
    return [p for p in pts if id(p) in slow or any(p.t_ms / p.x > AGREE_LIMIT * q.t_ms / q.x for q in pts if q.x > p.x)]


# kt-kernel's pool splits one call's work among its workers, so fewer workers take at most a larger
# pool's time x the ratio of the counts (the same work, fewer hands), bar the call's granularity. A
# point slower than that by more than this was timed in a slow moment: a probe measures its thread
# counts one after the other, so a host slow for a minute slows a whole count's curve evenly, which
# neither its points' spread nor the curve's shape shows. On the 28 instances probed two or more
# times in one device call, the kt-kernel MoE points this names (86 of 4,728) read a median 10% slower
# than the same point in the instance's other probes, the rest 0%; stage A writes 11% (60 of 1,056)
# against -1%; the pipeline's layers (`pipeline_slower_than_larger_pools`) 44% (21 of 1,168) against 0%
# (`benchmarks/bench_thread_law.py`, docs/probe.md#disturbed-points).
THREAD_LAW_SLACK = 1.10


def pool_allows(larger_ms: float, larger_threads: int, threads: int) -> float:
    """The most a call on `threads` workers may take by the thread law, given the same call's
    `larger_ms` on `larger_threads` (more) workers."""
    return THREAD_LAW_SLACK * larger_ms * larger_threads / threads


def slower_than_larger_pools(curves: Sequence[Curve]) -> dict[int, list[Point]]:
    """`curves`: one measurement at several thread counts (the same kind and params but `threads`,
    as `kttune.hw.thread_interp.curve_group` groups them). Per thread count, its points that took more
    than `THREAD_LAW_SLACK` x a larger count's time at the same size x the ratio of the counts: worth
    timing again. Not marked disturbed: the law bends at a call of few tasks (one more round of the
    pool's work), and a repeat timing keeps the median of its timings, so a real cost stays. Counts without such a
    point are left out."""
    by_threads = {int(c.params["threads"]): c for c in curves if int(c.params.get("threads") or 0) > 0}
    out: dict[int, list[Point]] = {}
    for th, c in sorted(by_threads.items()):
        larger = [({q.x: q.t_ms for q in d.points}, hi) for hi, d in by_threads.items() if hi > th]
        slow = [
            p
            for p in c.points
            if p.t_ms > 0 and any(t.get(p.x, 0) > 0 and p.t_ms > pool_allows(t[p.x], hi, th) for t, hi in larger)
        ]
        if slow:
            out[th] = slow
    return out


def pipeline_slower_than_larger_pools(curves: Sequence[Curve]) -> set[int]:
    """The ids of the layerwise pipeline points among one probe's `curves` that the thread law names
    (`slower_than_larger_pools`, per measurement: the same shape, method and configuration at several
    stage A thread counts). Of the pipeline's stages only stage A's writers depend on the count (the
    copy and the repack do not), so a layer streamed by fewer writers takes at most the larger pool's
    layer x the ratio of the counts, looser than a kt-kernel call's own bound. Over every measured
    profile's pipeline points below a larger count (922) it names 29; on the 28 instances probed two
    or more times in one device call, the 21 of those with a sibling read a median 1.44x the same point
    in the instance's other probes (19 over 1.1x), the rest 1.00x (benchmarks/bench_thread_law.py).
    Among them H100 instance aq's second quick probe (2026-12-07): its Qwen3-30B-A3B layer at 11
    threads took 29.5 and 70.8 ms (half and whole) where the same probe's 13 threads took 21.0 and
    44.2, and the instance's other probes 20.0-20.7 and 39.2-44.2 at 11; read off it, every BF16
    layerwise path was 46-69% slow (docs/probe.md#disturbed-points)."""
    from kttune.hw.thread_interp import thread_groups  # thread_interp reads this module's marks

    groups = thread_groups(c for c in curves if c.kind == "pipeline" and int(c.params.get("threads") or 0) > 0)
    return {id(p) for cs in groups.values() for pts in slower_than_larger_pools(cs).values() for p in pts}


def disturbed_points(curve: Curve) -> list[Point]:
    """A curve's points that read as disturbed: by their own timings (`disturbed`) or, on a layerwise
    pipeline curve, by the curve's other points (`slow_per_byte`) or by their own stages
    (`slower_than_serial`); on a stage A curve, by a larger write (`slower_than_a_larger_write`)."""
    slow = _named_by_laws(curve)
    return [p for p in curve.points if disturbed(p) or id(p) in slow]


# A probe that names more than this share of all its points (`named_share` over every curve; of every
# probe's readings, for probes merged) ran on a busy machine, one whose neighbours (other jobs, other guests of the host) took memory
# bandwidth or cores throughout rather than for a moment. Over the 40 quick probes of 21 GPU-box
# calls, the 7 that named more than 5% read the path runner's forwards 20% off on average (mean per
# model and path), the other 33 11%; the share ranks a probe's error at Spearman +0.55, and on those
# instances the runner's own repeats scattered more too (benchmarks/bench_instance_noise.py,
# docs/probe.md#a-busy-machine). 5% is a round cut chosen on those same probes, and the split holds
# either side of it: at 3% 17% / 11%, at 6% 19% / 12%. Held out on the models' own probes of those
# calls it missed the busy instance's two (4 of 111-114 readings named, 20% and 43% off).
BUSY_SHARE = 0.05


def named_share(curves: Sequence[Curve]) -> tuple[int, int]:
    """(readings the probe's own checks name, readings) over `curves`: a point of one probe is one
    reading (`disturbed_points`); a point merged from several probes (`PROBES_KEY`) is each probe's
    reading, judged by its own timings (`disturbed`), so probes merged from a busy machine still read
    busy (H200 instance f's three: 36 of 498) where their median's span alone would not."""
    named = total = 0
    for c in curves:
        whole = {id(p) for p in disturbed_points(c)}
        for p in c.points:
            readings = p.extra.get(PROBES_KEY)
            if readings:
                total += len(readings)
                named += sum(disturbed(_reading(p.x, q)) for q in readings)
            else:
                total += 1
                named += id(p) in whole
    return named, total


def _reading(x: float, q: dict) -> Point:
    """One probe's reading of a merged point, as that probe's point."""
    return Point(
        x=x, t_ms=q["ms"], t_ms_p10=q.get("p10"), t_ms_p90=q.get("p90"), extra={k: q[k] for k in RETIME_KEYS if k in q}
    )


def busy_counts(curves: Sequence[Curve]) -> tuple[int, int] | None:
    """(named, readings) (`named_share`) where a probe's curves say the machine was busy while it ran
    (more than `BUSY_SHARE` named), else None: what the notes that say so count."""
    named, total = named_share(curves)
    return (named, total) if total > 0 and named > BUSY_SHARE * total else None


def busy(curves: Sequence[Curve]) -> bool:
    """Whether a probe's curves say the machine was busy while it ran (`BUSY_SHARE`)."""
    return busy_counts(curves) is not None
