"""Which of a probe point's timings to keep: the fastest, their median, or the first, read against the
runner's sweeps of the same instance.

A probe times a point whose timing was short or scattered again after the curve's other points, a
third time where the two disagree (`kttune.probes.common.retime`); every quick-probe CPU MoE point
is such a point. Each point records all its timings in order (`extra["timings"]`). The probe kept
the fastest, on the premise that a busy moment only slows a call. On the Emerald Rapids instances the
machine's speed moves both ways over seconds (`benchmarks/diag/diag_gap_rounds.py`: one kt-kernel
call at Mixtral-8x7B's shape in 12 interleaved rounds on instance w, 44-87 ms, every way of calling
it alike), and the runner's sweeps (3 interleaved repeats, their median) see the machine's typical
speed, not its best. Here every call with quick probes and sweeps of one instance
(`bench_cpu_generation.CALLS`) is read with each estimator applied to every retimed point of every
curve (all other points as measured), raw cost model:

- per (call, probe, sweep) the signed and absolute error per path (a sweep's mean per
  decoder-layer forward), grouped by box and CPU generation: median signed error, mean absolute
  error, sweeps within 15%, and crossovers that agree (`kttune.protocol.check_crossing`);
- the shift: the estimate's ratio to the fastest timing, over the retimed CPU MoE points.

    python3 benchmarks/bench_probe_estimator.py --out benchmarks/results/2026-12-06-computed/probe-estimator
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace
from pathlib import Path

from bench_cpu_generation import CALLS, cpuid, generation, without_shape_sets
from bench_probe_median import instance_of_call
from bench_quick_transfer import PATHS, predict
from results_layout import write_result

from kttune.hw.profile import load_profile
from kttune.probes.common import quantiles

ESTIMATORS = ("fastest", "median", "first")
BAR = 0.15


def timings_of(p) -> list[float]:
    return [float(t["ms"]) for t in (p.extra or {}).get("timings") or () if t.get("ms")]


def pick(ms: list[float], how: str) -> float:
    if how == "fastest":
        return min(ms)
    if how == "median":
        return statistics.median(ms)
    if how == "first":
        return ms[0]
    raise ValueError(how)


def with_estimator(profile, how: str):
    """`profile` with each point timed more than once set to `how` of its timings (`pick`)."""
    curves = []
    for c in profile.curves:
        pts = tuple(replace(p, t_ms=pick(ms, how)) if len(ms := timings_of(p)) >= 2 else p for p in c.points)
        curves.append(replace(c, points=pts))
    return replace(profile, curves=tuple(curves))


def shifts(profile, how: str, kind: str = "cpu_moe") -> list[float]:
    """Per retimed point of `kind`: `how` of its timings over the fastest."""
    return [
        pick(ms, how) / min(ms)
        for c in profile.curves
        if c.kind == kind
        for p in c.points
        if len(ms := timings_of(p)) >= 2
    ]


def gather(calls=CALLS) -> tuple[list[dict], dict]:
    rows, shift = [], {h: [] for h in ESTIMATORS}
    for box, folder, call, machine in calls:
        probes, sweeps = instance_of_call(folder, call)
        if not (probes and sweeps and machine.is_file()):
            continue
        fam, model, _ = cpuid(machine)
        gen = generation(machine, fam, model)
        for k, probe in enumerate(probes):
            base = without_shape_sets(load_profile(probe))
            for how in ESTIMATORS:
                prof = with_estimator(base, how)
                shift[how] += shifts(base, how)
                for s in sweeps:
                    got = predict(str(s), prof)
                    rows.append(
                        {
                            "box": box,
                            "generation": gen,
                            "call": call,
                            "probe": probe.name,
                            "first_probe": k == 0,
                            "estimator": how,
                            "model": got["model"],
                            **{path: {"signed": got[path]["signed"], "mape": got[path]["mape"]} for path in PATHS},
                            "crossovers": [x["agrees"] for x in got["crossover"]],
                        }
                    )
    return rows, shift


def grouped(rows: list[dict]) -> list[dict]:
    out = []
    for box, gen in sorted({(r["box"], r["generation"]) for r in rows}):
        for how in ESTIMATORS:
            sel = [r for r in rows if (r["box"], r["generation"], r["estimator"]) == (box, gen, how)]
            entry = {"box": box, "generation": gen, "estimator": how, "calls": len({r["call"] for r in sel})}
            for path in PATHS:
                cells = [r[path] for r in sel if r[path]["mape"] is not None]
                entry[path] = {
                    "n": len(cells),
                    "median_signed": statistics.median(c["signed"] for c in cells),
                    "mean_abs": statistics.mean(c["mape"] for c in cells),
                    "within": sum(c["mape"] <= BAR for c in cells),
                }
            xs = [a for r in sel for a in r["crossovers"]]
            entry["crossovers"] = {"agree": sum(bool(a) for a in xs), "n": len(xs)}
            out.append(entry)
    return out


def markdown(groups: list[dict], shift: dict) -> str:
    lines = [
        "# Which timing of a probe point to keep: fastest, median or first",
        "",
        "Every call with quick probes and the runner's sweeps of one instance; each probe read with every retimed point "
        "set to the fastest of its timings (what the probe kept), their median, or the first; raw cost model; per "
        "(probe, sweep) the path's mean error per decoder-layer forward. Signed = predicted / measured - 1.",
        "",
        "| box | CPU | estimator | calls | hybrid: median signed | mean abs | within 15% | layerwise: median signed "
        "| mean abs | within 15% | crossovers agree |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for g in groups:
        h, w, x = g["hybrid"], g["layerwise"], g["crossovers"]
        lines.append(
            f"| {g['box']} | {g['generation']} | {g['estimator']} | {g['calls']} | {h['median_signed']:+.1%} | "
            f"{h['mean_abs']:.1%} | {h['within']} of {h['n']} | {w['median_signed']:+.1%} | {w['mean_abs']:.1%} | "
            f"{w['within']} of {w['n']} | {x['agree']} of {x['n']} |"
        )
    lines += ["", "Retimed CPU MoE points: the estimate over the fastest timing.", ""]
    lines += ["| estimator | points | mean | p90 |", "|---|---|---|---|"]
    for how, xs in shift.items():
        if xs:
            lines.append(f"| {how} | {len(xs)} | {statistics.mean(xs):.3f} | {quantiles(xs)[2]:.3f} |")
    return "\n".join(lines + [""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    rows, shift = gather()
    groups = grouped(rows)
    summary = {h: {"n": len(xs), "mean": statistics.mean(xs) if xs else None} for h, xs in shift.items()}
    write_result(args.out, {"rows": rows, "groups": groups, "shift": summary}, markdown(groups, shift))


if __name__ == "__main__":
    main()
