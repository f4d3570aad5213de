"""Is sglang-kt's layerwise loop a cost per step plus a cost per byte? The path runner's own loads,
held out by layer.

A quick probe streams one layer per method (Qwen3-30B-A3B for BF16, DeepSeek-V3 for FP8) and the cost
model reads every other layer of the method from it by the bytes streamed. If the loop also costs
something per expert it streams (the host's step: a Python iteration, the events it waits on, the
copy it launches, kt-kernel's task), a layer of small experts reads fast from a layer of larger ones
and a layer of huge ones slow. The runner's layerwise forwards measure the loop itself, so on each
instance whose sweeps cover a method's layers of several expert sizes:

- the layer's load: per layerwise forward the runner's MoE time less the GPU MoE the cost model gives
  for it (a few ms; `Components.gpu_moe_ms` of that instance's quick profile), the median over the
  sweep's layerwise forwards;
- bytes only: each layer predicted from the quick probe's layer of the method (its load over its
  bytes, times the layer's bytes), as the cost model reads a quick profile;
- steps and bytes: load = alpha x experts streamed + beta x bytes, fitted on two layers (BF16:
  Qwen3-30B-A3B and GLM-4.5-Air; FP8: DeepSeek-V3 and MiniMax-M2.1), the others held out.

    python3 benchmarks/bench_pipeline_steps.py --out benchmarks/results/2026-12-05-computed/pipeline-steps
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

from results_layout import write_result

from kttune.calibration.runner import launch_config
from kttune.cost.components import Components
from kttune.cost.prefill import streamed_experts_per_layer
from kttune.hw.profile import load_profile
from kttune.runner.result import runs_in_results
from kttune.spec.loader import load_model

H100 = Path("benchmarks/results/2026-12-05-h100-pcie5-xeon-amx-16c")
INSTANCES = ("h100a", "h100c", "h100f")  # the H100 calls whose sweeps cover nine models
# per method: the quick probe's layer, the second layer the law is fitted on, and the held-out layers
METHODS = {
    "BF16": ("qwen3-30b-a3b", "glm-4.5-air", ("qwen3-next-80b-a3b", "mixtral-8x7b")),
    "FP8": ("deepseek-v3", "minimax-m2.1", ("qwen3-235b-a22b-fp8", "glm-4.7")),
}


def loads(tag: str) -> dict[str, dict]:
    """Per model: experts streamed, bytes streamed (GB) and the median layer load (ms) of its sweep."""
    quick = replace(load_profile(H100 / f"quick-transfer-{tag}.profile.json"), calibration=())
    out = {}
    for path in sorted(H100.glob(f"quick-transfer-crossover-*-{tag}.json")):
        for req, runs in runs_in_results(json.loads(path.read_text())):
            method = runs[0].method
            spec = load_model(req["model"], method)
            c = Components(quick, spec, method, 1)
            ms = [
                f.mean_moe_ms - c.gpu_moe_ms(f.tokens, spec.num_experts)
                for r in runs
                for f in r.forwards
                if f.path == "layerwise"
            ]
            if not ms:
                continue
            n = streamed_experts_per_layer(c, launch_config(runs[0]))
            out[spec.name] = {
                "method": method,
                "experts": n,
                "gb": n * c.cpu_bytes_per_expert / 1e9,
                "expert_mb": c.cpu_bytes_per_expert / 1e6,
                "load_ms": statistics.median(ms),
            }
    return out


def law(a: dict, b: dict) -> tuple[float, float]:
    """(alpha ms per step, beta ms per GB) through two layers' loads."""
    det = a["experts"] * b["gb"] - b["experts"] * a["gb"]
    alpha = (a["load_ms"] * b["gb"] - b["load_ms"] * a["gb"]) / det
    beta = (a["experts"] * b["load_ms"] - b["experts"] * a["load_ms"]) / det
    return alpha, beta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    doc: dict = {"instances": {}}
    lines = [
        "# sglang-kt's layerwise loop: a cost per step and a cost per byte",
        "",
        "benchmarks/bench_pipeline_steps.py. The path runner's layer loads (its layerwise MoE time less the GPU "
        "MoE), median over each sweep's layerwise forwards, 11 threads, H100 instances. Held-out layers "
        "predicted by bytes alone from the quick probe's layer of the method, and by alpha x experts + beta x "
        "bytes fitted on two layers.",
        "",
        "| instance | method | fitted on | alpha, ms a step | beta, ms a GB | held out | experts x MB | load, ms | "
        "bytes only | steps and bytes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    errs: dict[str, list[float]] = {"bytes_only": [], "steps_and_bytes": []}
    for tag in INSTANCES:
        data = loads(tag)
        inst = {"layers": data, "methods": {}}
        for method, (base, second, held) in METHODS.items():
            alpha, beta = law(data[base], data[second])
            per_gb = data[base]["load_ms"] / data[base]["gb"]
            rows = []
            for name in held:
                d = data[name]
                by_bytes = per_gb * d["gb"]
                by_law = alpha * d["experts"] + beta * d["gb"]
                e1, e2 = by_bytes / d["load_ms"] - 1, by_law / d["load_ms"] - 1
                errs["bytes_only"].append(abs(e1))
                errs["steps_and_bytes"].append(abs(e2))
                rows.append({"model": name, "bytes_only": e1, "steps_and_bytes": e2})
                lines.append(
                    f"| {tag} | {method} | {base} + {second} | {alpha:.3f} | {beta:.1f} | {name} | "
                    f"{d['experts']} x {d['expert_mb']:.1f} | {d['load_ms']:.1f} | {e1:+.0%} | {e2:+.0%} |"
                )
            inst["methods"][method] = {"alpha_ms": alpha, "beta_ms_per_gb": beta, "held_out": rows}
        doc["instances"][tag] = inst
    doc["mean_abs"] = {k: statistics.mean(v) for k, v in errs.items()}
    lines += [
        "",
        f"Mean absolute error over the {len(errs['bytes_only'])} held-out layers: bytes only "
        f"{doc['mean_abs']['bytes_only']:.0%}, steps and bytes {doc['mean_abs']['steps_and_bytes']:.0%}.",
        "",
    ]
    write_result(args.out, doc, "\n".join(lines))


if __name__ == "__main__":
    main()
