"""A shipped profile of one instance, or of many: the H200 box's sweeps of 2026-12-04 (the quick-transfer
calls a-d, three instances) predicted from the shipped profile (one instance's probe) and from the same
profile with each of its curves replaced by the point-by-point median over every other instance of the
machine kind that measured that curve (each instance's own median over its profiles first, so an
instance probed many times counts once; the instances the sweeps ran on are left out, so no sweep is
predicted from its own instance's measurements). A curve that fewer than --min-instances other
instances measured, and a point fewer measured, stays as shipped.

What it asks: whether a profile that stands for the machine kind (the middle of its instances)
predicts an instance it never measured better than one instance's profile does
(docs/cost-model.md#the-instances-own-quick-probe: instances differ 1.2-3.1x in kt-kernel's MoE).

    python3 benchmarks/bench_instance_median.py --out benchmarks/results/2026-12-05-computed/instance-median
"""

from __future__ import annotations

import argparse
import glob
import statistics
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from bench_quick_transfer import instance_of, path_summary, predict
from results_layout import write_result

from kttune.hw.profile import HardwareProfile, curve_key, load_profile
from kttune.hw.registry import load_shipped

SHIPPED = "h200-pcie5-xeon-amx-16c"
RESULTS = Path("benchmarks/results")
H = RESULTS / "2026-12-04-h200-pcie5-xeon-amx-16c"
CALLS = {
    "a": ("quick-transfer-a.profile.json", "a"),
    "b": ("quick-transfer-a.profile.json", "b"),  # b ran on a's instance; its quick profile is a's call's
    "c": ("quick-transfer-c.profile.json", "c"),
    "d": ("quick-transfer-d.profile.json", "d"),
}


def instance_curves(files: list[str]) -> dict[str, dict[str, dict[float, float]]]:
    """Per instance, per curve key, per x: the median time over that instance's profiles."""
    raw: dict[str, dict[str, dict[float, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for f in files:
        p = load_profile(f)
        inst = instance_of(p)
        for c in p.curves:
            for pt in c.points:
                raw[inst][curve_key(c)][pt.x].append(pt.t_ms)
    return {i: {k: {x: statistics.median(ts) for x, ts in xs.items()} for k, xs in ks.items()} for i, ks in raw.items()}


def median_profile(
    base: HardwareProfile, per_instance: dict, leave_out: set[str], min_instances: int
) -> tuple[HardwareProfile, dict]:
    """`base` with each curve's points replaced by the median over the instances not left out that
    measured that curve at that x (at least `min_instances` of them); what moved, for the report."""
    curves, moved = [], {"curves": 0, "points": 0, "kept": 0}
    for c in base.curves:
        k = curve_key(c)
        pts = []
        for pt in c.points:
            ts = [xs[k][pt.x] for i, xs in per_instance.items() if i not in leave_out and k in xs and pt.x in xs[k]]
            if len(ts) >= min_instances:
                pts.append(replace(pt, t_ms=statistics.median(ts), t_ms_p10=None, t_ms_p90=None))
                moved["points"] += 1
            else:
                pts.append(pt)
                moved["kept"] += 1
        if pts != list(c.points):
            moved["curves"] += 1
        curves.append(replace(c, points=tuple(pts)))
    return replace(base, curves=tuple(curves)), moved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--min-instances", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    shipped = load_shipped(SHIPPED)
    files = sorted(glob.glob(str(RESULTS / "2026-12-0*-h200-pcie5-xeon-amx-16c" / "*.profile.json")))
    per_instance = instance_curves(files)
    swept = {instance_of(load_profile(H / q)) for q, _ in CALLS.values()}
    med, moved = median_profile(shipped, per_instance, swept | {instance_of(shipped)}, args.min_instances)
    rows = []
    for tag, (_, run_tag) in CALLS.items():
        for runs in sorted(glob.glob(str(H / f"quick-transfer-crossover-*-{run_tag}.json"))):
            s, m = predict(runs, shipped), predict(runs, med)
            rows.append({"call": tag, "model": s["model"], "shipped": s, "median": m})

    def summary(src: str) -> dict:
        s = path_summary([r[src] for r in rows])
        keep = ("per_path_mean", "per_path_max", "crossovers_agree", "crossovers")
        return {**{k: s[k] for k in keep}, "both_within_15": s["runs_both_paths_within_target"]}

    summ = {"shipped": summary("shipped"), "median": summary("median")}
    others = len([i for i in per_instance if i not in swept | {instance_of(shipped)}])
    lines = [
        "# One instance's profile or the middle of the machine kind's",
        "",
        f"Sweeps: the H200 box's quick-transfer calls a-d of 2026-12-04 ({len(rows)} sweeps on "
        f"{len(swept)} instances). Shipped: `{SHIPPED}` (one instance's probes). Median: the same profile "
        f"with each point replaced by the median over {others} other instances' profiles that measured it "
        f"(at least {args.min_instances}; each instance's median over its own profiles first; the swept "
        f"instances and the shipped one's left out): {moved['points']} points of {moved['curves']} curves "
        f"moved, {moved['kept']} kept. Raw cost model, calibration left out. Per decoder-layer forward, mean "
        "absolute error (signed), hybrid / layerwise; crossovers judged by kttune.protocol.check_crossing.",
        "",
        "| call | model | shipped: hybrid / layerwise | shipped: crossover | median: hybrid / layerwise | median: crossover |",
        "|---|---|---|---|---|---|",
    ]

    def cell(d: dict) -> str:
        return " / ".join(
            f"{d[p]['mape']:.0%} ({d[p]['signed']:+.0%})" if d[p]["mape"] is not None else "-"
            for p in ("hybrid", "layerwise")
        )

    def xcell(d: dict) -> str:
        return "; ".join(
            f"{x['measured']} -> {x['predicted']} ({'agrees' if x['agrees'] else 'no'})" for x in d["crossover"]
        )

    for r in rows:
        lines.append(
            f"| {r['call']} | {r['model']} | {cell(r['shipped'])} | {xcell(r['shipped'])} | "
            f"{cell(r['median'])} | {xcell(r['median'])} |"
        )
    lines += [
        "",
        "| profile | per model and path, mean (worst) | sweeps with both paths within 15% | crossovers that agree |",
    ]
    lines += ["|---|---|---|---|"]
    for src, s in summ.items():
        lines.append(
            f"| {src} | {s['per_path_mean']:.0%} ({s['per_path_max']:.0%}) | {s['both_within_15']} of {len(rows)} | "
            f"{s['crossovers_agree']} of {s['crossovers']} |"
        )
    doc = {
        "min_instances": args.min_instances,
        "moved": moved,
        "other_instances": others,
        "summary": summ,
        "rows": rows,
    }
    write_result(args.out, doc, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
