"""Whether a point slower than a larger pool allows was timed in a slow moment: the thread law
(`kttune.hw.point_quality.slower_than_larger_pools`: over fewer workers a call takes at most a larger
pool's time x the ratio of the counts, times `THREAD_LAW_SLACK`) checked two ways on files already in
benchmarks/results/, on kt-kernel's MoE calls, its stage A writes and the layerwise pipeline's layers
(whose stage A is the one stage that depends on the count:
`kttune.hw.point_quality.pipeline_slower_than_larger_pools`).

1. How often it names a point: every measured profile's curves of each kind, grouped by
   `kttune.hw.thread_interp.curve_group` (one measurement at several thread counts).
2. Whether the points it names are slow measurements: the instances probed two or more times with
   `kttune probe --quick` in one device call (`bench_probe_median.INSTANCES` and `LATER_CALLS`, and
   every call of `bench_cpu_generation.CALLS` with two or more probes), each point of each probe
   against the median of the same point in the instance's other probes, per kind, for the points the
   law names and for the rest. A law that names slow moments finds points above their siblings; one
   that names a kernel's real behaviour finds them where the others are too.

    python3 benchmarks/bench_thread_law.py --out benchmarks/results/2026-12-05-computed/thread-law
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from bench_cpu_generation import CALLS
from bench_probe_median import H100, INSTANCES, LATER_CALLS, RESULTS, instance_of_call
from results_layout import write_result

from kttune.hw.point_quality import THREAD_LAW_SLACK, slower_than_larger_pools
from kttune.hw.profile import Curve, HardwareProfile, load_profile
from kttune.hw.thread_interp import curve_group, thread_groups

KINDS = ("cpu_moe", "stage_a_write", "pipeline")


def measured_profiles() -> list[Path]:
    """Every profile a probe wrote on a GPU box or a development VM (not computed, derived or merged)."""
    return sorted(p for p in RESULTS.glob("*/*.profile.json") if not p.parent.name.endswith("-computed"))


def groups(profile: HardwareProfile, kind: str) -> list[list[Curve]]:
    """The profile's curves of `kind` measured at two or more thread counts, one list per measurement."""
    by = thread_groups(c for c in profile.curves_of(kind) if int(c.params.get("threads") or 0) > 0)
    return [cs for cs in by.values() if len(cs) > 1]


def named(profile: HardwareProfile, kind: str) -> tuple[int, set[tuple]]:
    """(points at a count below another count of their measurement, the (group, threads, size) the law names)."""
    below, flagged = 0, set()
    for cs in groups(profile, kind):
        top = max(int(c.params["threads"]) for c in cs)
        below += sum(len(c.points) for c in cs if int(c.params["threads"]) < top)
        for th, pts in slower_than_larger_pools(cs).items():
            flagged |= {(curve_group(cs[0]), th, p.x) for p in pts}
    return below, flagged


def census() -> dict:
    """Per kind: profiles read, points below a larger count, and how many the law names."""
    out = {k: {"profiles": 0, "points": 0, "named": 0} for k in KINDS}
    for f in measured_profiles():
        prof = load_profile(f)
        for k in KINDS:
            below, flagged = named(prof, k)
            if below:
                out[k]["profiles"] += 1
                out[k]["points"] += below
                out[k]["named"] += len(flagged)
    return out


def instances() -> dict[str, list[Path]]:
    """The instances with two or more quick probes of one device call: their probes."""
    out = {name: probes for name, (probes, _) in INSTANCES.items()}
    for call in LATER_CALLS:
        out[call] = instance_of_call(H100, call)[0]
    seen = {p.resolve() for probes in out.values() for p in probes}
    for _, folder, call, _ in CALLS:
        probes = instance_of_call(folder, call)[0]
        if len(probes) > 1 and not seen & {p.resolve() for p in probes}:
            out[call] = probes
    return out


def against_siblings(kind: str = "cpu_moe") -> dict:
    """Each point of `kind` of each probe over the median of the same point in its instance's other
    probes, split by whether the law names it."""
    ratios: dict[str, list[float]] = {"named": [], "rest": []}
    for probes in instances().values():
        profs = [load_profile(p) for p in probes]
        values = [
            {(curve_group(c), int(c.params["threads"]), p.x): p.t_ms for c in prof.curves_of(kind) for p in c.points}
            for prof in profs
        ]
        for i, prof in enumerate(profs):
            flagged = named(prof, kind)[1]
            for key, t in values[i].items():
                others = [v[key] for j, v in enumerate(values) if j != i and key in v]
                if others and t > 0:
                    ratios["named" if key in flagged else "rest"].append(t / statistics.median(others))
    return {k: _summary(v) for k, v in ratios.items()}


def _summary(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {
        "n": len(xs),
        "median": statistics.median(xs) if xs else None,
        "p25": xs[len(xs) // 4] if xs else None,
        "p75": xs[3 * len(xs) // 4] if xs else None,
        "over_1.1": sum(x > 1.1 for x in xs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    doc = {"slack": THREAD_LAW_SLACK, "census": census(), "against_siblings": {k: against_siblings(k) for k in KINDS}}
    lines = [
        "# The thread law on the probes' kt-kernel points and pipeline layers",
        "",
        f"A point at T workers slower than {THREAD_LAW_SLACK:.2f} x a larger count T' of the same measurement's "
        "time at that size x T'/T (`kttune.hw.point_quality.slower_than_larger_pools`).",
        "",
        "## How often it names a point (every measured profile in benchmarks/results/)",
        "",
        "| kind | profiles | points below a larger count | named |",
        "|---|---|---|---|",
    ]
    for k, v in doc["census"].items():
        lines.append(f"| {k} | {v['profiles']} | {v['points']} | {v['named']} |")
    lines += [
        "",
        "## Whether the points it names were slow moments",
        "",
        f"Instances probed two or more times in one device call ({', '.join(instances())}): each point over the "
        "median of the same point in the instance's other probes.",
        "",
        "| kind | points | n | median | 25th-75th percentile | over 1.1 |",
        "|---|---|---|---|---|---|",
    ]
    for kind, split in doc["against_siblings"].items():
        for k, v in split.items():
            lines.append(
                f"| {kind} | {'named by the law' if k == 'named' else 'the rest'} | {v['n']} | {v['median']:.3f} | "
                f"{v['p25']:.3f}-{v['p75']:.3f} | {v['over_1.1']} ({v['over_1.1'] / v['n']:.0%}) |"
            )
    lines.append("")
    write_result(args.out, doc, "\n".join(lines))


if __name__ == "__main__":
    main()
