"""Where the BF16 hybrid path's error sits: in what grows with tokens, or in what does not.

Per sweep of a BF16 model on every quick-transfer call of both GPU boxes (`bench_cpu_generation.CALLS`):
the path runner's forced hybrid forwards (per decoder layer) and the raw cost model's prediction of
each from the call's quick probes (their point-by-point median where the call took several,
`kttune.hw.probe_median.median_of_probes`; a probe's own shape-law sets left out, as
`bench_cpu_generation` reads them), each fitted by a line over the sweep's prompt lengths. At these
lengths every CPU expert is touched, so a cost per byte of the CPU experts' weights does not grow with
tokens and sits in the line's intercept; the flops sit in its slope. Per sweep: both intercepts, both
slopes (ms per 1,000 tokens), the intercept gap (measured - predicted) and the gap per GB of the CPU
experts' weights (the experts the run left on the CPU x an expert's bytes).

Beside it, the cold timings of the quick layer (`bench_cpu_moe_cold.py`, layer cycled past twice the
last-level cache; docs/probe.md#the-quick-layer-in-the-cache): the H200 box's instance of 2026-12-04
(11 threads, two rounds) and the development VM (2026-12-07, a 2-vCPU Xeon with AMX, 1 thread, three
rounds, the third after the own layers). Per token count, (cold - warm) over the GB of experts the
call touched (uniform routing, `kttune.hw.features.expected_experts_touched`): what streaming them
from DRAM added per GB. And what that per-GB cost does to the same machine's own BF16 layers
(`kttune probe --model`, kt-kernel MoE at 256 tokens and more, `cpu-moe-cold-probe-*-BF16`),
predicted from the warm quick curves of each round (the cost model's CPU MoE term,
`Components.cpu_moe_ms`) alone and with the round's median per-GB cost (over 4-256 tokens) times the
GB the model's call touches: a check at the kernel, not a change to the model.

    python3 benchmarks/bench_hybrid_intercept.py --out benchmarks/results/2026-12-07-computed/hybrid-intercept
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
from bench_cpu_generation import CALLS, generation, without_shape_sets
from bench_probe_median import instance_of_call
from bench_shape_law_probe import MIN_TOKENS, _model_of, quick_cpu_on
from bench_transfer import load_points
from results_layout import RESULTS, write_result

from kttune.cost.components import Components
from kttune.hw.dram_stream import cycled_bytes, stream_ms_per_gb, stream_rate
from kttune.hw.features import expected_experts_touched
from kttune.hw.probe_median import median_of_probes
from kttune.hw.profile import load_profile
from kttune.hw.registry import load_shipped
from kttune.spec.loader import load_model

# the cold timings: (folder, what ran them)
COLD_RUNS = (
    (RESULTS / "2026-12-04-h200-pcie5-xeon-amx-16c", "H200 box, 2026-12-04"),
    (RESULTS / "2026-12-07-xeon-amx-2c", "development VM (2-vCPU Xeon, AMX), 2026-12-07"),
)
BF16_BYTES = 2


def call_profile(probes: list[Path]):
    """The call's quick probes as the cost model reads them: their median where there are several."""
    profs = [without_shape_sets(load_profile(p)) for p in probes]
    return profs[0] if len(profs) == 1 else median_of_probes(profs)


def sweep_row(sweep: Path, profile) -> dict | None:
    """One sweep's BF16 hybrid forwards: measured and predicted lines over tokens (None where the sweep
    is not BF16 or has fewer than three lengths)."""
    points, _, _ = load_points([str(sweep)], profile)
    hy = [p for p in points if p.path == "hybrid" and p.method == "BF16"]
    if len({p.tokens for p in hy}) < 3:
        return None
    x = np.array([p.tokens for p in hy], float)
    slope_m, icpt_m = np.polyfit(x, [p.measured_ms for p in hy], 1)
    slope_p, icpt_p = np.polyfit(x, [p.raw_ms for p in hy], 1)
    spec = load_model(hy[0].model, "BF16")
    cpu_gb = (spec.num_experts - hy[0].gpu_experts) * spec.params_per_expert * BF16_BYTES / 1e9
    gap = float(icpt_m - icpt_p)
    return {
        "model": hy[0].model,
        "tokens": sorted({int(t) for t in x}),
        "gpu_experts": hy[0].gpu_experts,
        "intercept_measured_ms": float(icpt_m),
        "intercept_predicted_ms": float(icpt_p),
        "slope_measured_ms_per_1k": float(slope_m) * 1e3,
        "slope_predicted_ms_per_1k": float(slope_p) * 1e3,
        "slope_ratio": float(slope_p / slope_m) if slope_m > 0 else None,
        "gap_ms": gap,
        "cpu_expert_gb": cpu_gb,
        "gap_ms_per_gb": gap / cpu_gb,
        # each forward: tokens, measured and raw predicted ms
        "forwards": [[int(p.tokens), p.measured_ms, p.raw_ms] for p in hy],
    }


def what_if(rows: list[dict], per_gb: float) -> list[dict]:
    """Per box, CPU and model: the sweeps' hybrid error (mean absolute over a sweep's forwards, as the
    transfer tables read it) as predicted, and with `per_gb` ms per GB of the CPU experts' weights added
    to every forward (every CPU expert is touched at these lengths). A what-if: one cold timing's rate
    (another instance's, another day) lent to every instance, which the cost model does not do."""
    out = []
    for key in sorted({(r["box"], r["generation"], r["series_top"], r["model"]) for r in rows}):
        rs = [r for r in rows if (r["box"], r["generation"], r["series_top"], r["model"]) == key]
        ratios = [r["slope_ratio"] for r in rs if r["slope_ratio"] is not None]
        before = [statistics.mean(abs(p / m - 1) for _, m, p in r["forwards"]) for r in rs]
        after = [
            statistics.mean(abs((p + per_gb * r["cpu_expert_gb"]) / m - 1) for _, m, p in r["forwards"]) for r in rs
        ]
        out.append(
            {
                "box": key[0],
                "generation": key[1],
                "series_top": key[2],
                "model": key[3],
                "sweeps": len(rs),
                "slope_ratio": statistics.median(ratios) if ratios else None,
                "mean_abs": [statistics.mean(before), statistics.mean(after)],
                "within_15": [sum(b <= 0.15 for b in before), sum(a <= 0.15 for a in after)],
            }
        )
    return out


def runner_rows() -> list[dict]:
    rows = []
    for box, folder, call, machine in CALLS:
        probes, sweeps = instance_of_call(folder, call)
        if not (probes and sweeps and machine.is_file()):
            continue
        prof = call_profile(probes)
        gen = generation(machine)
        # how far up in tokens the call's probes timed the quick BF16 layer (1,024 since 2026-12-07)
        top = int(max((q.x for c in prof.curves_of("cpu_moe", method="BF16") for q in c.points), default=0))
        for s in sweeps:
            r = sweep_row(s, prof)
            if r:
                rows.append({"box": box, "call": call, "generation": gen, "series_top": top, **r})
    return rows


def grouped(rows: list[dict]) -> list[dict]:
    out = []
    for key in sorted({(r["box"], r["generation"], r["model"]) for r in rows}):
        rs = [r for r in rows if (r["box"], r["generation"], r["model"]) == key]
        per_gb = [r["gap_ms_per_gb"] for r in rs]
        ratios = [r["slope_ratio"] for r in rs if r["slope_ratio"] is not None]
        out.append(
            {
                "box": key[0],
                "generation": key[1],
                "model": key[2],
                "sweeps": len(rs),
                "intercept_measured_ms": statistics.median(r["intercept_measured_ms"] for r in rs),
                "intercept_predicted_ms": statistics.median(r["intercept_predicted_ms"] for r in rs),
                "gap_ms_per_gb": statistics.median(per_gb),
                "gap_ms_per_gb_range": [min(per_gb), max(per_gb)],
                "gap_above_zero": sum(g > 0 for g in per_gb),
                "slope_ratio": statistics.median(ratios) if ratios else None,
            }
        )
    return out


def cold_rows(folder: Path, method: str = "BF16") -> list[dict]:
    """A cold timing's rounds: per round and token count, (cold - warm) ms over the GB of experts
    touched (`kttune.hw.dram_stream.stream_ms_per_gb`), and each round's rate (`stream_rate`)."""
    rows = []
    for r in sorted(int(f.name.split("-")[-1].split(".")[0]) for f in folder.glob("cpu-moe-cold-warm-*.profile.json")):
        warm = load_profile(folder / f"cpu-moe-cold-warm-{r}.profile.json")
        cold = load_profile(folder / f"cpu-moe-cold-cold-{r}.profile.json")
        for cw in warm.curves_of("cpu_moe", method=method):
            cc = next(c for c in cold.curves_of("cpu_moe", method=method) if c.params == cw.params)
            w, c_ms = ({q.x: q.t_ms for q in c.points} for c in (cw, cc))
            rate = stream_rate(cw, cc)
            rows += [
                {
                    "round": r,
                    "tokens": t,
                    "threads": int(cw.params["threads"]),
                    "warm_ms": w[t],
                    "cold_ms": c_ms[t],
                    "cycled_bytes": int(cycled_bytes(cc)),
                    "extra_ms_per_gb": v,
                    "round_rate_ms_per_gb": rate,
                }
                for t, v in stream_ms_per_gb(cw, cc).items()
            ]
    return rows


def own_layer_rows(cold: list[dict], folder: Path, gpu_from: str = "h200-pcie5-xeon-amx-16c") -> list[dict]:
    """Per round and BF16 own layer of the cold timing's machine: its points at `MIN_TOKENS` and more
    predicted from the round's warm quick curves, alone and plus the round's median (cold - warm) per
    GB (`per_gb`) times the GB the call touches; predicted / measured - 1. And the same two lines as
    the runner's sweeps get: the layer's measured and warm-predicted times over tokens, the intercept
    gap per GB of the model's CPU experts, the slope ratio. The GPU curves (which the CPU MoE term does
    not read) come from the shipped profile `gpu_from`."""
    rows = []
    for r in sorted({c["round"] for c in cold}):
        per_gb = per_gb_ms(cold, r)
        base = quick_cpu_on(load_profile(folder / f"cpu-moe-cold-warm-{r}.profile.json"), load_shipped(gpu_from))
        for path in sorted(folder.glob("cpu-moe-cold-probe-*-BF16.profile.json")):
            probe = load_profile(path)
            name, method = _model_of(path, probe)
            spec = load_model(name, method)
            comp = Components(base, spec, method)
            expert_gb = spec.params_per_expert * BF16_BYTES / 1e9
            warm, dram, line = [], [], []
            for c in probe.curves_of("cpu_moe", method=method):
                th, e = int(c.params["threads"]), int(c.params.get("cpu_experts") or c.params["experts"])
                for q in c.points:
                    if q.x < MIN_TOKENS:
                        continue
                    t = comp.cpu_moe_ms(q.x, e, th)
                    gb = expected_experts_touched(q.x, spec.top_k, spec.num_experts, e) * expert_gb
                    warm.append(t / q.t_ms - 1)
                    dram.append((t + per_gb * gb) / q.t_ms - 1)
                    line.append((q.x, q.t_ms, t, e * expert_gb))
            x = np.array([row[0] for row in line], float)
            slope_m, icpt_m = np.polyfit(x, [row[1] for row in line], 1)
            slope_p, icpt_p = np.polyfit(x, [row[2] for row in line], 1)
            rows.append(
                {
                    "round": r,
                    "model": name,
                    "per_gb_ms": per_gb,
                    "points": len(warm),
                    "warm": warm,
                    "dram": dram,
                    "slope_ratio": float(slope_p / slope_m),
                    "gap_ms_per_gb": float(icpt_m - icpt_p) / line[0][3],
                }
            )
    return rows


def per_gb_ms(cold: list[dict], r: int) -> float:
    """A round's rate (`kttune.hw.dram_stream.stream_rate`: the median over 4-256 tokens, where the
    calls touch the whole layer and the compute does not yet hide the stream)."""
    return next(c["round_rate_ms_per_gb"] for c in cold if c["round"] == r)


def markdown(doc: dict) -> str:
    lines = [
        "# The BF16 hybrid path, per token and per layer",
        "",
        "Per sweep: the runner's forced hybrid forwards (per decoder layer) and the raw cost model's prediction "
        "from the call's quick probes, each a line over the sweep's lengths; the intercept gap (measured - "
        "predicted) per GB of the CPU experts' weights, and the slope ratio (predicted / measured).",
        "",
        "| box | CPU | model | sweeps | intercept measured / predicted, ms (median) | gap per GB, ms: median "
        "[range] | gap above 0 | slope ratio (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in doc["groups"]:
        lo, hi = g["gap_ms_per_gb_range"]
        lines.append(
            f"| {g['box']} | {g['generation']} | {g['model']} | {g['sweeps']} | {g['intercept_measured_ms']:.1f} / "
            f"{g['intercept_predicted_ms']:.1f} | {g['gap_ms_per_gb']:+.1f} [{lo:+.1f} to {hi:+.1f}] | "
            f"{g['gap_above_zero']} of {g['sweeps']} | {g['slope_ratio']:.2f} |"
        )
    for run in doc["cold_runs"]:
        cold = run["cold"]
        lines += [
            "",
            f"## Cold timing: {run['what']}",
            "",
            f"BF16 quick layer, {cold[0]['threads']} thread(s), {cold[0]['cycled_bytes'] / 2**20:.0f} MiB cycled: "
            "(cold - warm) per GB of experts touched, per round and token count (ms):",
            "",
            "| round | " + " | ".join(str(t) for t in sorted({c["tokens"] for c in cold})) + " | median, 4-256 |",
            "|---|" + "---|" * (len({c["tokens"] for c in cold}) + 1),
        ]
        for r in sorted({c["round"] for c in cold}):
            by = {c["tokens"]: c["extra_ms_per_gb"] for c in cold if c["round"] == r}
            lines.append(
                f"| {r} | " + " | ".join(f"{by[t]:+.1f}" for t in sorted(by)) + f" | {per_gb_ms(cold, r):+.1f} |"
            )
        lines += [
            "",
            "Its own BF16 layers (kt-kernel MoE at 256 tokens and more), predicted from the round's warm quick "
            "curves, alone and with the round's per-GB cost for the GB each call touches; predicted / measured - 1, "
            "mean over the points:",
            "",
            "| round | per GB, ms | model | points | warm quick curves | plus the per-GB cost | own layer against "
            "the warm prediction, as lines over tokens: intercept gap per GB, ms | slope ratio |",
            "|---|---|---|---|---|---|---|---|",
            *(
                f"| {o['round']} | {o['per_gb_ms']:.1f} | {o['model']} | {o['points']} | "
                f"{statistics.mean(o['warm']):+.0%} | {statistics.mean(o['dram']):+.0%} | "
                f"{o['gap_ms_per_gb']:+.1f} | {o['slope_ratio']:.2f} |"
                for o in run["own_layers"]
            ),
        ]
    wi = doc["what_if"]
    lines += [
        "",
        f"## What if: {wi['per_gb_ms']:.1f} ms per GB added to every BF16 hybrid forward",
        "",
        "The H200 box's cold timing's rate (the median of its two rounds), lent to every instance: not what the "
        "cost model does (a rate must be the serving instance's own), a measure of how much of the BF16 hybrid "
        "error a per-layer DRAM term could take. Per sweep, mean absolute error over its forwards; by how far up "
        "in tokens the call's probes timed the quick layer (256 before 2026-12-07, 1,024 since), which sets the "
        "per-token rate the prediction's slope carries.",
        "",
        "| box | CPU | quick layer to | model | sweeps | slope ratio (median) | mean absolute, as predicted -> "
        "with the term | within 15% |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {g['box']} | {g['generation']} | {g['series_top']:,} | {g['model']} | {g['sweeps']} | "
            f"{g['slope_ratio']:.2f} | {g['mean_abs'][0]:.0%} -> {g['mean_abs'][1]:.0%} | "
            f"{g['within_15'][0]} -> {g['within_15'][1]} of {g['sweeps']} |"
            for g in wi["groups"]
        ),
    ]
    lines += [
        "",
        "## Per sweep",
        "",
        "| call | CPU | model | tokens | GPU experts | intercept measured / predicted, ms | slope measured / "
        "predicted, ms per 1k tokens | CPU experts, GB | gap per GB, ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        lines.append(
            f"| {r['call']} | {r['generation']} | {r['model']} | {r['tokens'][0]}-{r['tokens'][-1]} | "
            f"{r['gpu_experts']} | {r['intercept_measured_ms']:.1f} / {r['intercept_predicted_ms']:.1f} | "
            f"{r['slope_measured_ms_per_1k']:.1f} / {r['slope_predicted_ms_per_1k']:.1f} | {r['cpu_expert_gb']:.2f} | "
            f"{r['gap_ms_per_gb']:+.1f} |"
        )
    return "\n".join(lines + [""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    rows = runner_rows()
    runs = []
    for folder, what in COLD_RUNS:
        cold = cold_rows(folder)
        runs.append({"folder": folder.name, "what": what, "cold": cold, "own_layers": own_layer_rows(cold, folder)})
    h200 = runs[0]["cold"]
    lent = statistics.median(per_gb_ms(h200, r) for r in sorted({c["round"] for c in h200}))
    doc = {
        "rows": rows,
        "groups": grouped(rows),
        "cold_runs": runs,
        "what_if": {"per_gb_ms": lent, "groups": what_if(rows, lent)},
    }
    write_result(args.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
