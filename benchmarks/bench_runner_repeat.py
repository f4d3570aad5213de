"""The path runner against itself: the same forced sweep of a model run twice on one machine
instance, minutes apart, in two device calls or two halves of one. How far the second sweep is from
the first is the floor under any prediction of it: a cost model cannot be closer to a measurement
than the measurement is to itself.

Per model, from the pairs of `bench_quick_transfer.sh` sweeps that share a GPU (the instance: one
VM of a GPU box is one physical GPU) and a configuration (method, GPU experts, thread count, sizes):

- per path, the mean and worst |second / first - 1| over the forwards both sweeps ran (the median
  of each forward's interleaved repeats; the same per-forward error as the cost model's tables);
- how many forwards' intervals (their repeats' 95% intervals) overlap;
- the first sweep's crossover taken as a prediction of the second's, and the second's of the first,
  judged by `kttune.protocol.check_crossing` (inside the interval or within 20%), as the cost model's
  crossovers are;
- each quick probe of the two calls (in the order taken, with the host's uptime) predicting each
  call's sweeps (raw cost model, per model and path, mean): whether the probe nearest a sweep in time
  predicts it best.

    python3 benchmarks/bench_runner_repeat.py [--out benchmarks/results/2026-12-05-computed/runner-repeat]
        [--pair FOLDER:TAG1:TAG2 ...]   # further calls (default: the pairs named in PAIRS)
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from bench_probe_median import instance_of_call
from bench_quick_transfer import path_summary, predict
from results_layout import write_result

from kttune.hw.profile import load_profile
from kttune.protocol import check_crossing
from kttune.runner.api import crossover_interval
from kttune.runner.result import runs_in_results

RESULTS = Path("benchmarks/results")
H100 = RESULTS / "2026-12-05-h100-pcie5-xeon-amx-16c"
H200 = RESULTS / "2026-12-04-h200-pcie5-xeon-amx-16c"
H100_7 = RESULTS / "2026-12-07-h100-pcie5-xeon-amx-16c"
# (folder, first tag, second tag): calls on one instance with sweeps of the same models
PAIRS = [
    (H200, "a", "b"),  # GPU-4d9e28bd, two device calls (2026-12-04)
    (H100, "h100a", "h100hog"),  # GPU-6f784c87, two calls; memory neighbours ran beside the second's probe only
    (H100, "h100d", "h100e"),  # GPU-0b310900, one call: probe, sweeps, probe, sweeps, probe
    (H100_7, "h100af", "h100ag"),  # GPU-e99c0bf6 (Sapphire Rapids), two calls: the tool kept the held H100
    (H100_7, "h100ah", "h100ai"),  # GPU-1e06e13b (Emerald Rapids), two calls on one boot, sweeps 6-8 minutes apart
    (H100_7, "h100aj", "h100ak"),  # GPU-83e8be50 (Emerald Rapids), the plan twice on one boot
]
PATHS = ("hybrid", "layerwise")


def sweep(path: Path) -> dict:
    """A sweep's forced single forwards by (path, tokens): (median, low, high) of the repeats'
    K-layer time; its crossover interval (`crossover_interval`), sizes, configuration and GPU."""
    d = json.loads(path.read_text())
    forwards, forced, config = {}, [], None
    for req, runs in runs_in_results(d):
        for r in runs:
            if not r.forced_path or len(r.forwards) != 1:
                continue
            e = r.timing["measured_ms"]
            forwards[(r.forced_path, r.prompt_tokens)] = (e["median"], e["low"], e["high"])
            forced.append(r)
            config = (r.model, r.method, r.gpu_experts, r.cpuinfer)
    return {
        "forwards": forwards,
        "interval": crossover_interval(forced),
        "sizes": sorted({r.prompt_tokens for r in forced}),
        "config": config,
        "device": forced[0].device if forced else "",
    }


def _crossing(a: dict, b: dict) -> dict:
    """`a`'s measured crossover as a prediction of `b`'s."""
    ia, ib = a["interval"], b["interval"]
    if ia is None or ib is None:
        return {"predicted": None, "agrees": None}
    pred = ia.x if ia.x is not None else (a["sizes"][0] if ia.side == "below" else None)
    check = check_crossing(pred, b["sizes"], ib)
    return {"predicted": None if pred is None else round(pred), "measured": check.measured, "agrees": check.agrees}


def _fmt_cross(iv) -> str:
    if iv is None:
        return "n/a"
    if iv.x is None:
        return "at or below the sweep" if iv.side == "below" else "above the sweep"
    return f"{iv.x:.0f} [{iv.low:.0f}-{iv.high:.0f}]"


def compare(folder: Path, first: str, second: str) -> list[dict]:
    rows = []
    for f1 in sorted(folder.glob(f"quick-transfer-crossover-*-{first}.json")):
        f2 = folder / f1.name.replace(f"-{first}.json", f"-{second}.json")
        if not f2.is_file():
            continue
        a, b = sweep(f1), sweep(f2)
        if a["config"] != b["config"]:
            continue
        keys = [k for k in a["forwards"] if k in b["forwards"]]
        per_path = {}
        for p in PATHS:
            dev = [b["forwards"][k][0] / a["forwards"][k][0] - 1 for k in keys if k[0] == p]
            per_path[p] = {
                "forwards": len(dev),
                "mean": statistics.mean(abs(x) for x in dev) if dev else None,
                "signed": statistics.mean(dev) if dev else None,
                "worst": max((abs(x) for x in dev), default=None),
            }
        overlap = sum(
            1 for k in keys if a["forwards"][k][1] <= b["forwards"][k][2] and b["forwards"][k][1] <= a["forwards"][k][2]
        )
        rows.append(
            {
                "model": a["config"][0],
                "method": a["config"][1],
                "gpu_experts": a["config"][2],
                "threads": a["config"][3],
                "first": str(f1),
                "second": str(f2),
                **per_path,
                "forwards": len(keys),
                "intervals_overlap": overlap,
                "crossover_first": _fmt_cross(a["interval"]),
                "crossover_second": _fmt_cross(b["interval"]),
                "first_predicts_second": _crossing(a, b),
                "second_predicts_first": _crossing(b, a),
            }
        )
    return rows


def probes_by_sweep(folder: Path, tags: tuple[str, str]) -> list[dict]:
    """Each quick probe of the calls `tags` (in the order taken) predicting each call's sweeps."""
    probes, _ = instance_of_call(folder, "+".join(tags))
    sweeps = {t: instance_of_call(folder, t)[1] for t in tags}
    out = []
    for path in probes:
        prof = load_profile(path)
        per_call = {t: path_summary([predict(str(s), prof) for s in ss])["per_path_mean"] for t, ss in sweeps.items()}
        out.append({"probe": path.name, "host_uptime_s": prof.provenance.host_uptime_s, "per_path_mean": per_call})
    return out


def summary(rows: list[dict]) -> dict:
    means = [r[p]["mean"] for r in rows for p in PATHS if r[p]["mean"] is not None]
    cross = [r[k]["agrees"] for r in rows for k in ("first_predicts_second", "second_predicts_first")]
    cross = [c for c in cross if c is not None]
    return {
        "sweeps": len(rows),
        "per_path_mean": statistics.mean(means),
        "per_path_max": max(means),
        "per_path_over_15": sum(1 for m in means if m > 0.15),
        "per_path_count": len(means),
        "worst_forward": max(r[p]["worst"] for r in rows for p in PATHS if r[p]["worst"] is not None),
        "forwards": sum(r["forwards"] for r in rows),
        "intervals_overlap": sum(r["intervals_overlap"] for r in rows),
        "crossovers": len(cross),
        "crossovers_agree": sum(cross),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    ap.add_argument("--pair", action="append", default=[], metavar="FOLDER:TAG1:TAG2")
    args = ap.parse_args()
    pairs = [(Path(p.split(":")[0]), *p.split(":")[1:3]) for p in args.pair] or PAIRS
    doc = {"pairs": []}
    lines = [
        "# The path runner against itself",
        "",
        "The same forced sweep run twice on one machine instance, minutes apart (benchmarks/bench_runner_repeat.py). "
        "Per model and path: mean (worst) |second / first - 1| per forward (the median of its 3 interleaved "
        "repeats), the forwards whose repeats' 95% intervals overlap, and each sweep's measured crossover "
        "taken as a prediction of the other's, judged as the cost model's are (kttune.protocol.check_crossing: "
        "inside the interval or within 20%).",
        "",
    ]
    every = []
    for folder, first, second in pairs:
        rows = compare(folder, first, second)
        if not rows:
            raise SystemExit(f"{folder}: no sweeps of one configuration under both {first} and {second}")
        every += rows
        s = summary(rows)
        probes = probes_by_sweep(folder, (first, second))
        doc["pairs"].append(
            {"folder": str(folder), "first": first, "second": second, "rows": rows, "summary": s, "probes": probes}
        )
        lines += [
            f"## {folder.name}: {first} then {second}",
            "",
            "| model | method | hybrid | layerwise | intervals overlap | crossover, first | crossover, second | "
            "each predicts the other |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            cells = [
                f"{100 * r[p]['mean']:.0f}% ({100 * r[p]['worst']:.0f}%)" if r[p]["mean"] is not None else "n/a"
                for p in PATHS
            ]
            agree = " / ".join(
                "n/a" if r[k]["agrees"] is None else ("agrees" if r[k]["agrees"] else "off")
                for k in ("first_predicts_second", "second_predicts_first")
            )
            lines.append(
                f"| {r['model']} | {r['method']} | {cells[0]} | {cells[1]} | {r['intervals_overlap']} of "
                f"{r['forwards']} | {r['crossover_first']} | {r['crossover_second']} | {agree} |"
            )
        lines += [
            "",
            f"Per path: mean {100 * s['per_path_mean']:.0f}%, worst model {100 * s['per_path_max']:.0f}% "
            f"({s['per_path_over_15']} of {s['per_path_count']} over 15%); worst forward {100 * s['worst_forward']:.0f}%; "
            f"intervals overlap {s['intervals_overlap']} of {s['forwards']}; crossovers agree "
            f"{s['crossovers_agree']} of {s['crossovers']}.",
            "",
            "Each quick probe of the two calls predicting each call's sweeps (raw, per model and path, mean):",
            "",
            f"| probe | host up | {first}'s sweeps | {second}'s sweeps |",
            "|---|---|---|---|",
        ]
        for p in probes:
            up = f"{p['host_uptime_s']:.0f} s" if p["host_uptime_s"] is not None else "n/a"
            lines.append(
                f"| {p['probe']} | {up} | {100 * p['per_path_mean'][first]:.0f}% | {100 * p['per_path_mean'][second]:.0f}% |"
            )
        lines.append("")
    s = summary(every)
    doc["summary"] = s
    lines += [
        "## All pairs",
        "",
        f"{s['sweeps']} pairs of sweeps: per model and path, mean {100 * s['per_path_mean']:.0f}%, worst "
        f"{100 * s['per_path_max']:.0f}% ({s['per_path_over_15']} of {s['per_path_count']} over 15%); worst "
        f"forward {100 * s['worst_forward']:.0f}%; intervals overlap {s['intervals_overlap']} of {s['forwards']}; "
        f"crossovers agree {s['crossovers_agree']} of {s['crossovers']}.",
        "",
    ]
    write_result(args.out, doc, "\n".join(lines))


if __name__ == "__main__":
    main()
