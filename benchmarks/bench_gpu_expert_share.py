"""Mixtral-8x7B's hybrid path with 2 of its 8 experts on the GPU: does the CPU's time fall with them?

The quick probes read Mixtral-8x7B's hybrid path fast on 22 of 23 Emerald Rapids sweeps
(`cpu-generation.md`), and it is the one model of the sweeps whose GPU experts are a large share of
its experts (2 of 8; the others 8 of 128-512). The cost model charges the CPU for the experts left to
it (`Components.cpu_moe_ms(tokens, cpu_experts, threads)`: 6 of 8). Three readings, from committed
files and one local measurement:

- sweeps: every committed call's Mixtral-8x7B sweeps (`bench_cpu_generation.CALLS`, raw cost model
  from the call's first quick probe): each hybrid forward's MoE time over the model's CPU term with
  the experts left to the CPU, and over the same term with all 8 (the model without the GPU's share);
- runner without GPU experts: the calls whose probe-runner gap diagnostic ran the runner at 0 GPU
  experts at the sweeps' sizes (`quick-transfer-gap-TAG.json`, minutes apart from the sweeps):
  sweep with 2 over runner with 0 (0.75 if the CPU's time falls with its share of the weights);
- kt-kernel's mask (with `--measure`, on this host): one Mixtral-8x7B layer (BF16, random weights,
  uniform routing) timed with no expert masked and with 2 masked (`KtMoeLayer.gpu_mask`), in
  alternating rounds, 2 threads: masked over unmasked.

    python3 benchmarks/bench_gpu_expert_share.py [--measure] --out benchmarks/results/2026-12-06-computed/gpu-expert-share
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench_cpu_generation import CALLS, without_shape_sets
from bench_probe_median import instance_of_call
from bench_transfer import load_points
from results_layout import write_result

from kttune.hw.profile import load_profile
from kttune.probes.common import quantiles

MODEL = "mixtral-8x7b"
EXPERTS = 8


def sweep_rows() -> list[dict]:
    """Per hybrid forward of every call's Mixtral sweeps: measured MoE over the model's CPU term."""
    rows = []
    for box, folder, call, _ in CALLS:
        probes, sweeps = instance_of_call(folder, call)
        mine = [s for s in sweeps if f"crossover-{MODEL}-" in s.name]
        if not (probes and mine):
            continue
        prof = without_shape_sets(load_profile(probes[0]))
        for s in mine:
            points, _, _ = load_points([str(s)], prof)
            for p in points:
                if p.path != "hybrid":
                    continue
                cpu_experts = EXPERTS - p.gpu_experts
                moe = p.measured_ms - p.other_ms - p.terms.get("copies", 0.0)
                term = p.terms["experts"]
                rows.append(
                    {
                        "box": box,
                        "call": call,
                        "sweep": s.name,
                        "tokens": p.tokens,
                        "gpu_experts": p.gpu_experts,
                        "measured_moe_ms": moe,
                        "cpu_term_ms": term,
                        "over_cpu_term": moe / term,
                        "over_all_experts_term": moe / (term * EXPERTS / cpu_experts),
                    }
                )
    return rows


def runner_without_gpu_experts(rows: list[dict]) -> list[dict]:
    """Sweep (2 GPU experts) over the gap diagnostic's runner (0) at the same tokens, per call."""
    out = []
    for _, folder, call, _ in CALLS:
        gap = folder / f"quick-transfer-gap-{call}.json"
        if not gap.is_file():
            continue
        runner0 = {
            r["tokens"]: r["median_ms"]
            for r in json.loads(gap.read_text())["rows"]
            if r["model"] == MODEL and r["candidate"].startswith("runner end to end")
        }
        for r in rows:
            if r["call"] == call and r["tokens"] in runner0:
                out.append(
                    {
                        "call": call,
                        "tokens": r["tokens"],
                        "sweep_ms": r["measured_moe_ms"],
                        "runner_0_ms": runner0[r["tokens"]],
                        "ratio": r["measured_moe_ms"] / runner0[r["tokens"]],
                    }
                )
    return out


def measure_mask(tokens: int = 256, masked: int = 2, rounds: int = 6, threads: int = 2) -> dict:
    """kt-kernel's own time for one Mixtral layer with `masked` experts masked against none."""
    import torch

    from kttune.kernels.expert_weights import HostExperts
    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.kernels.kt_moe import KtMoeLayer
    from kttune.kernels.routing import random_routing
    from kttune.spec.loader import load_model

    spec = load_model(MODEL, "BF16")
    host = HostExperts.random("BF16", spec.hidden_size, spec.moe_intermediate_size, spec.num_experts, seed=0)
    with quiet_stdout(to_stderr=True):
        layer = KtMoeLayer(host, top_k=spec.top_k, threads=threads, max_tokens=max(64, tokens))
    ids, w = random_routing(tokens, spec.num_experts, spec.top_k, seed=tokens)
    x = (torch.randn(tokens, spec.hidden_size, generator=torch.Generator().manual_seed(0)) * 0.5).to(torch.bfloat16)
    out = torch.empty_like(x)

    def timed(n: int) -> float:
        layer.set_gpu_experts(n)
        layer.forward(x, ids, w, out)  # warm-up
        xs = []
        for _ in range(3):
            t0 = time.perf_counter()
            layer.forward(x, ids, w, out)
            xs.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(xs)

    got: dict[int, list[float]] = {0: [], masked: []}
    for r in range(rounds):
        for n in (0, masked) if r % 2 == 0 else (masked, 0):
            got[n].append(timed(n))
    layer.close()
    ratios = [b / a for a, b in zip(got[0], got[masked])]
    return {
        "tokens": tokens,
        "masked": masked,
        "threads": threads,
        "unmasked_ms": got[0],
        "masked_ms": got[masked],
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "by_bytes": (spec.num_experts - masked) / spec.num_experts,
    }


def markdown(doc: dict) -> str:
    s = doc["sweeps"]
    lines = [
        "# Mixtral-8x7B's hybrid path: does the CPU's time fall with the experts on the GPU?",
        "",
        f"{s['forwards']} hybrid forwards of {s['sweeps']} sweeps ({s['calls']} calls, both boxes, 2 of 8 experts on "
        "the GPU), raw cost model from each call's first quick probe. Measured MoE time per layer:",
        "",
        "| over | median | p10 | p90 |",
        "|---|---|---|---|",
        f"| the model's CPU term, 6 experts (as charged) | {s['over_cpu_term']['median']:.2f} | "
        f"{s['over_cpu_term']['p10']:.2f} | {s['over_cpu_term']['p90']:.2f} |",
        f"| the same term for all 8 experts | {s['over_all_experts_term']['median']:.2f} | "
        f"{s['over_all_experts_term']['p10']:.2f} | {s['over_all_experts_term']['p90']:.2f} |",
        "",
        "Sweep (2 GPU experts) over the runner with none (the gap diagnostic, same instance, minutes apart):",
        "",
        "| call | tokens | sweep ms | runner, 0 GPU experts, ms | ratio |",
        "|---|---|---|---|---|",
        *(
            f"| {r['call']} | {r['tokens']} | {r['sweep_ms']:.1f} | {r['runner_0_ms']:.1f} | {r['ratio']:.2f} |"
            for r in doc["runner_without_gpu_experts"]
        ),
        "",
    ]
    m = doc.get("mask")
    if m:
        lines += [
            f"kt-kernel's mask on {doc.get('mask_host', 'this host')}: one Mixtral-8x7B layer at {m['tokens']} tokens, "
            f"{m['threads']} threads, {m['masked']} of 8 experts masked against none, {len(m['masked_ms'])} alternating "
            f"rounds: {m['ratio_median']:.3f} ({m['ratio_min']:.3f}-{m['ratio_max']:.3f}; by the weights' share "
            f"{m['by_bytes']:.3f}).",
            "",
        ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    ap.add_argument("--measure", action="store_true", help="also time kt-kernel's mask on this host")
    args = ap.parse_args()
    rows = sweep_rows()
    summary = {
        "forwards": len(rows),
        "sweeps": len({r["sweep"] for r in rows}),
        "calls": len({r["call"] for r in rows}),
    }
    for key in ("over_cpu_term", "over_all_experts_term"):
        xs = [r[key] for r in rows]
        p10, median, p90 = quantiles(xs)
        summary[key] = {"median": median, "p10": p10, "p90": p90}
    doc = {"sweeps": summary, "rows": rows, "runner_without_gpu_experts": runner_without_gpu_experts(rows)}
    if args.measure:
        from kttune.probes.inventory import host_line

        doc["mask"] = measure_mask()
        doc["mask_host"] = host_line()
    write_result(args.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
