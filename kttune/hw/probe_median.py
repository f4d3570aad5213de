"""One profile from several probes of one machine: each point the median of the probes that measured
it, its interval the span of their medians, a reading a probe's own checks name left out where another
probe's is not (docs/probe.md#repeated-probes).

Why: a host's memory bandwidth moves up to 2x over minutes, and one probe takes one reading of it.
Three quick probes of one H100 instance, a minute or two apart, predicted that instance's runner
sweeps with a worst per-path error of 28%, 7% and 33%; the point-by-point median of the three, 19%
(benchmarks/bench_probe_median.py). Pure: `kttune probe --repeat N` and `kttune profile merge` call it.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from collections.abc import Set as AbstractSet
from typing import Sequence

from kttune.errors import UserError
from kttune.hw.point_quality import (
    AGREE_LIMIT,
    PROBES_KEY,
    RETIME_KEYS,
    disturbed_points,
    off_per_byte,
    pipeline_slower_than_larger_pools,
)
from kttune.hw.profile import Curve, HardwareProfile, Point, Provenance, curve_key

# PROBES_KEY (kttune.hw.point_quality): each probe's timing of a point, kept in the merged point's
# extra, which otherwise describes the median.
# In a probe's entry under PROBES_KEY: its reading was left out of the median (`named_points`).
LEFT_OUT_KEY = "left_out"


def median_of_probes(
    profiles: Sequence[HardwareProfile], created: str = "", command: str = "", names: Sequence[str] = ()
) -> HardwareProfile:
    """The profile whose every point is the median over `profiles` (probes of one machine, in the
    order taken) of that point's time, where two or more measured it, leaving out a reading the probe's
    own checks name where another's is not (`_median_curve`); its p10 / p90 the fastest and slowest
    of those times (the probes' spread, which one probe's own repeats do not show), every probe's
    time kept in `extra["probes"]`. A curve or point only one probe measured is kept as it
    was. `names` label the probes in the provenance (files; default "probe i of n"). Refused (one
    line, exit 2): fewer than two profiles, one not measured, or probes of different machines."""
    names = list(names) or [f"probe {i + 1} of {len(profiles)}" for i in range(len(profiles))]
    _check(profiles, names)
    groups: dict[tuple, list[Curve]] = {}
    for p in profiles:
        for c in p.curves:
            groups.setdefault((curve_key(c), c.backend), []).append(c)
    # a pipeline reading the probe's own larger thread count shows to be slow (the thread law)
    by_pools = set().union(*(pipeline_slower_than_larger_pools(p.curves) for p in profiles))
    curves = tuple(_median_curve(cs, by_pools) for cs in groups.values())
    last = profiles[-1]
    return HardwareProfile(
        provenance=_provenance(profiles, names, created, command, curves),
        inventory=last.inventory,
        curves=curves,
        fingerprint=last.fingerprint,
        timer=last.timer,
    )


def _check(profiles: Sequence[HardwareProfile], names: Sequence[str]) -> None:
    if len(profiles) < 2:
        raise UserError(
            f"a median of probes needs two or more, got {len(profiles)}",
            "pass two or more profiles that `kttune probe` wrote on this machine",
        )
    for p, name in zip(profiles, names):
        if p.provenance.kind != "measured":
            raise UserError(
                f"{name} is a {p.provenance.kind} profile, not a probe",
                "pass profiles that `kttune probe` measured",
            )
    fps = list(dict.fromkeys(p.fingerprint for p in profiles))
    if len(fps) > 1:
        first = names[[p.fingerprint for p in profiles].index(fps[1])]
        raise UserError(
            f"{first} is a probe of another machine than {names[0]} (fingerprint {fps[1]} against {fps[0]})",
            "merge probes of one machine (`kttune profile show FILE` names each one's)",
        )


def named_points(curve: Curve) -> set[int]:
    """The ids of the points of one probe's curve that the probe's own checks name: disturbed by their
    own timings (`disturbed_points`) or, on a layerwise pipeline curve, off per byte against the
    curve's other points (`off_per_byte`: timed again, and still off)."""
    return {id(p) for p in (*disturbed_points(curve), *off_per_byte(curve))}


def _median_curve(curves: list[Curve], also_named: AbstractSet[int] = frozenset()) -> Curve:
    """Each point the median over the probes that measured it, leaving out a probe's reading its own
    checks name (`named_points`) where another probe's reading is not named: with two probes the
    median is their mean, and one busy moment in one probe moves it halfway. On H100 instance r
    (2026-12-06) the first quick probe's narrow BF16 half layer (384 MiB) read 27.7 ms and the
    second's 15.8; the mean put GLM-4.5-Air's layerwise path 19% fast, the second probe's reading 2%
    (docs/probe.md#repeated-probes). A reading every probe's checks name is kept: the median of them
    all. `also_named`: ids of readings named by a law over a probe's other curves (its thread counts)."""
    first = curves[0]
    if len(curves) == 1:
        return first
    named: set[int] = set().union(*(named_points(c) for c in curves)) | set(also_named)
    by_x: dict[float, list[Point]] = {}
    for c in curves:
        for p in c.points:
            by_x.setdefault(p.x, []).append(p)
    points = tuple(_median_point(ps, named) for _, ps in sorted(by_x.items()))
    measured = set(by_x)
    skipped = {}
    for c in curves:
        for s in c.skipped:
            if s.get("x") not in measured:
                skipped.setdefault((s.get("x"), s.get("reason")), s)
    return replace(first, points=points, skipped=tuple(skipped.values()))


def _median_point(points: list[Point], named: AbstractSet[int] = frozenset()) -> Point:
    """The median of one point's timings by several probes (those not `named`, where any is not), or
    the one probe's point as it was. Every probe's timing stays in extra[PROBES_KEY], a left-out one
    marked."""
    if len(points) == 1:
        return points[0]
    kept = [p for p in points if id(p) not in named] or points
    ts = [p.t_ms for p in kept]
    mid = statistics.median(ts)
    nearest = min(kept, key=lambda p: abs(p.t_ms - mid))  # the probe whose point stands for the median
    extra = {k: v for k, v in nearest.extra.items() if k not in RETIME_KEYS}
    extra[PROBES_KEY] = [
        {
            "ms": p.t_ms,
            "p10": p.t_ms_p10,
            "p90": p.t_ms_p90,
            **{k: p.extra[k] for k in RETIME_KEYS if k in p.extra},
            **({LEFT_OUT_KEY: True} if all(p is not q for q in kept) else {}),
        }
        for p in points
    ]
    return Point(x=nearest.x, t_ms=mid, t_ms_p10=min(ts), t_ms_p90=max(ts), n=sum(p.n for p in kept), extra=extra)


def _probes_apart(curves: Sequence[Curve]) -> tuple[int, int] | None:
    """How many of the points several probes measured have probes more than `AGREE_LIMIT` apart (every
    probe's reading, a left-out one too)."""
    merged = [p for c in curves for p in c.points if PROBES_KEY in p.extra]
    ms = [[q["ms"] for q in p.extra[PROBES_KEY] if q["ms"] > 0] for p in merged]
    apart = [m for m in ms if m and max(m) > AGREE_LIMIT * min(m)]
    return (len(apart), len(merged)) if apart else None


def _left_out(curves: Sequence[Curve]) -> int:
    """How many probes' readings the median left out (`LEFT_OUT_KEY`)."""
    return sum(bool(q.get(LEFT_OUT_KEY)) for c in curves for p in c.points for q in p.extra.get(PROBES_KEY, ()))


def _probe_notes(profiles: Sequence[HardwareProfile], names: Sequence[str]) -> list[str]:
    """What the probes said: a note every probe said as it was, one only some said prefixed with
    theirs (a probe's note on its own disturbed points is not the median's)."""
    by_note: dict[str, list[str]] = {}
    for p, name in zip(profiles, names):
        for n in dict.fromkeys(p.provenance.notes):
            by_note.setdefault(n, []).append(name)
    return [n if len(who) == len(profiles) else f"{', '.join(who)}: {n}" for n, who in by_note.items()]


def _provenance(
    profiles: Sequence[HardwareProfile], names: Sequence[str], created: str, command: str, curves: Sequence[Curve]
) -> Provenance:
    first, last = profiles[0].provenance, profiles[-1].provenance

    def uptime(p: Provenance) -> str:
        return f", host up {p.host_uptime_s:.0f} s" if p.host_uptime_s is not None else ""

    sources = tuple(
        f"{name}: {p.provenance.created or 'undated'}{uptime(p.provenance)}, `{p.provenance.command}`"
        for name, p in zip(names, profiles)
    )
    said = [
        f"each point the median over those of the {len(profiles)} probes that measured it, its interval their "
        "span (docs/probe.md#repeated-probes)"
    ]
    apart = _probes_apart(curves)
    if apart:
        said.append(
            f"the probes disagree by more than {AGREE_LIMIT:g}x at {apart[0]} of {apart[1]} points two or more "
            "of them measured (the slowest over the fastest): the host changed between them, and one probe alone would "
            "have been off by as much"
        )
    left_out = _left_out(curves)
    if left_out:
        said.append(
            f"{left_out} reading{'s' if left_out != 1 else ''} that a probe's own checks named (disturbed, or a "
            "pipeline point off per byte or slower than its probe's larger thread count allows) left out of the median where another probe's reading was not named; each "
            f"stays in the point, marked {LEFT_OUT_KEY!r}"
        )
    if any(p.calibration for p in profiles):
        said.append(
            "the probes' calibration is left out (it was fitted to one probe's curves): "
            "run `kttune calibrate` on this profile anew"
        )
    notes = tuple(dict.fromkeys(said + _probe_notes(profiles, names)))
    return Provenance(
        kind="measured",
        machine=last.machine,
        created=created or last.created,
        tool_version=last.tool_version,
        command=command or last.command,
        notes=notes,
        sources=sources,
        lab_notes=tuple(dict.fromkeys(n for p in profiles for n in p.provenance.lab_notes)),
        host_uptime_s=first.host_uptime_s,
    )
