"""Timing discipline shared by every probe (docs/cost-model.md#measuring-honestly-the-probes): warm-up, repeats, median and spread,
`time.perf_counter`, a check of the timer's resolution, and a reporter for progress.

GPU probes pass `sync=torch.cuda.synchronize` (or time with CUDA events themselves): an async launch
is never timed on its own.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Protocol, Sequence

from kttune.hw.point_quality import (
    AGREE_LIMIT,
    BUSY_SHARE,
    SCATTER_LIMIT,
    busy_counts,
    disturbed,
    disturbed_points,
    scatter,
    slower_than_larger_pools,
)
from kttune.hw.profile import Curve, Point, TimerInfo


def timer_info() -> TimerInfo:
    """Measure perf_counter's resolution (smallest non-zero step seen) and read the clocksource."""
    steps = []
    for _ in range(200):
        t0 = time.perf_counter()
        t1 = time.perf_counter()
        while t1 == t0:
            t1 = time.perf_counter()
        steps.append(t1 - t0)
    src = None
    p = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")
    if p.exists():
        src = p.read_text().strip()
    return TimerInfo(clock="time.perf_counter", resolution_ns=min(steps) * 1e9, clocksource=src)


def quantiles(samples_ms: list[float]) -> tuple[float, float, float]:
    """(p10, median, p90) of a list of timings."""
    s = sorted(samples_ms)
    med = statistics.median(s)
    if len(s) < 3:
        return s[0], med, s[-1]
    q = statistics.quantiles(s, n=10, method="inclusive")
    return q[0], med, q[-1]


def measure(
    fn: Callable[[], object],
    *,
    x: float,
    warmup: int = 2,
    repeats: int = 5,
    sync: Callable[[], object] | None = None,
    min_total_s: float = 0.0,
    max_repeats: int = 50,
    extra: dict | None = None,
) -> Point:
    """Time `fn` after `warmup` calls: at least `repeats` runs, more (up to `max_repeats`) until
    `min_total_s` has passed. `sync` is called before starting and before stopping the clock."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < repeats or (time.perf_counter() - start < min_total_s and len(samples) < max_repeats):
        if sync:
            sync()
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        samples.append((time.perf_counter() - t0) * 1e3)
    return point_from_samples(x, samples, extra)


# A point whose timing took less than this in all (samples x median) can lie wholly inside a moment
# the host was busy, and then comes back tight and slow: every such point is timed twice.
SHORT_POINT_MS = 1000.0


# Which of a point's timings the probe keeps (`retime`'s `keep`). "median": the machine kinds measured
# move both ways over seconds, and the runner and a server see their typical speed, not their best
# (docs/probe.md#which-timing-a-point-keeps: one kt-kernel call in 12 interleaved rounds on an H100
# instance, 44-87 ms at 256 tokens, every way of calling it alike); a third timing, taken where two
# disagree, keeps one busy moment out of the median. "fastest": a curve whose point must stay one
# whole run (the pipeline's, `probes.gpu_pipeline.retimed_runs`).
KEEP_RULES = ("median", "fastest")


def retime(
    points: list[Point],
    remeasure: Callable[[Point], Point],
    reporter: Reporter,
    label: str,
    every: bool = True,
    suspect: Callable[[Point], bool] | None = None,
    keep: str = "median",
) -> list[Point]:
    """`points`, each timed once more by `remeasure` after the curve's other points: a point timed
    wholly inside a moment the host was busy comes back tight and slow, which its spread does not
    show, and one timed in a fast moment tight and fast. Timed again: with `every`, each point whose
    timing was short (`SHORT_POINT_MS`) or scattered beyond `SCATTER_LIMIT`; without, the scattered
    ones only (where a second timing is costly: a stage A write rebuilds its layer); and any point
    `suspect` names (one its curve's other points show to be off: `slow_per_byte`). Where the two
    medians differ by more than `AGREE_LIMIT`, or the faster is still scattered (for the median,
    either), a third timing. The
    point kept is the median of its timings (`keep="median"`: with two, their mean, spread over both)
    or the fastest (`keep="fastest"`), and records every timing in order (`extra["timings"]`: median
    and p90 / p10 each). A repeat timing that fails leaves the timings taken (the failure in
    `extra["retime_error"]`): nothing measured is lost."""
    if keep not in KEEP_RULES:
        raise ValueError(f"keep must be one of {KEEP_RULES}, not {keep!r}")
    out = []
    for p in points:
        short = p.n * p.t_ms < SHORT_POINT_MS
        if scatter(p) <= SCATTER_LIMIT and not (every and short) and not (suspect and suspect(p)):
            out.append(p)
            continue
        tries, error = [p], None
        try:
            tries.append(remeasure(p))
            if disturbed(_kept(tries, "fastest")) or (keep == "median" and max(map(scatter, tries)) > SCATTER_LIMIT):
                # the two disagree, or the faster is still scattered; for the median, either is
                tries.append(remeasure(p))
        except Exception as e:  # noqa: BLE001 - the timings taken stand
            error = f"{type(e).__name__}: {e}"
            reporter.note(f"{label}: {p.x:g} could not be timed again ({error}); the timings taken kept")
        kept = _kept(tries, keep)
        out.append(replace(kept, extra={**kept.extra, "retime_error": error}) if error else kept)
        if len(tries) > 1:
            reporter.step(f"{label}: {p.x:g} timed again ({p.t_ms:.3g} -> {kept.t_ms:.3g} ms)", advance=0)
    return out


def _kept(tries: list[Point], keep: str) -> Point:
    """The point kept of its timings (`retime`), recording every one in order (`extra["timings"]`: a
    try that was itself kept from earlier timings, a point the thread law sends back, brings its
    record). "fastest": the fastest try. "median": the median of every recorded timing; its spread
    (p10-p90) and count are the middle try's, or of two middle tries the tighter one's widened to hold
    the median (the checks of `kttune.hw.point_quality` read a timing's own spread, not the distance
    between two timings, which `disturbed` reads from the record)."""
    record = [t for q in tries for t in q.extra.get("timings") or [{"ms": q.t_ms, "scatter": round(scatter(q), 2)}]]
    ranked = sorted(tries, key=lambda q: q.t_ms)
    if keep == "fastest" or len(tries) == 1:
        return replace(ranked[0], extra={**ranked[0].extra, "timings": record})
    mid = ranked[(len(ranked) - 1) // 2 : len(ranked) // 2 + 1]
    base = min(mid, key=scatter)
    t_ms = statistics.median(t["ms"] for t in record)
    return replace(
        base,
        t_ms=t_ms,
        t_ms_p10=None if base.t_ms_p10 is None else min(base.t_ms_p10, t_ms),
        t_ms_p90=None if base.t_ms_p90 is None else max(base.t_ms_p90, t_ms),
        n=sum(q.n for q in mid),
        extra={**base.extra, "timings": record},
    )


def law_retime(points: list[Point], remeasure: Callable[[Point], Point], reporter: Reporter, label: str) -> list[Point]:
    """`points` that the thread law names, each timed again (`retime`, every one a suspect)."""
    return retime(points, remeasure, reporter, label, every=False, suspect=lambda p: True)


def retime_by_thread_law(
    curves: list[Curve],
    remeasure: Callable[[Curve, Point], Point] | None,
    reporter: Reporter,
    name: str,
    curve_again: Callable[[Curve, list[Point], str], list[Point]] | None = None,
) -> list[Curve]:
    """`curves`, one measurement at several thread counts, with each point slower than a larger
    count allows (`kttune.hw.point_quality.slower_than_larger_pools`) timed again by
    `remeasure(curve, point)` and the median of its timings kept (`kttune.probes.common.retime`; a third
    timing where the two disagree keeps the disturbed one out). A probe times
    its thread counts one after another, so a host slow for a minute slows one count's whole curve,
    which the curve's own spread does not show (docs/probe.md#disturbed-points). `name` labels the
    notes ("cpu_moe", "stage_a"). `curve_again(curve, points, label)`, where given, takes a curve's
    slow points at once and returns them as `law_retime` does (for a curve whose layer is built in a
    process of its own: one build per curve, not per timing)."""
    suspects = slower_than_larger_pools(curves)
    if not suspects:
        return curves
    out = []
    for c in curves:
        slow = {id(p) for p in suspects.get(int(c.params.get("threads") or 0), ())}
        if not slow:
            out.append(c)
            continue
        label = f"{name} {c.params.get('method')} {c.params.get('threads')}t"
        reporter.note(f"{label}: {len(slow)} point(s) slower than a larger pool allows (the thread law); timed again")
        points = [p for p in c.points if id(p) in slow]
        again = iter(
            curve_again(c, points, label)
            if curve_again
            else law_retime(points, lambda p, c=c: remeasure(c, p), reporter, label)
        )
        out.append(replace(c, points=tuple(next(again) if id(p) in slow else p for p in c.points)))
    return out


def disturbed_note(curves: Sequence[Curve], what: str) -> str | None:
    """A note when points of `curves` still read as disturbed (`disturbed`) after the probe's repeat
    timings: the curves may be off by as much."""
    pts = [p for c in curves for p in c.points]
    bad = [p for c in curves for p in disturbed_points(c)]
    if not bad:
        return None
    return (
        f"{what}: {len(bad)} of {len(pts)} points disturbed (scattered more than {SCATTER_LIMIT:g}x between their "
        f"10th and 90th percentiles, or timed again {AGREE_LIMIT:g}x apart, or a streamed layer {AGREE_LIMIT:g}x "
        "slower per byte than a smaller one or than its stages run in turn: a host busy while they were timed, or "
        "a call that varies by itself, as past the thread cliff): those curves may be off by as much; re-run the "
        "probe with --fresh on a quiet machine, or with --repeat 3 to keep each point's median over three probes "
        "(docs/probe.md#disturbed-points)"
    )


def busy_note(curves: Sequence[Curve]) -> str | None:
    """A note when the whole probe names more than `BUSY_SHARE` of its points: the machine was busy
    throughout, so the profile (and the server, while its neighbours run) may be off beyond what one
    curve's note says, and a repeat on the same busy machine does not cure it."""
    counts = busy_counts(curves)
    if counts is None:
        return None
    named, total = counts
    return (
        f"this machine was busy while probed: {named} of {total} points read as disturbed, more than "
        f"{BUSY_SHARE:.0%}; on the GPU boxes such probes read the path runner about twice as far off as the others, "
        "and the runner itself scattered more there. Find what runs beside kttune (another job, another guest of "
        "the host) and probe again when the machine is quiet; --repeat does not cure a machine busy throughout "
        "(docs/probe.md#a-busy-machine)"
    )


def point_from_samples(x: float, samples_ms: list[float], extra: dict | None = None) -> Point:
    """A curve point from repeated timings: the median with its 10th and 90th percentiles."""
    p10, med, p90 = quantiles(samples_ms)
    return Point(x=x, t_ms=med, t_ms_p10=p10, t_ms_p90=p90, n=len(samples_ms), extra=dict(extra or {}))


@dataclass(frozen=True)
class KtPoolTask:
    """One kt-kernel set-up a CPU probe measures: a method's MoE class on `threads` worker threads
    split into `threadpools` sub-pools (one per NUMA node, as `--kt-threadpool-count`). The CPU MoE
    and stage A probes extend it with what they sweep."""

    method: str
    threads: int
    threadpools: int


def detach_child() -> None:
    """In a spawned child of kttune's: Ctrl-C is the parent's to handle (it stops the child), and what
    the child prints natively (kt-kernel's printf) goes to /dev/null."""
    import os
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)


class Reporter(Protocol):
    """What probes report progress to. The CLI passes a rich Progress-backed one; tests pass
    `NullReporter`."""

    def plan(self, total_steps: int, title: str) -> None: ...

    def step(self, description: str, advance: float = 1.0) -> None: ...

    def note(self, message: str) -> None: ...  # e.g. "skipped 8192 tokens: needs 40 GiB RAM, 20 free"


class NullReporter:
    def __init__(self) -> None:
        self.notes: list[str] = []

    def plan(self, total_steps: int, title: str) -> None:
        pass

    def step(self, description: str, advance: float = 1.0) -> None:
        pass

    def note(self, message: str) -> None:
        self.notes.append(message)


def kt_thread_counts(cores: int, quick: bool) -> list[int]:
    """The kt-kernel worker counts (`--kt-cpuinfer`) every probe measures, CPU MoE, stage A and the
    layerwise pipeline alike, since one `--kt-cpuinfer` drives both paths: cores-5, cores-3 and
    cores-1 in a full probe, cores-5 and cores-3 in a quick one (each clamped to at least 1). kt-kernel's
    workers spin, so with one per core the driving thread and the CUDA callback thread starve (on the
    16-core H200 box 13 workers beat 15 on both paths, and 11 drove its layerwise pipeline best:
    benchmarks/results/2026-12-01-h200-pcie5-xeon-amx-16c/quick-probe.md), so a quick probe needs two counts
    below the cliff for its search to choose between. On hosts of four cores or fewer, quick and
    full alike: cores-1 and the whole pool. A quick probe's counts are always among a full one's."""
    if cores <= 4:
        want = {cores - 1, cores}
    else:
        offsets = (5, 3) if quick else (5, 3, 1)
        want = {max(1, cores - k) for k in offsets}
    return sorted(t for t in want if 1 <= t <= cores)


def smt_thread_counts(cores: int, logical: int, quick: bool) -> list[int]:
    """On an SMT host (more logical CPUs than cores), the worker counts above the core count users
    run: `kt run`'s default, 0.8 x logical threads (docs/sglang-kt.md#the-cpuinfer-thread-cliff),
    and in a full probe also the core count itself and every logical CPU but one, so the probe sees
    where the cliff is. Empty without SMT."""
    if logical <= cores:
        return []
    want = {int(0.8 * logical)} if quick else {cores, int(0.8 * logical), logical - 1}
    return sorted(t for t in want if cores <= t <= logical)


def probe_thread_counts(cores: int, quick: bool, threads: Sequence[int] = (), logical: int | None = None) -> list[int]:
    """The worker counts one `kttune probe` run measures in every kt-kernel probe: `threads` (from
    `--threads`) when given, else `kt_thread_counts(cores, quick)` and, on an SMT host of `logical`
    CPUs, `smt_thread_counts`. CPU MoE, stage A and the layerwise pipeline all take theirs from here,
    so their curves answer for the same `--kt-cpuinfer`."""
    if threads:
        return sorted(set(int(t) for t in threads))
    return sorted(set(kt_thread_counts(cores, quick)) | set(smt_thread_counts(cores, logical or cores, quick)))
