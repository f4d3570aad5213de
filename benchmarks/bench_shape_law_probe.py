"""Does the probe's own expert-shape law carry kt-kernel's CPU MoE to expert shapes it did not measure?

Inputs, all from one machine instance: a quick CPU profile whose probe also measured the law's shape
sets (`kttune probe --quick --shape-law`) and probes of models at their own expert shapes
(`kttune probe --quick --model X --methods M`), none of which is in the set. Each model's CPU MoE
curve (256 tokens and more: kt-kernel's matrix kernel) is predicted from the quick profile at the
same thread count with the cost per output element r from four sources: none (flops alone), the
benchmark's constant (`kttune.spec.kt_classes.MATRIX_OUTPUT_FLOPS`), and each shape-law profile's own
measurement (`kttune.hw.shape_law.output_flops_for`, which keeps it only where it predicts a shape
left out of its set better than flops alone). Error: predicted / measured - 1, mean over the points.
`--min-tokens 1` takes every point: kt-kernel's AVX2 and AVX-512 builds have no matrix-kernel switch,
and on a small host a model's own curve may stop below 256 tokens (the probe's time per point).

    python benchmarks/bench_shape_law_probe.py --base QUICK.json [--law LAW.json ...] --models M1.json ... [--min-tokens N] --out FILE.md
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace
from pathlib import Path

from results_layout import write_result

import kttune.spec.kt_classes as kt_classes
from kttune.cost.components import Components
from kttune.hw.profile import HardwareProfile, load_profile
from kttune.hw.registry import load_shipped
from kttune.spec.loader import load_model

# kt-kernel's matrix kernel runs every model here from 4E/k tokens (at most 192, Kimi-K2's 384 experts
# top-8: kttune.spec.kt_classes.kt_matmul_above); the law is about that kernel
MIN_TOKENS = 256


def _model_of(path: Path, probe: HardwareProfile) -> tuple[str, str]:
    """(catalog name, method) of a model probe: its curve's method and the file's name (probe-<model>-<METHOD>)."""
    curve = probe.curves_of("cpu_moe")[0]
    method = curve.params["method"]
    name = path.name.split("probe-")[-1].split(f"-{method}")[0]
    return name, method


def errors(
    base: HardwareProfile, model_probe: HardwareProfile, name: str, method: str, min_tokens: int = MIN_TOKENS
) -> list[float]:
    """The model probe's points at `min_tokens` and more, predicted from `base` (its own curves of the
    model's shape left out: it has none), predicted / measured - 1."""
    model = load_model(name, method)
    comp = Components(base, model, method)
    out = []
    for c in model_probe.curves_of("cpu_moe", method=method):
        th = int(c.params["threads"])
        if th not in comp.cpu_thread_options():
            continue
        e = int(c.params.get("cpu_experts") or c.params["experts"])
        out += [comp.cpu_moe_ms(p.x, e, th) / p.t_ms - 1 for p in c.points if p.x >= min_tokens]
    return out


def source_of(base: HardwareProfile, name: str, method: str) -> str:
    model = load_model(name, method)
    return Components(base, model, method).cpu_output_flops_source


def quick_cpu_on(base: HardwareProfile, shipped: HardwareProfile) -> HardwareProfile:
    """`shipped` with its CPU MoE curves and shape sets replaced by `base`'s CPU MoE curves (its shape
    sets left out): what the cost model reads the models' CPU MoE from."""
    cpu = tuple(c for c in base.curves if c.kind == "cpu_moe")
    return replace(shipped, curves=tuple(c for c in shipped.curves if c.kind not in ("cpu_moe", "cpu_moe_shape")) + cpu)


def run(
    base_path: Path, law_paths: list[Path], model_paths: list[Path], gpu_from: str, min_tokens: int = MIN_TOKENS
) -> dict:
    """The base's CPU MoE curves, with the GPU curves of the shipped profile `gpu_from` (the cost model
    needs them; the CPU MoE prediction does not read them)."""
    plain = quick_cpu_on(load_profile(base_path), load_shipped(gpu_from))
    laws = {p.name: load_profile(p) for p in law_paths}
    table = dict(kt_classes.MATRIX_OUTPUT_FLOPS)
    rows = []
    for mp in model_paths:
        probe = load_profile(mp)
        name, method = _model_of(mp, probe)
        row = {"model": name, "method": method, "errors": {}, "r": {}}
        try:
            kt_classes.MATRIX_OUTPUT_FLOPS = {}
            row["errors"]["flops alone"] = errors(plain, probe, name, method, min_tokens)
            kt_classes.MATRIX_OUTPUT_FLOPS = table
            row["errors"]["constant"] = errors(plain, probe, name, method, min_tokens)
            row["r"]["constant"] = source_of(plain, name, method)
            for law_name, law in laws.items():
                shapes = tuple(c for c in law.curves if c.kind == "cpu_moe_shape")
                with_law = replace(plain, curves=plain.curves + shapes)
                row["errors"][law_name] = errors(with_law, probe, name, method, min_tokens)
                row["r"][law_name] = source_of(with_law, name, method)
        finally:
            kt_classes.MATRIX_OUTPUT_FLOPS = table
        rows.append(row)
    return {
        "base": str(base_path),
        "gpu_from": gpu_from,
        "laws": [str(p) for p in law_paths],
        "min_tokens": min_tokens,
        "rows": rows,
    }


def markdown(doc: dict) -> str:
    sources = list(doc["rows"][0]["errors"]) if doc["rows"] else []
    n = doc.get("min_tokens", MIN_TOKENS)
    reach = f"at {n:,} tokens and more" if n > 1 else "at every point"
    lines = [
        "# The probe's expert-shape law against models' own CPU MoE curves",
        "",
        f"Base: the CPU MoE curves of `{doc['base']}` (its shape sets left out), GPU curves of "
        f"`{doc['gpu_from']}`; shape sets: "
        + ", ".join(f"`{p}`" for p in doc["laws"])
        + f". Each model's kt-kernel MoE {reach}, predicted from the base's curves: mean "
        "error (signed mean in brackets; + = predicted slower).",
        "",
        "| model | method | " + " | ".join(sources) + " |",
        "|---|---|" + "---|" * len(sources),
    ]
    summary: dict[str, list[float]] = {s: [] for s in sources}
    for r in doc["rows"]:
        cells = []
        for s in sources:
            e = r["errors"][s]
            if not e:
                cells.append("n/a")
                continue
            mae = statistics.mean(abs(x) for x in e)
            summary[s].append(mae)
            cells.append(f"{mae:.0%} ({statistics.mean(e):+.0%})")
        lines.append(f"| {r['model']} | {r['method']} | " + " | ".join(cells) + " |")
    lines.append(
        "| **mean (worst)** | | "
        + " | ".join(f"{statistics.mean(v):.0%} ({max(v):.0%})" if v else "n/a" for v in summary.values())
        + " |"
    )
    lines += ["", "The cost per output element each source gave, per model's class:", ""]
    for r in doc["rows"]:
        lines.append(f"- {r['model']} {r['method']}: " + "; ".join(f"{k}: {v}" for k, v in r["r"].items()))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, type=Path)
    ap.add_argument("--law", action="append", default=[], type=Path)
    ap.add_argument("--models", nargs="+", required=True, type=Path)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--gpu-from", default="h200-pcie5-xeon-amx-16c", help="shipped profile lending the GPU curves")
    ap.add_argument("--min-tokens", type=int, default=MIN_TOKENS, help="the models' points from this many tokens")
    a = ap.parse_args()
    doc = run(a.base, a.law or [a.base], a.models, a.gpu_from, a.min_tokens)
    md = markdown(doc)
    write_result(a.out, doc, md)


if __name__ == "__main__":
    main()
