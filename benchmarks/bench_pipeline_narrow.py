"""Would a second, narrow layer per method in the quick probe carry the layerwise load to layers it
did not stream? (docs/probe.md#the-pipeline: sglang-kt's loop costs per step as well as per byte;
`benchmarks/bench_pipeline_steps.py` found it in the runner's loads.)

Two steps, so the product is not changed before the GPU box has said:

1. `--measure BASE.profile.json OUT.profile.json` (on the GPU box, after `kttune probe --quick`
   wrote BASE): the layerwise pipeline probe (`kttune.probes.gpu_pipeline.probe_pipeline_layer`,
   the quick probe's configurations, expert fractions and thread counts) over a narrow layer of each
   quick-probe method, NARROW: the representative layer's hidden size with a quarter or a third of
   its intermediate size, no model's shape. OUT is BASE with those curves only (its inventory and
   provenance), so the cost model can read the two together.
2. `--evaluate BASE OUT SWEEP.json ...` (anywhere): the sweeps' layerwise forwards predicted from
   BASE alone and from BASE with OUT's curves added (where a method has two expert sizes the cost
   model separates a cost per step from a cost per byte: `Components._fit_pipeline_steps`).

    python benchmarks/bench_pipeline_narrow.py --measure quick.profile.json narrow.profile.json
    python benchmarks/bench_pipeline_narrow.py --evaluate quick.profile.json narrow.profile.json \\
        crossover-*.json [--out FILE]
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace
from pathlib import Path

from kttune.hw.profile import HardwareProfile, load_profile, save_profile
from kttune.spec.moe_shape import MoeLayerShape

# hidden as the quick probe's representative layer of the method, the intermediate a quarter (a
# third for BF16); the expert count streams about 1 GB, inside the quick probe's 2 GiB cap
NARROW = (
    MoeLayerShape(hidden=2048, inter=256, experts=256, top_k=8, method="BF16", name="narrow-2048x256"),
    MoeLayerShape(hidden=7168, inter=512, experts=96, top_k=8, method="FP8", name="narrow-7168x512"),
    MoeLayerShape(hidden=7168, inter=512, experts=160, top_k=8, method="RAWINT4", name="narrow-7168x512"),
)


def measure(base: HardwareProfile, shapes=NARROW, device: str = "cuda", threads=None) -> HardwareProfile:
    """`base` with its curves replaced by the quick pipeline probe over `shapes` (at the thread counts
    of base's own pipeline curves unless `threads` is given)."""
    from kttune.probes import gpu_pipeline
    from kttune.probes.common import NullReporter

    ts = threads or tuple(sorted({int(c.params["threads"]) for c in base.curves if c.kind == "pipeline"}, reverse=True))
    curves = []
    for shape in shapes:
        got, _, notes = gpu_pipeline.probe_pipeline_layer(
            shape,
            configs=gpu_pipeline.QUICK_CONFIGS,
            repeats=gpu_pipeline.PIPELINE_REPEATS,
            threads_options=ts,
            expert_fractions=gpu_pipeline.QUICK_EXPERT_FRACTIONS,
            max_layer_bytes=gpu_pipeline.QUICK_LAYER_BYTES,
            reporter=NullReporter(),
            device=device,
        )
        for n in notes:
            print(f"note: {n}")
        curves += got
    return replace(base, curves=tuple(curves), calibration=())


def evaluate(base: HardwareProfile, narrow: HardwareProfile, sweeps: list[str]) -> dict:
    """Per sweep, the layerwise error (mean absolute, signed) from `base` and from base + narrow."""
    from bench_quick_transfer import predict

    both = replace(base, curves=base.curves + narrow.curves)
    rows = []
    for s in sweeps:
        a, b = predict(s, base), predict(s, both)
        rows.append({"sweep": Path(s).name, "model": a["model"], "base": a["layerwise"], "with_narrow": b["layerwise"]})
    mean = {k: statistics.mean(r[k]["mape"] for r in rows if r[k]["mape"] is not None) for k in ("base", "with_narrow")}
    return {"rows": rows, "mean": mean}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measure", nargs=2, metavar=("BASE", "OUT"))
    ap.add_argument("--evaluate", nargs="+", metavar="FILE", help="BASE NARROW SWEEP.json ...")
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md (with --evaluate)")
    args = ap.parse_args()
    if args.measure:
        base_path, out = args.measure
        save_profile(measure(load_profile(base_path)), out)
        print(f"wrote {out}")
        return
    if not args.evaluate or len(args.evaluate) < 3:
        raise SystemExit("give --measure BASE OUT, or --evaluate BASE NARROW SWEEP.json ...")
    from results_layout import write_result

    base, narrow = (replace(load_profile(p), calibration=()) for p in args.evaluate[:2])
    doc = evaluate(base, narrow, args.evaluate[2:])
    lines = [
        "# A narrow layer per method in the quick probe",
        "",
        f"Base: `{args.evaluate[0]}`; narrow layers: `{args.evaluate[1]}`. Layerwise forwards per decoder-layer "
        "forward, mean absolute (signed) error, raw cost model.",
        "",
        "| model | from the quick probe | with the narrow layers |",
        "|---|---|---|",
    ]
    for r in doc["rows"]:
        cells = [
            f"{r[k]['mape']:.0%} ({r[k]['signed']:+.0%})" if r[k]["mape"] is not None else "n/a"
            for k in ("base", "with_narrow")
        ]
        lines.append(f"| {r['model']} | {cells[0]} | {cells[1]} |")
    lines += [f"| **mean** | {doc['mean']['base']:.0%} | {doc['mean']['with_narrow']:.0%} |", ""]
    write_result(args.out, doc, "\n".join(lines))


if __name__ == "__main__":
    main()
