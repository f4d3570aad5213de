"""The model's own layer against the quick probe, on one instance: each model's runner sweeps predicted
from the instance's quick probes and from a `kttune probe --model M` of the same instance.

Where the quick probe's reading of an instance is off (the BF16 hybrid path on the H100 box:
docs/cost-model.md#the-instances-own-quick-probe), the product's answers are calibration on the serving
box's own runs and a probe of the model's own layer. This measures the second on one instance: a
`bench_quick_transfer.sh` call (LATE=1: a quick probe, the sweeps, a second quick probe) followed in
the same instance by `kttune probe --model M --methods METHOD --threads 11` of every model swept
(files `quick-transfer-model-M-TAG.profile.json`). Raw cost model (calibration left out), per
decoder-layer forward: mean absolute and signed error per model and path, and the crossovers judged
by `kttune.protocol.check_crossing` (inside the measured interval or within 20%), from the first
quick probe, the median of the quick probes (`kttune profile merge`'s reading) and the model's own
probe; where the model's own probe was taken again later in the same instance
(`quick-transfer-model-M-TAG-again.profile.json`), from that one too, so an own probe's spread on one
instance shows.

    python3 benchmarks/bench_own_layer.py --call benchmarks/results/2026-12-06-h100-pcie5-xeon-amx-16c:h100s \
        --out benchmarks/results/2026-12-06-computed/own-layer-h100s
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench_probe_median import instance_of_call
from bench_hybrid_bias import signed_cell
from bench_quick_transfer import PATHS, RAW_TARGET, crossover_cell, predict
from bench_same_machine import pct
from results_layout import write_result

from kttune.hw.probe_median import median_of_probes
from kttune.hw.profile import load_profile

SOURCES = ("first quick probe", "quick probes' median", "own layer (--model)")
AGAIN = "own layer, again"  # a second `--model` probe of the same instance, where one was taken


def model_of(sweep: Path, tag: str) -> str:
    return sweep.name.removeprefix("quick-transfer-crossover-").removesuffix(f"-{tag}.json")


def measure(folder: Path, tag: str) -> dict:
    """Per model swept in the call, the three sources' predictions (`bench_quick_transfer.predict`)."""
    probes, sweeps = instance_of_call(folder, tag)
    if not probes or not sweeps:
        raise SystemExit(f"{folder}:{tag}: no quick probe or no sweep (bench_quick_transfer.sh's files)")
    quick = [load_profile(p) for p in probes]
    merged = median_of_probes(quick) if len(quick) > 1 else quick[0]
    rows = []
    for sweep in sweeps:
        model = model_of(sweep, tag)
        own_file = folder / f"quick-transfer-model-{model}-{tag}.profile.json"
        if not own_file.exists():
            continue
        own = load_profile(own_file)
        preds = dict(zip(SOURCES, (predict(str(sweep), p) for p in (quick[0], merged, own))))
        again = own_file.with_name(own_file.name.replace(".profile.json", "-again.profile.json"))
        if again.exists():
            preds[AGAIN] = predict(str(sweep), load_profile(again))
        rows.append({"model": model, "sweep": sweep.name, "own_probe": own_file.name, **preds})
    if not rows:
        raise SystemExit(f"{folder}:{tag}: no quick-transfer-model-M-{tag}.profile.json beside the sweeps")
    return {"call": f"{folder.name}:{tag}", "quick_probes": [p.name for p in probes], "rows": rows}


def sources(doc: dict) -> tuple[str, ...]:
    """The sources every row has, and the second own probe where any row has it."""
    return SOURCES + ((AGAIN,) if any(AGAIN in r for r in doc["rows"]) else ())


def summary(doc: dict) -> dict:
    out = {}
    for src in sources(doc):
        errs = [r[src][p]["mape"] for r in doc["rows"] if src in r for p in PATHS if r[src][p]["mape"] is not None]
        cross = [c for r in doc["rows"] if src in r for c in r[src]["crossover"]]
        out[src] = {
            "paths": len(errs),
            "within_target": sum(e <= RAW_TARGET for e in errs),
            "mean": sum(errs) / len(errs),
            "max": max(errs),
            "crossovers": len(cross),
            "crossovers_agree": sum(bool(c["agrees"]) for c in cross),
        }
    return out


def _cell(d: dict | None) -> str:
    return f"{pct(d['mape'])} ({signed_cell(d['signed'])})" if d else "-"


def markdown(doc: dict) -> str:
    srcs = sources(doc)
    lines = [
        "# The model's own layer against the quick probe, one instance",
        "",
        f"Call `{doc['call']}`: quick probes {', '.join(doc['quick_probes'])}; per model its sweep and a "
        "`kttune probe --model M` of the same instance taken after the call's sweeps. Raw cost model, per "
        "decoder-layer forward: mean absolute error (mean signed) per path; crossovers judged by "
        f"kttune.protocol.check_crossing. Target per path: within {RAW_TARGET:.0%}.",
        "",
        "| model | path | " + " | ".join(srcs) + " |",
        "|---|---|" + "---|" * len(srcs),
    ]
    for r in doc["rows"]:
        for p in PATHS:
            lines.append(
                f"| {r['model']} | {p} | " + " | ".join(_cell(r[s][p] if s in r else None) for s in srcs) + " |"
            )
        lines.append(
            f"| {r['model']} | crossover | "
            + " | ".join(crossover_cell(r[s]["crossover"]) if s in r else "-" for s in srcs)
            + " |"
        )
    lines += ["", "| source | paths within target | mean | worst | crossovers that agree |", "|---|---|---|---|---|"]
    for s, v in doc["summary"].items():
        lines.append(
            f"| {s} | {v['within_target']} of {v['paths']} | {v['mean']:.0%} | {v['max']:.0%} | "
            f"{v['crossovers_agree']} of {v['crossovers']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--call", required=True, metavar="FOLDER:TAG", help="the call's results folder and tag")
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    folder, _, tag = args.call.rpartition(":")
    doc = measure(Path(folder), tag)
    doc["summary"] = summary(doc)
    write_result(args.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
