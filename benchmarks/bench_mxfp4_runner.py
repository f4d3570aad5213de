"""MXFP4 through the path runner, predicted: gpt-oss's forced sweeps on the GPU box against the cost
model read from the model's own probe, from the same instance's quick probe (no MXFP4 curve: the
pipeline and GPU MoE from RAWINT4's by bytes, the CPU experts from the same-bits stand-in), and from
the shipped profile of the other box.

`benchmarks/bench_mxfp4_runner.sh` runs, in one device call, the GPU tests, then per model its own
probe (`kttune probe --model MODEL --methods MXFP4`) and the runner's forced sweep around its
crossover; sweeps at smaller sizes were run by hand on the same instance when the crossover fell below
the first one (the commands are in benchmarks/results/manifest.json). Every sweep of a model is
pooled: per path, the mean absolute and signed % error per decoder-layer forward; each sweep's
crossover judged by `kttune.protocol.check_crossing` (inside the measured interval or within 20%; a
crossover below a sweep's first size is a bound, and says so); the per-method calibration on the
model's own runs, each forward held out. Writes mxfp4-runner.{json,md} to --out.

    python benchmarks/bench_mxfp4_runner.py --runs DIR --quick QUICK.profile.json [--shipped NAME] [--out DIR]

The sweeps are DIR/mxfp4-runner-crossover-MODEL-*.json, the model's own probe
DIR/mxfp4-runner-model-MODEL-*.profile.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench_quick_transfer import PATHS, predict
from bench_same_machine import pct

from kttune.hw.profile import load_profile
from kttune.hw.registry import resolve_profile
from results_layout import COMPUTED, results_dir

MODELS = ("gpt-oss-20b", "gpt-oss-120b")


def analyse(runs_dir: Path, quick: Path, shipped: str, prefix: str = "mxfp4-runner-") -> list[dict]:
    rows = []
    sources = {"quick": load_profile(quick), "shipped": resolve_profile(shipped, None)}
    for model in MODELS:
        runs = sorted(runs_dir.glob(f"{prefix}crossover-{model}-*.json"))
        own = sorted(runs_dir.glob(f"{prefix}model-{model}-*.profile.json"))
        if not runs or not own:
            continue
        profiles = {"own": load_profile(own[0]), **sources}
        rows.append(
            {
                "model": model,
                "runs": [r.name for r in runs],
                "own_profile": own[0].name,
                **{label: predict([str(r) for r in runs], p) for label, p in profiles.items()},
            }
        )
    return rows


def _cross(cs: list[dict]) -> str:
    out = []
    for c in cs:
        if c["measured"] is None:
            out.append("none measured")
            continue
        if c["interval"]:
            where = f"[{c['interval'][0]:.0f}-{c['interval'][1]:.0f}]"
        else:
            where = "at or below" if c["below_sweep"] else ""
        verdict = "agrees" if c["agrees"] else "off"
        out.append(f"{c['measured']} {where} -> {c['predicted']} ({verdict})")
    return "; ".join(out)


def markdown(rows: list[dict], quick: str, shipped: str) -> str:
    lines = [
        "# MXFP4 through the path runner (gpt-oss), predicted",
        "",
        "Each model's forced sweeps pooled (K = 2 layers, 8 GPU experts, `--kt-cpuinfer 11`, 3 interleaved repeats "
        "each); error per decoder-layer forward, mean absolute (signed: + = predicted slower). Profiles: **own**, "
        f"the model's own `kttune probe --model M --methods MXFP4` in the same call; **quick**, `{quick}`, the same "
        f"instance's quick probe (no MXFP4 curve); **shipped**, `{shipped}` (the other box), calibration left out.",
        "",
        "| model | profile | hybrid | layerwise | calibrated, each forward held out: hybrid / layerwise | crossover per sweep: measured [interval] -> predicted |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        for label in ("own", "quick", "shipped"):
            d = r[label]
            cells = [
                f"{pct(d[p]['mape'])} ({d[p]['signed']:+.0%}, {d[p]['forwards']})"
                if d[p]["mape"] is not None
                else "n/a"
                for p in PATHS
            ]
            cal = " / ".join(pct(d["calibrated_held_out"].get(p)) for p in PATHS)
            lines.append(f"| {r['model']} | {label} | {cells[0]} | {cells[1]} | {cal} | {_cross(d['crossover'])} |")
    lines += ["", "What each profile borrowed (the cost model's notes):", ""]
    for r in rows:
        for label in ("own", "quick", "shipped"):
            for n in r[label]["borrowed"]:
                lines.append(f"- {r['model']}, {label}: {n}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", required=True, type=Path, help="folder with the sweeps and the models' own probes")
    ap.add_argument("--quick", required=True, type=Path, help="the same instance's quick probe")
    ap.add_argument("--shipped", default="h200-pcie5-xeon-amx-16c")
    ap.add_argument("--out", default=None, help=f"default: {COMPUTED} folder of today")
    a = ap.parse_args()
    rows = analyse(a.runs, a.quick, a.shipped)
    out = Path(a.out) if a.out else results_dir(COMPUTED)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"quick": a.quick.name, "shipped": a.shipped, "rows": rows}
    (out / "mxfp4-runner.json").write_text(json.dumps(doc, indent=1) + "\n")
    md = markdown(rows, a.quick.name, a.shipped)
    (out / "mxfp4-runner.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
