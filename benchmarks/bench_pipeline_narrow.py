"""Would a second, narrow layer per method in the quick probe carry the layerwise load to layers it
did not stream? (docs/probe.md#the-pipeline: sglang-kt's loop costs per step as well as per byte;
`benchmarks/bench_pipeline_steps.py` found it in the runner's loads.)

Two steps, so the product was not changed before the GPU box had said (it did on three H100
instances, 2026-12-05: the quick probe streams the BF16 and FP8 narrow layers since,
`kttune.probes.gpu_common.NARROW_LAYERS`):

1. `--measure BASE.profile.json OUT.profile.json` (on the GPU box, after `kttune probe --quick`
   wrote BASE): the layerwise pipeline probe (`kttune.probes.gpu_pipeline.probe_pipeline_layer`,
   the quick probe's configurations, expert fractions and thread counts) over a narrow layer of each
   quick-probe method, NARROW: the representative layer's hidden size with a quarter or a third of
   its intermediate size, no model's shape. OUT is BASE with those curves only (its inventory and
   provenance), so the cost model can read the two together.
2. `--call FOLDER:TAG ...` (anywhere): for each `bench_quick_transfer.sh` call run with NARROW=1,
   each of its quick probes (BASE) predicting the call's sweeps' layerwise forwards alone and with
   its narrow layers (OUT) added (where a method has two expert sizes the cost
   model separates a cost per step from a cost per byte: `Components._fit_pipeline_steps`).

    python benchmarks/bench_pipeline_narrow.py --measure quick.profile.json narrow.profile.json
    python benchmarks/bench_pipeline_narrow.py --call RESULTS_FOLDER:h100g --call ... [--out FILE]
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace
from pathlib import Path

from kttune.hw.profile import HardwareProfile, load_profile, save_profile
from kttune.probes.gpu_common import NARROW_LAYERS
from kttune.spec.moe_shape import MoeLayerShape

# the quick probe's narrow layers (shipped in it since 2026-12-05: NARROW_LAYERS, BF16 and FP8) and the
# RAWINT4 one measured beside them: the representative layer's hidden size, a third (BF16) or a quarter of its
# intermediate size; the expert count streams about 1 GB, inside the quick probe's 2 GiB cap
NARROW = NARROW_LAYERS + (
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
    """Per sweep, the layerwise error (mean absolute, signed) from `base` (its own narrow layers left
    out, where it is a quick profile that has them) and from base + narrow."""
    from bench_quick_transfer import predict

    base = replace(base, curves=tuple(c for c in base.curves if not _narrow(c)))
    both = replace(base, curves=base.curves + tuple(c for c in narrow.curves if c.kind == "pipeline"))
    rows = []
    for s in sweeps:
        a, b = predict(s, base), predict(s, both)
        rows.append({"sweep": Path(s).name, "model": a["model"], "base": a["layerwise"], "with_narrow": b["layerwise"]})
    mape = {k: [r[k]["mape"] for r in rows if r[k]["mape"] is not None] for k in ("base", "with_narrow")}
    return {
        "rows": rows,
        "mean": {k: statistics.mean(v) for k, v in mape.items()},
        "worst": {k: max(v) for k, v in mape.items()},
    }


def _narrow(c) -> bool:
    """A pipeline curve of one of NARROW's layers (by shape and method)."""
    key = (c.params.get("hidden"), c.params.get("inter"), c.params.get("method"))
    return c.kind == "pipeline" and key in {(n.hidden, n.inter, n.method) for n in NARROW}


def call_probes(folder: Path, tag: str) -> list[tuple[str, Path, Path]]:
    """A `bench_quick_transfer.sh` call run with NARROW=1: (label, quick profile, narrow profile) per
    probe it took (the first, then -again / -late where taken)."""
    out = []
    for suffix in ("", "-again", "-late"):
        q, n = (
            folder / f"quick-transfer-{tag}{suffix}.profile.json",
            folder / f"quick-transfer-narrow-{tag}{suffix}.profile.json",
        )
        if q.is_file() and n.is_file():
            out.append((f"{tag}{suffix or ' first'}", q, n))
    return out


def _cell(e: dict) -> str:
    return f"{e['mape']:.0%} ({e['signed']:+.0%})" if e["mape"] is not None else "n/a"


def report(calls: list[str]) -> tuple[dict, str]:
    """Every probe of the `FOLDER:TAG` calls predicting its call's sweeps with and without its narrow
    layers: a summary row per probe, then the per-model rows."""
    probes = []
    for call in calls:
        folder, _, tag = call.rpartition(":")
        sweeps = [str(p) for p in sorted(Path(folder).glob(f"quick-transfer-crossover-*-{tag}.json"))]
        for label, q, n in call_probes(Path(folder), tag):
            doc = evaluate(replace(load_profile(q), calibration=()), load_profile(n), sweeps)
            probes.append({"probe": label, "quick": str(q), "narrow": str(n), **doc})
    better = sum(p["mean"]["with_narrow"] < p["mean"]["base"] for p in probes)
    lines = [
        "# A narrow layer per method in the quick probe",
        "",
        "Each quick probe predicting the runner's layerwise forwards of its call (nine models, forced sweeps, "
        "3 interleaved repeats, 11 threads) from its representative layers alone and with the narrow layers "
        "timed straight after it (`--measure`; BF16 2048x256, FP8 and RAWINT4 7168x512). Per model: mean "
        "absolute (signed) error per decoder-layer forward, raw cost model (no calibration).",
        "",
        f"With the narrow layers the mean error was lower for {better} of {len(probes)} probes.",
        "",
        "Qwen3-30B-A3B, DeepSeek-V3 and Kimi-K2-Thinking are the quick probe's own layers: read as measured "
        "either way (`Components._pipeline_extrapolations`), their errors are the probe's reading of the "
        "instance. The others are read from two expert sizes of their method, a cost per step apart from a "
        "cost per byte (`Components._fit_pipeline_steps`). No bundled model streams a RAWINT4 layer other "
        "than Kimi-K2's, so the RAWINT4 narrow layer changes no row here; it is not in the quick probe.",
        "",
        "| probe | mean, quick probe | mean, with narrow | worst model, quick probe | worst model, with narrow |",
        "|---|---|---|---|---|",
    ]
    for p in probes:
        m, w = p["mean"], p["worst"]
        lines.append(
            f"| {p['probe']} | {m['base']:.0%} | {m['with_narrow']:.0%} | {w['base']:.0%} | {w['with_narrow']:.0%} |"
        )
    lines += ["", "| probe | model | quick probe | with narrow |", "|---|---|---|---|"]
    for p in probes:
        for r in p["rows"]:
            lines.append(f"| {p['probe']} | {r['model']} | {_cell(r['base'])} | {_cell(r['with_narrow'])} |")
    return {"probes": probes, "better": better}, "\n".join(lines + [""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measure", nargs=2, metavar=("BASE", "OUT"))
    ap.add_argument(
        "--call",
        action="append",
        default=[],
        metavar="FOLDER:TAG",
        help="a bench_quick_transfer.sh call run with NARROW=1",
    )
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md (with --call)")
    args = ap.parse_args()
    if args.measure:
        base_path, out = args.measure
        save_profile(measure(load_profile(base_path)), out)
        print(f"wrote {out}")
        return
    if not args.call:
        raise SystemExit("give --measure BASE OUT, or --call FOLDER:TAG ...")
    from results_layout import write_result

    doc, text = report(args.call)
    write_result(args.out, doc, text)


if __name__ == "__main__":
    main()
