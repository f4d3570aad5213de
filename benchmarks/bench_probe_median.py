"""One probe or the median of several: an instance's runner sweeps predicted from each of its quick
probes alone and from their point-by-point median (`kttune.hw.probe_median.median_of_probes`, what
`kttune probe --repeat N` and `kttune profile merge` write), with every subset of two where there are
three (the median of two is their mean).

The instances measured more than once, each with runner sweeps of its own (the same device call):
- h100b: the second H100 instance of 2026-12-05, three quick probes a minute or two apart (at 44, 114
  and 253 s of uptime, `bench_quick_transfer.sh` with AGAIN=1 LATE=1), Kimi-K2-Thinking and GLM-4.7 swept;
- h200-a/b: the H200 instance of the 2026-12-04 quick-transfer calls a and b (GPU-4d9e28bd), one quick
  probe per call, 6 + 9 model sweeps;
- h100c: a third H100 instance, three quick probes (at 35, 101 and 450 s), nine models swept between
  the second and the third;
- h100d+h100e: a fourth, one call: probe (34 s), four models swept, probe (223 s), the same four swept
  again, probe (405 s);
- h100f: a fifth, probe (the pipeline timed in sglang-kt's loop, docs/probe.md#the-pipeline), nine
  models swept, probe;
- h100g, h100h, h100i: three more, each probe, nine models swept, probe (NARROW=1: the narrow pipeline
  layers beside each probe are in their own files and not read here, so these rows compare the
  probes as the others were taken; h100h is the noisy one, h100i the first whose probe retimed a
  smaller pipeline layer dearer per byte).

What it asks: whether repeating the probe is the fix for a host whose memory bandwidth moves 2x on
the scale of minutes (docs/probe.md#repeated-probes). Raw cost model, calibration left out; per
decoder-layer forward, mean absolute error per path; crossovers judged by kttune.protocol.check_crossing.

    python3 benchmarks/bench_probe_median.py --out benchmarks/results/2026-12-05-computed/probe-median
        [--call benchmarks/results/DAY-MACHINE:TAG[+TAG2] ...]   # more calls run with AGAIN=1 (LATE=1)
        [--fastest-cpu-moe]

`--fastest-cpu-moe` adds one more source per instance: the first probe with every kt-kernel MoE point
at its fastest over the instance's probes (a slow reading of the host's first minutes, or of a busy
moment, taken out), and a summary of the hybrid path over the instances: whether the probe should
keep a CPU MoE point's fastest reading minutes apart rather than the median.
"""

from __future__ import annotations

import argparse
import glob
import itertools
import statistics
from dataclasses import replace
from pathlib import Path

from bench_quick_transfer import PATHS, RAW_TARGET, instance_of, path_summary, predict
from results_layout import write_result

from kttune.hw.probe_median import median_of_probes
from kttune.hw.profile import curve_key, load_profile

RESULTS = Path("benchmarks/results")
H100 = RESULTS / "2026-12-05-h100-pcie5-xeon-amx-16c"
H200 = RESULTS / "2026-12-04-h200-pcie5-xeon-amx-16c"
INSTANCES = {
    "h100b": (
        [H100 / f"quick-transfer-h100b{s}.profile.json" for s in ("", "-again", "-late")],
        sorted(H100.glob("quick-transfer-crossover-*-h100b.json")),
    ),
    "h200-a/b": (
        [H200 / f"quick-transfer-{t}.profile.json" for t in ("a", "b")],
        [Path(f) for t in ("a", "b") for f in sorted(glob.glob(str(H200 / f"quick-transfer-crossover-*-{t}.json")))],
    ),
}


# calls with AGAIN=1 / LATE=1, or several on one instance (`instance_of_call`)
LATER_CALLS = ("h100c", "h100d+h100e", "h100f", "h100g", "h100h", "h100i")


def score(sweeps: list[Path], profile) -> dict:
    """Per sweep the per-path errors and crossovers; with their summary (`path_summary`)."""
    rows = [predict(str(s), profile) for s in sweeps]
    return {
        "sweeps": [
            {"file": s.name, "model": r["model"], **{p: r[p] for p in PATHS}, "crossover": r["crossover"]}
            for s, r in zip(sweeps, rows)
        ],
        **path_summary(rows),
    }


def _pair(sweep: dict) -> str:
    """A sweep's per-path errors, "hybrid / layerwise"."""
    return " / ".join(f"{sweep[p]['mape']:.0%}" if sweep[p]["mape"] is not None else "-" for p in PATHS)


def sources(loaded: list) -> list[tuple[str, object]]:
    """Each probe (loaded profiles, in the order taken) alone, every subset of two or more as its
    median (labelled by the probes' numbers)."""
    out: list[tuple[str, object]] = [(f"probe {i + 1}", p) for i, p in enumerate(loaded)]
    for k in range(2, len(loaded) + 1):
        for combo in itertools.combinations(range(len(loaded)), k):
            med = median_of_probes([loaded[i] for i in combo])
            out.append(("median of " + "+".join(str(i + 1) for i in combo), med))
    return out


def fastest_cpu_moe(profiles: list) -> object:
    """The first profile with each `cpu_moe` point's time the fastest any of `profiles` read for the
    same curve (`curve_key`) and size; every other curve as the first probe measured it."""
    first = profiles[0]
    read: dict = {}
    for prof in profiles:
        for c in prof.curves_of("cpu_moe"):
            for pt in c.points:
                read.setdefault((curve_key(c), pt.x), []).append(pt.t_ms)
    curves = tuple(
        replace(c, points=tuple(replace(pt, t_ms=min(read[(curve_key(c), pt.x)])) for pt in c.points))
        if c.kind == "cpu_moe"
        else c
        for c in first.curves
    )
    return replace(first, curves=curves)


def instance_of_call(folder: Path, tag: str) -> tuple[list[Path], list[Path]]:
    """A `bench_quick_transfer.sh` call with AGAIN=1 / LATE=1 (TAG=tag), or calls on one instance
    one after another ("TAG1+TAG2"): their quick probes, in the order taken, and their sweeps."""
    tags = tag.split("+")
    probes = [folder / f"quick-transfer-{t}{s}.profile.json" for t in tags for s in ("", "-again", "-late")]
    sweeps = [s for t in tags for s in sorted(folder.glob(f"quick-transfer-crossover-*-{t}.json"))]
    return [p for p in probes if p.is_file()], sweeps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    ap.add_argument(
        "--call",
        action="append",
        default=[],
        metavar="FOLDER:TAG",
        help="also a bench_quick_transfer.sh call run with AGAIN=1 (LATE=1): its results folder and tag "
        "(TAG1+TAG2: calls on one instance, one after the other)",
    )
    ap.add_argument("--fastest-cpu-moe", action="store_true", help="also each CPU MoE point at its fastest reading")
    args = ap.parse_args()
    for tag in LATER_CALLS:
        INSTANCES[tag] = instance_of_call(H100, tag)
    for call in args.call:
        folder, _, tag = call.rpartition(":")
        probes, sweeps = instance_of_call(Path(folder), tag)
        if len(probes) < 2 or not sweeps:
            raise SystemExit(
                f"--call {call}: needs two or more quick probes and a sweep, found {len(probes)} and {len(sweeps)}"
            )
        INSTANCES[tag] = (probes, sweeps)
    doc: dict = {"instances": {}}
    lines = [
        "# One quick probe or the median of several",
        "",
        "Each instance's runner sweeps (same device call as its probes) predicted from each of its quick probes and "
        "from their point-by-point median (`kttune.hw.probe_median.median_of_probes`: what `kttune probe --repeat N` "
        "and `kttune profile merge` write). Raw cost model, calibration left out. Per decoder-layer forward: "
        "mean absolute error per model and path (mean over the sweeps, worst), sweeps with both paths within "
        f"{RAW_TARGET:.0%}, crossovers that agree (kttune.protocol.check_crossing).",
        "",
    ]
    for name, (probes, sweeps) in INSTANCES.items():
        loaded = [load_profile(p) for p in probes]
        inst = instance_of(loaded[0])
        rows = []
        named = sources(loaded)
        if args.fastest_cpu_moe:
            named.append(("fastest CPU MoE of all", fastest_cpu_moe(loaded)))
        for label, prof in named:
            s = score(sweeps, prof)
            up = prof.provenance.host_uptime_s if label.startswith("probe") else None
            rows.append({"source": label, "host_uptime_s": up, **s})
        doc["instances"][name] = {
            "instance": inst,
            "probes": [str(p) for p in probes],
            "sweeps": [str(s) for s in sweeps],
            "rows": rows,
        }
        lines += [
            f"## {name}: {len(probes)} quick probes, {len(sweeps)} sweeps ({inst})",
            "",
            "| profile | per path, mean (worst) | sweeps with both paths within 15% | crossovers that agree | per sweep, hybrid / layerwise |",
            "|---|---|---|---|---|",
        ]
        for r in rows:
            per = "; ".join(f"{w['model']} {_pair(w)}" for w in r["sweeps"])
            up = f" (host up {r['host_uptime_s']:.0f} s)" if r["host_uptime_s"] is not None else ""
            lines.append(
                f"| {r['source']}{up} | {r['per_path_mean']:.0%} ({r['per_path_max']:.0%}) | "
                f"{r['runs_both_paths_within_target']} of {len(sweeps)} | {r['crossovers_agree']} of {r['crossovers']} | {per} |"
            )
        lines.append("")
    if args.fastest_cpu_moe:
        lines += hybrid_summary(doc["instances"])
    write_result(args.out, doc, "\n".join(lines))


def hybrid_summary(instances: dict) -> list[str]:
    """The hybrid path's mean absolute error per instance, from its first probe, the median of all its
    probes, and its CPU MoE points at their fastest; and the mean over the instances."""
    kinds = ("probe 1", "median of all", "fastest CPU MoE of all")
    lines = [
        "## The hybrid path over the instances",
        "",
        "| instance | " + " | ".join(kinds) + " |",
        "|---|" + "---|" * len(kinds),
    ]
    per: dict[str, list[float]] = {k: [] for k in kinds}
    for name, d in instances.items():
        n = len(d["probes"])
        want = {"probe 1": "probe 1", "median of all": "median of " + "+".join(str(i + 1) for i in range(n))}
        want["fastest CPU MoE of all"] = "fastest CPU MoE of all"
        cells = []
        for k in kinds:
            row = next(r for r in d["rows"] if r["source"] == want[k])
            xs = [w["hybrid"]["mape"] for w in row["sweeps"] if w["hybrid"]["mape"] is not None]
            per[k].append(statistics.mean(xs))
            cells.append(f"{per[k][-1]:.0%}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| mean | " + " | ".join(f"{statistics.mean(per[k]):.1%}" for k in kinds) + " |")
    return lines + [""]


if __name__ == "__main__":
    main()
