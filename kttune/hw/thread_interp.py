"""A kt-kernel thread count the profile did not measure, between two it did: its curves from the two
nearest counts by Amdahl's law through both (docs/cost-model.md#a-thread-count-between-two-measured).

A call's time at T worker threads is a part that more threads do not shorten plus a part divided
among them, t(T) = a + b / T. Two measured counts T1 < T < T2 at the same forward size give a and b,
so t(T) lies between t(T1) and t(T2) by its position in 1/T. The CPU MoE and stage A curves are
interpolated point by point (at the sizes both counts measured); the layerwise pipeline, whose time
the threads move through the CUDA callback and driving threads as much as through stage A
(docs/sglang-kt.md#the-cpuinfer-thread-cliff), takes the nearest count below, as the cost model's
stage A fit did before. Counts outside the measured range are not made up, and neither is a count
next to the thread cliff: a measured count at or above the physical core count (every core a worker,
the driving thread starved; on SMT hosts the counts above the cores) is no neighbour, since the law
does not hold across the cliff (the shipped H200 profile's 15 threads read from 13 and 16 came out up
to 50x slow). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from kttune.hw.point_quality import RETIME_KEYS
from kttune.hw.profile import Curve, HardwareProfile, Point

INTERPOLATED_KINDS = ("cpu_moe", "stage_a_write")
NEAREST_BELOW_KINDS = ("pipeline",)


def amdahl_between(threads: float, t1: float, t2: float, threads1: float, threads2: float) -> float:
    """t(threads) = a + b / threads through (threads1, t1) and (threads2, t2)."""
    b = (t1 - t2) / (1.0 / threads1 - 1.0 / threads2)
    return t1 - b / threads1 + b / threads


# what an interpolated curve adds to its params besides its thread count
MARKS = ("interpolated_from", "threads_from")


def curve_group(c: Curve) -> tuple:
    """What makes curves at different thread counts measurements of the same thing: the kind and
    every param but the thread count (and this module's marks)."""
    return (c.kind,) + tuple(sorted((k, str(v)) for k, v in c.params.items() if k != "threads" and k not in MARKS))


def thread_groups(curves: Iterable[Curve]) -> dict[tuple, list[Curve]]:
    """`curves` by `curve_group`: each list one measurement at the thread counts it was taken at."""
    groups: dict[tuple, list[Curve]] = {}
    for c in curves:
        groups.setdefault(curve_group(c), []).append(c)
    return groups


def _counts(curves: list[Curve]) -> dict[int, Curve]:
    return {int(c.params["threads"]): c for c in curves if c.params.get("threads") is not None}


def _interpolated(threads: int, lo: Curve, hi: Curve) -> Curve:
    t1, t2 = int(lo.params["threads"]), int(hi.params["threads"])
    theirs = {p.x: p for p in hi.points}
    points = []
    for p in lo.points:
        q = theirs.get(p.x)
        if q is None:
            continue

        def at(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else amdahl_between(threads, a, b, t1, t2)

        extra = {k: v for k, v in p.extra.items() if k not in RETIME_KEYS + ("remeasured",)}  # older profiles' key
        points.append(
            Point(
                x=p.x,
                t_ms=amdahl_between(threads, p.t_ms, q.t_ms, t1, t2),
                t_ms_p10=at(p.t_ms_p10, q.t_ms_p10),
                t_ms_p90=at(p.t_ms_p90, q.t_ms_p90),
                n=min(p.n, q.n),
                extra={**extra, "interpolated_ms": [p.t_ms, q.t_ms]},
            )
        )
    params = {**lo.params, "threads": threads, "interpolated_from": [t1, t2]}
    return replace(lo, points=tuple(points), params=params, skipped=())


def interpolated_curves(profile: HardwareProfile, threads: int) -> list[Curve]:
    """The curves `threads` workers get from the counts around it below the physical core count
    (none where it was measured or no group of curves measured such counts on both sides of it)."""
    cores = profile.inventory.cpu.physical_cores or 10**9
    if threads >= cores:
        return []
    groups = thread_groups(c for c in profile.curves if c.kind in INTERPOLATED_KINDS + NEAREST_BELOW_KINDS)
    out = []
    for curves in groups.values():
        counts = {t: c for t, c in _counts(curves).items() if t < cores}
        if threads in counts:
            continue
        below = [t for t in counts if t < threads]
        above = [t for t in counts if t > threads]
        if not below or not above:
            continue
        lo, hi = counts[max(below)], counts[min(above)]
        if lo.kind in INTERPOLATED_KINDS:
            new = _interpolated(threads, lo, hi)
            if new.points:
                out.append(new)
        else:
            out.append(replace(lo, params={**lo.params, "threads": threads, "threads_from": max(below)}))
    return out


def with_thread_count(profile: HardwareProfile, threads: int) -> tuple[HardwareProfile, str | None]:
    """`profile` with the curves of `threads` workers interpolated where it measured counts on both
    sides (`interpolated_curves`), and a note saying so; unchanged, and None, where there is nothing
    to add."""
    new = interpolated_curves(profile, threads)
    if not any(c.kind == "cpu_moe" for c in new):
        return profile, None
    around = sorted({t for c in new for t in c.params.get("interpolated_from", ())})
    note = (
        f"--kt-cpuinfer {threads} was not measured: kt-kernel's MoE and stage A curves interpolated between "
        f"{' and '.join(map(str, around))} threads (Amdahl's law through both), the layerwise pipeline taken "
        "from the nearest count below; on the H200 box a count read this way put the path runner's forwards "
        "20% (hybrid) and 12% (layerwise) off, against 11% and 9% measured "
        f"(docs/cost-model.md#a-thread-count-between-two-measured): `kttune probe --threads {threads}` measures it"
    )
    return replace(profile, curves=profile.curves + tuple(new)), note
