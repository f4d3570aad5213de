"""How busy each instance was, and whether the probe's own count of disturbed points tells it.

Every quick-transfer call of both GPU boxes (`bench_cpu_generation.CALLS`, and h100hog, whose probe
and sweeps ran beside memory neighbours on purpose: the known busy case); the calls made after the
busy rule was set (`AFTER_RULE`) are read apart, held out. Per call:

- the runner's scatter: each sweep point is 3 interleaved repeats; the coefficient of variation of
  those repeats (`timing.measured_ms.cv` in the runner's results), median and 90th percentile over
  the call's points, and the share of points above 10%;
- per quick probe: the points its own checks name (`kttune.hw.point_quality.disturbed_points`, over
  every curve: the count the probe prints in its notes, docs/probe.md#disturbed-points), and its
  error on the call's sweeps (raw cost model, per decoder-layer forward, mean absolute error per model
  and path, `bench_probe_median.score`).

What it asks, and what the probe's busy rule (`kttune.hw.point_quality.BUSY_SHARE`) rests on: on a busy instance (H200 instance f, 2026-12-06, read every path 5-93% off from three
probes), does the probe say so? Spearman's rank correlation over the probes (named points against
the probe's error) and over the calls (the runner's median scatter against the first probe's error).

    python3 benchmarks/bench_instance_noise.py --out benchmarks/results/2026-12-06-computed/instance-noise
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from bench_cpu_generation import CALLS, H100
from bench_own_layer import model_of
from bench_probe_median import instance_of_call, score
from results_layout import write_result
from scipy.stats import spearmanr

from kttune.hw.point_quality import BUSY_SHARE, named_share
from kttune.hw.profile import load_profile
from kttune.probes.common import quantiles

BUSY_CV = 0.10  # a runner point whose repeats scatter more than this is counted apart
# Calls made after the busy rule was read off the calls above (fifteenth session, 2026-12-06): their
# quick probes are held out, reported apart. Instance x's probes ran a first form of the median rule
# (docs/probe.md#which-timing-a-point-keeps) whose spreads read wider than any released rule's, so
# the points they name are no reading of either: left out here.
AFTER_RULE = (
    "h100u",
    "h100v",
    "h100aa",
    "h100ac",
    "h100ad",
    "h100ae",
    "h100af+h100ag",
    "h100ah+h100ai",
    "h100aj+h100ak",
    "h100al",
    "h100am",
    "h100ao",
    "h100ap",
    "h100aq",
    "h100ar",
    "h100av",
    "h100aw",
)
RULE_FORM_OUTSIDE = ("h100x",)


def runner_scatter(sweeps: list[Path]) -> dict:
    """The coefficient of variation of every runner point's repeats, over the call's sweeps."""
    cvs = [r["timing"]["measured_ms"]["cv"] for s in sweeps for r in json.loads(s.read_text())["runs"]]
    _, median, p90 = quantiles(cvs)
    return {
        "points": len(cvs),
        "cv_median": median,
        "cv_p90": p90,
        "share_over": sum(c > BUSY_CV for c in cvs) / len(cvs),
    }


def _probe_row(path: Path, sweeps: list[Path]) -> dict:
    """One probe file: the readings its own checks name and its error on `sweeps`."""
    prof = load_profile(path)
    named, total = named_share(prof.curves)
    s = score(sweeps, prof)
    return {
        "probe": path.name,
        "named": named,
        "points": total,
        "per_path_mean": s["per_path_mean"],
        "per_path_max": s["per_path_max"],
    }


def own_probes(calls: list[tuple[str, Path, str]]) -> list[dict]:
    """Every `kttune probe --model M` taken in a call beside M's sweep (model-M-TAG.profile.json, and
    -again where it was taken twice): its named readings and its error on that sweep."""
    return [
        {"box": box, "call": call, **_probe_row(f, [sweep])}
        for box, folder, call in calls
        for tag in call.split("+")
        for sweep in sorted(folder.glob(f"quick-transfer-crossover-*-{tag}.json"))
        for suffix in ("", "-again")
        if (f := folder / f"quick-transfer-model-{model_of(sweep, tag)}-{tag}{suffix}.profile.json").exists()
    ]


def _spearman(probes: list[dict]) -> dict:
    """Spearman's rank correlation of the probes' named share with their error."""
    r = spearmanr([p["named"] / p["points"] for p in probes], [p["per_path_mean"] for p in probes])
    return {"rho": r.statistic, "p": r.pvalue, "n": len(probes)}


def split(probes: list[dict], cut: float) -> dict:
    """The probes' mean error on either side of a share of named points."""
    above = [p["per_path_mean"] for p in probes if p["named"] > cut * p["points"]]
    below = [p["per_path_mean"] for p in probes if p["named"] <= cut * p["points"]]
    return {
        "cut": cut,
        "above": len(above),
        "above_mean": statistics.mean(above) if above else None,
        "below": len(below),
        "below_mean": statistics.mean(below) if below else None,
    }


def run() -> dict:
    calls = [(box, folder, call) for box, folder, call, _ in CALLS if call not in RULE_FORM_OUTSIDE]
    calls += [("H100", H100, "h100hog")]
    rows, after = [], []
    for box, folder, call in calls:
        probes, sweeps = instance_of_call(folder, call)
        (after if call in AFTER_RULE else rows).append(
            {
                "box": box,
                "call": call,
                "runner": runner_scatter(sweeps),
                "probes": [_probe_row(p, sweeps) for p in probes],
            }
        )
    own = own_probes([c for c in calls if c[2] not in AFTER_RULE])
    probes = [p for r in rows for p in r["probes"]]
    by_call = spearmanr([r["runner"]["cv_median"] for r in rows], [r["probes"][0]["per_path_mean"] for r in rows])
    return {
        "busy_cv": BUSY_CV,
        "rows": rows,
        # held out: calls made after the rule was set
        "after_rule": after,
        # the probe's rule (kttune.hw.point_quality.BUSY_SHARE) and round cuts either side of it
        "splits": [split(probes, c) for c in sorted({0.03, BUSY_SHARE, 0.06})],
        # held out: the models' own probes (`kttune probe --model`), none of them among the probes above
        "own_probes": own,
        "own_probes_spearman": {**_spearman(own), "over_cut": split(own, BUSY_SHARE)["above"]},
        "spearman": {
            "probes_named_share_vs_error": _spearman(probes),
            "calls_runner_cv_vs_first_probe_error": {"rho": by_call.statistic, "p": by_call.pvalue, "n": len(rows)},
        },
    }


def markdown(doc: dict) -> str:
    lines = [
        "# How busy each instance was, and whether the probe's own checks tell it",
        "",
        "Per call: the runner's scatter (coefficient of variation of each sweep point's 3 interleaved repeats: "
        f"median, 90th percentile, share above {doc['busy_cv']:.0%}); per quick probe, the points its own checks "
        "name (docs/probe.md#disturbed-points) and its error on the call's sweeps (raw cost model, per decoder-layer "
        "forward, mean absolute error per model and path, mean (worst)).",
        "",
        "| box | call | runner points | runner scatter, median / p90 | points above | probes: named points, error |",
        "|---|---|---|---|---|---|",
    ]
    for r in doc["rows"] + doc.get("after_rule", []):
        rn = r["runner"]
        probes = "; ".join(
            f"{p['named']} of {p['points']}, {p['per_path_mean']:.0%} ({p['per_path_max']:.0%})" for p in r["probes"]
        )
        held = " (after the rule)" if r in doc.get("after_rule", []) else ""
        lines.append(
            f"| {r['box']} | {r['call']}{held} | {rn['points']} | {rn['cv_median']:.1%} / {rn['cv_p90']:.1%} | "
            f"{rn['share_over']:.0%} | {probes} |"
        )
    sp = doc["spearman"]
    a, b = sp["probes_named_share_vs_error"], sp["calls_runner_cv_vs_first_probe_error"]
    lines += [
        "",
        f"Spearman over {a['n']} probes, the share of points a probe names against its error: {a['rho']:+.2f} "
        f"(p {a['p']:.2g}). Over {b['n']} calls, the runner's median scatter against the first probe's error: "
        f"{b['rho']:+.2f} (p {b['p']:.2g}). Calls marked after the rule are in neither, nor in the table below.",
        "",
        "| probes naming more than | probes | their mean error | the others | their mean error |",
        "|---|---|---|---|---|",
    ]
    for c in doc["splits"]:
        rule = " (the probe's busy rule)" if c["cut"] == BUSY_SHARE else ""
        lines.append(
            f"| {c['cut']:.0%} of their points{rule} | {c['above']} | {c['above_mean']:.1%} | {c['below']} | "
            f"{c['below_mean']:.1%} |"
        )
    lines.append("")
    after = [(r["call"], p) for r in doc.get("after_rule", []) for p in r["probes"]]
    if after:
        over = split([p for _, p in after], BUSY_SHARE)["above"]
        lines += [
            "## Held out: calls made after the rule",
            "",
            "Their quick probes, read by the rule as set: "
            + "; ".join(
                f"{c}: {p['named']} of {p['points']} named ({p['named'] / p['points']:.1%}), error "
                f"{p['per_path_mean']:.0%} ({p['per_path_max']:.0%})"
                for c, p in after
            )
            + f". Over the busy rule's {BUSY_SHARE:.0%}: {over} of {len(after)}.",
            "",
        ]
    own, sp = doc["own_probes"], doc["own_probes_spearman"]
    lines += [
        "## Held out: the models' own probes",
        "",
        "Each `kttune probe --model M` taken in a call beside M's sweep (none of them among the probes above): the "
        "readings it names and its error on that sweep.",
        "",
        "| box | call | probe | named | error |",
        "|---|---|---|---|---|",
        *(
            f"| {p['box']} | {p['call']} | {p['probe']} | {p['named']} of {p['points']} | {p['per_path_mean']:.0%} |"
            for p in own
        ),
        "",
        f"Spearman over {sp['n']} own probes, the share named against the error: {sp['rho']:+.2f} (p {sp['p']:.2g}); "
        f"{sp['over_cut']} over the busy rule's {BUSY_SHARE:.0%}.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    doc = run()
    write_result(args.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
