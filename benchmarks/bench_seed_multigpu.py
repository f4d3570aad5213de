"""The seed's multi-GPU figures as a check on the physics of `profile derive` and the cost model.

KT's layerwise-prefill document (the project's seed) publishes MiniMax-M2.1 prefill throughput "up
to" 1,172 / 2,879 / 4,045 tok/s on 1 / 2 / 4 x RTX 5090, with the example flags `--kt-method FP8
--kt-num-gpu-experts 32 --chunked-prefill-size 16384 --kt-gpu-prefill-token-threshold 2048` and two
kt-kernel thread pools. Its CPU is not named. This script derives a profile for each GPU count from
the measured H200 box (profiles/h200-pcie5-xeon-amx-16c.json) with `kttune.hw.derive` and predicts
the best prefill throughput over prompts of 8K, 16K and 32K tokens, for two CPUs: the measured
16-core box itself, and a derived two-socket 64-core AMX host with 16 DDR5-4800 channels (two
NUMA nodes, as the seed's two thread pools). Every prediction is explained term by term for a
16K-token forward (which stage bounds the layer load at each GPU count). Nothing here is fitted to
the seed's figures: they are only compared with.

The seed's flags may not fit a GPU count's VRAM (32 experts per layer are 26 GiB of FP8 experts at
TP 1); the memory model says so, and the script then also predicts the most GPU experts (and,
failing that, the largest chunk) that fit, at the same threshold.

    python benchmarks/bench_seed_multigpu.py [--out DIR]   # DIR: benchmarks/results/<today>-computed/
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.cost.prefill import forward_time, prefill_time_ms
from kttune.hw.derive import Change, cpu_target, derive_profile
from kttune.hw.registry import load_shipped
from kttune.memory.vram import usable_vram_bytes, vram_breakdown
from kttune.spec.loader import load_model
from kttune.units import GIB
from results_layout import COMPUTED, results_dir

SOURCE = "h200-pcie5-xeon-amx-16c"
MODEL, METHOD, GPU = "minimax-m2.1", "FP8", "rtx5090"
SEED_TOK_S = {1: 1172, 2: 2879, 4: 4045}  # "up to", the seed's table
SEED_FLAGS = {"gpu_experts": 32, "chunk": 16384, "threshold": 2048}
PROMPTS = (8192, 16384, 32768)
# Before this change (issue 22's reading of `explain` at the seed's flags, measured 16-core CPU).
BEFORE_TOK_S = {1: 1377, 2: 1812, 4: 2117}
CPUS = {
    "measured 16-core Xeon (AMX)": None,
    "derived 2 x 32-core Xeon (AMX), 16 x DDR5-4800": dict(
        cores=64, isa="amx", numa_nodes=2, mem_channels=16, mem_mts=4800
    ),
}


def config(c: Components, n_gpus: int, threads: int, pools: int, gpu_experts: int, chunk: int) -> LaunchConfig:
    return LaunchConfig(
        method=METHOD,
        tp=n_gpus,
        num_gpu_experts=gpu_experts,
        chunked_prefill_size=chunk,
        gpu_prefill_token_threshold=SEED_FLAGS["threshold"],
        max_total_tokens=max(PROMPTS) + 1024,
        cpuinfer_threads=threads,
        threadpool_count=pools,
    )


def best_tok_s(c: Components, cfg: LaunchConfig) -> tuple[float, int]:
    """The best prefill throughput over PROMPTS and the prompt length that gives it."""
    return max((p / prefill_time_ms(c, cfg, p) * 1e3, p) for p in PROMPTS)


def fitting_config(c: Components, cfg: LaunchConfig, vram_bytes: int) -> tuple[LaunchConfig, float]:
    """`cfg` if it fits the usable VRAM, else the most GPU experts (<= cfg's) at the largest chunk
    (<= cfg's, halving) that fit; with the peak in bytes."""
    usable = usable_vram_bytes(vram_bytes)
    for chunk in (cfg.chunked_prefill_size, cfg.chunked_prefill_size // 2, cfg.chunked_prefill_size // 4):
        for n in range(cfg.num_gpu_experts, -1, -1):
            cand = replace(cfg, num_gpu_experts=n, chunked_prefill_size=chunk)
            peak = vram_breakdown(c.model, cand).runtime_peak_bytes
            if peak <= usable:
                return cand, peak
    return cfg, vram_breakdown(c.model, cfg).runtime_peak_bytes


# The seed's figures are "up to": the best a GPU count reaches. The chunks and GPU-expert counts a
# user would try, each at every thread count below the cores; the best that fits the VRAM.
BEST_CHUNKS = (4096, 8192, 16384, 32768, 65536)
BEST_GPU_EXPERTS = (32, 16, 8, 0)


def best_fitting(c: Components, n_gpus: int, options: list[int], pools: int, vram_bytes: int) -> dict:
    """The fastest configuration over BEST_CHUNKS x the most of BEST_GPU_EXPERTS that fits x the thread
    counts `options` (the seed's threshold), by the same best-over-PROMPTS throughput."""
    usable = usable_vram_bytes(vram_bytes)
    best = None
    for t in options:
        for chunk in BEST_CHUNKS:
            for n in BEST_GPU_EXPERTS:
                cfg = config(c, n_gpus, t, pools, n, chunk)
                if vram_breakdown(c.model, cfg).runtime_peak_bytes > usable:
                    continue
                tok_s, at = best_tok_s(c, cfg)
                if best is None or tok_s > best["predicted_tok_s"]:
                    best = {"threads": t, "chunk": chunk, "gpu_experts": n, "predicted_tok_s": tok_s, "at_prompt": at}
                break  # the most GPU experts that fit at this chunk
    return best


def terms(c: Components, cfg: LaunchConfig, tokens: int) -> dict:
    """One forward of `tokens` tokens from an empty prefix, per decoder layer, term by term (ms)."""
    f = forward_time(c, cfg, tokens)
    lay = f.layer
    m = c.model
    out = {
        "path": f.path,
        "moe_layer_ms": lay.total_ms,
        "other_per_layer_ms": f.other_ms / m.num_layers,
        "attention_ms": c.attention_ms(tokens, 0),
        "dense_ms": c.dense_ms(tokens),
        "allreduce_ms": c.allreduce_layer_ms(tokens),
        "gpu_moe_ms": lay.gpu_ms,
    }
    if f.path == "layerwise":
        a = c.stage_a_ms(c.cpu_bytes_per_expert, cfg.cpuinfer_threads)
        b = c.h2d_all_ranks_ms(c.gpu_bytes_per_expert)
        cc = c.stage_c_ms(c.gpu_bytes_per_expert)
        bar = c.barrier_ms()
        stages = {"A (rank 0 writes every shard)": a, "B + barrier (each rank its shard)": b + bar, "C": cc}
        out.update(
            {
                "stage_a_per_expert_ms": a,
                "stage_b_per_expert_ms": b,
                "barrier_per_expert_ms": bar,
                "stage_c_per_expert_ms": cc,
                "overlap_ratio": c.overlap_ratio,
                "load_ms": lay.load_ms,
                "bound_by": max(stages, key=stages.get),
            }
        )
    else:
        out.update({"cpu_moe_ms": lay.cpu_ms, "transfer_ms": lay.transfer_ms})
    out["forward_ms"] = f.total_ms
    return out


def run() -> dict:
    src = load_shipped(SOURCE)
    model = load_model(MODEL)
    rows = []
    for cpu_name, cpu_args in CPUS.items():
        cpu = cpu_target(**cpu_args) if cpu_args else None
        for n in sorted(SEED_TOK_S):
            prof = derive_profile(src, Change(gpu=GPU, n_gpus=n, cpu=cpu)).profile
            c = Components(prof, model, METHOD, n)
            cores = prof.inventory.cpu.physical_cores
            pools = max(1, len(prof.inventory.cpu.numa_nodes))
            # the thread count kttune would pick: the fastest measured (or derived) below the core count
            options = [t for t in c.cpu_thread_options() if t < cores]
            seed = {t: config(c, n, t, pools, SEED_FLAGS["gpu_experts"], SEED_FLAGS["chunk"]) for t in options}
            th = max(options, key=lambda t: best_tok_s(c, seed[t])[0])
            cfg = seed[th]
            tok_s, at = best_tok_s(c, cfg)
            peak = vram_breakdown(model, cfg).runtime_peak_bytes
            vram = prof.inventory.gpus[0].vram_total_bytes
            fit_cfg, fit_peak = fitting_config(c, cfg, vram)
            fit_tok_s, fit_at = best_tok_s(c, fit_cfg)
            best = best_fitting(c, n, options, pools, vram)
            best["error"] = best["predicted_tok_s"] / SEED_TOK_S[n] - 1
            rows.append(
                {
                    "cpu": cpu_name,
                    "gpus": n,
                    "threads": th,
                    "threadpools": pools,
                    "seed_tok_s": SEED_TOK_S[n],
                    "predicted_tok_s": round(tok_s),
                    "at_prompt": at,
                    "error": tok_s / SEED_TOK_S[n] - 1,
                    "vram_peak_gib": peak / GIB,
                    "vram_usable_gib": usable_vram_bytes(vram) / GIB,
                    "fits": peak <= usable_vram_bytes(vram),
                    "fitting": {
                        "gpu_experts": fit_cfg.num_gpu_experts,
                        "chunk": fit_cfg.chunked_prefill_size,
                        "vram_peak_gib": fit_peak / GIB,
                        "predicted_tok_s": round(fit_tok_s),
                        "at_prompt": fit_at,
                        "error": fit_tok_s / SEED_TOK_S[n] - 1,
                    },
                    "best_fitting": best,
                    "terms_16k": terms(c, cfg, 16384),
                    "profile_notes": [a for a in prof.provenance.notes[1:]],
                }
            )
    for r in rows:
        base = next(q for q in rows if q["cpu"] == r["cpu"] and q["gpus"] == 1)
        r["scaling"] = r["predicted_tok_s"] / base["predicted_tok_s"]
        r["seed_scaling"] = r["seed_tok_s"] / base["seed_tok_s"]
        r["scaling_error"] = r["scaling"] / r["seed_scaling"] - 1
        r["fitting"]["scaling"] = r["fitting"]["predicted_tok_s"] / base["fitting"]["predicted_tok_s"]
        r["fitting"]["scaling_error"] = r["fitting"]["scaling"] / r["seed_scaling"] - 1
        b = r["best_fitting"]
        b["scaling"] = b["predicted_tok_s"] / base["best_fitting"]["predicted_tok_s"]
        b["scaling_error"] = b["scaling"] / r["seed_scaling"] - 1
    return {
        "source_profile": SOURCE,
        "model": MODEL,
        "method": METHOD,
        "gpu": GPU,
        "seed_flags": SEED_FLAGS,
        "prompts": list(PROMPTS),
        "before": BEFORE_TOK_S,
        "rows": rows,
    }


def markdown(d: dict) -> str:
    lines = [
        "# The seed's MiniMax-M2.1 figures against `profile derive` + the cost model",
        "",
        f"Derived from `{d['source_profile']}` (measured) to 1 / 2 / 4 x RTX 5090 (TP = GPUs); flags of the seed "
        f"(FP8, {d['seed_flags']['gpu_experts']} GPU experts, chunk {d['seed_flags']['chunk']}, threshold "
        f"{d['seed_flags']['threshold']}); best prefill over prompts of {', '.join(map(str, d['prompts']))} tokens. "
        "No coefficient is fitted to the seed's figures.",
        "",
        "| CPU | GPUs | seed tok/s | predicted | error | scaling (seed) | scaling error | seed flags fit VRAM | most that fit: n, chunk -> tok/s (error) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        f = r["fitting"]
        fits = "yes" if r["fits"] else f"no ({r['vram_peak_gib']:.1f} > {r['vram_usable_gib']:.1f} GiB)"
        lines.append(
            f"| {r['cpu']} | {r['gpus']} | {r['seed_tok_s']:,} | {r['predicted_tok_s']:,} | {100 * r['error']:+.0f}% | "
            f"{r['scaling']:.2f}x ({r['seed_scaling']:.2f}x) | {100 * r['scaling_error']:+.0f}% | {fits} | "
            f"{f['gpu_experts']}, {f['chunk']} -> {f['predicted_tok_s']:,} ({100 * f['error']:+.0f}%; scaling {f['scaling']:.2f}x) |"
        )
    lines += [
        "",
        'The best configuration that fits each GPU count (the seed\'s figures are "up to"): chunk '
        f"{', '.join(map(str, BEST_CHUNKS))} x the most of {', '.join(map(str, BEST_GPU_EXPERTS))} GPU experts "
        "that fits x the thread counts, at the seed's threshold:",
        "",
        "| CPU | GPUs | seed tok/s | best: chunk, GPU experts, threads | predicted | error | scaling (seed) | scaling error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        b = r["best_fitting"]
        lines.append(
            f"| {r['cpu']} | {r['gpus']} | {r['seed_tok_s']:,} | {b['chunk']}, {b['gpu_experts']}, {b['threads']} | "
            f"{b['predicted_tok_s']:,.0f} | {100 * b['error']:+.0f}% | {b['scaling']:.2f}x ({r['seed_scaling']:.2f}x) | "
            f"{100 * b['scaling_error']:+.0f}% |"
        )
    lines += [
        "",
        f"Before this change (measured CPU, seed flags): {', '.join(f'{v:,}' for v in d['before'].values())} tok/s.",
        "",
        "## Term by term: one 16K-token forward, per decoder layer (ms)",
        "",
        "| CPU | GPUs | threads | path | stage A / expert | B / expert | barrier / expert | C / expert | overlap | load bound by | load | GPU MoE | attention + dense + all-reduce | layer |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        t = r["terms_16k"]
        if t["path"] != "layerwise":
            continue
        other = t["attention_ms"] + t["dense_ms"] + t["allreduce_ms"]
        lines.append(
            f"| {r['cpu']} | {r['gpus']} | {r['threads']} | {t['path']} | {t['stage_a_per_expert_ms']:.3f} | "
            f"{t['stage_b_per_expert_ms']:.3f} | {t['barrier_per_expert_ms']:.4f} | {t['stage_c_per_expert_ms']:.3f} | "
            f"{t['overlap_ratio']:.2f} | {t['bound_by']} | {t['load_ms']:.1f} | {t['gpu_moe_ms']:.1f} | {other:.1f} | "
            f"{t['moe_layer_ms'] + t['other_per_layer_ms']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--out",
        help="folder for the results (default: benchmarks/results/<today>-computed/, benchmarks/results_layout.py)",
    )
    a = ap.parse_args()
    d = run()
    out = Path(a.out) if a.out else results_dir(COMPUTED)
    out.mkdir(parents=True, exist_ok=True)
    (out / "seed-multigpu.json").write_text(json.dumps(d, indent=1) + "\n")
    md = markdown(d)
    (out / "seed-multigpu.md").write_text(md)
    print(md)
    print(f"wrote {out / 'seed-multigpu.json'} and {out / 'seed-multigpu.md'}")


if __name__ == "__main__":
    main()
