"""What the cost model's sparse attention changes for DeepSeek-V3.2, GLM-5 and GLM-5.2 (GLM-5 with
IndexShare: an indexer in 21 of its 78 layers) (docs/cost-model.md#sparse-attention): attention per layer, prefill and decode on SGLang's nsa
backend (the sparse attention SGLang runs when --attention-backend is unset) against the triton
backend kttune launches with (no indexer: MLA attention over every token, in the latent form over a
prefix, docs/cost-model.md#mla-prefill-forms; every latent read), and the decode read kttune charged
for both until 2026-12-05 (the whole cell of every token, indexer keys included).

Profiles: the measured H200 box (SM 90: dense while a forward's sequence fits the top-k) and the same
derived to 2 x RTX 5090 at TP 2 (SM 120: sparse always). Flags: 0 GPU experts, chunk 16,384,
threshold 2,048 (the seed's), 15 kt-kernel threads; prompts 2K-128K; decode 8 requests at 2K-128K of context. Computed
from the cost model, not measured: FlashMLA's sparse kernel and the FP8 indexer are priced at the
profile's dense-attention rate (sglang does not install on the measured box).

    python3 benchmarks/bench_sparse_attention.py --out benchmarks/results/2026-12-05-computed/sparse-attention
"""

from __future__ import annotations

import argparse
from pathlib import Path

from results_layout import write_result

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.cost.decode import decode_step_ms
from kttune.cost.prefill import prefill_time_ms
from kttune.hw.derive import Change, derive_profile
from kttune.hw.registry import load_shipped
from kttune.memory.vram import kv_cell_bytes
from kttune.spec.loader import load_model

MODELS = ("deepseek-v3.2", "glm-5", "glm-5.2")
MEASURED = "h200-pcie5-xeon-amx-16c"
SHAPES = ((2048, 0), (4096, 0), (8192, 0), (16384, 0), (16384, 16384), (16384, 49152), (16384, 114688))
PROMPTS = (2048, 8192, 32768, 65536, 131072)
CONTEXTS = (2048, 8192, 32768, 131072)
BATCH = 8


def machines() -> list[tuple[str, object, int]]:
    h200 = load_shipped(MEASURED)
    rtx = derive_profile(h200, Change(gpu="rtx5090", n_gpus=2)).profile
    return [("H200 (measured), TP 1", h200, 1), ("2 x RTX 5090 (derived), TP 2", rtx, 2)]


def flags(method: str, tp: int) -> LaunchConfig:
    return LaunchConfig(
        method=method,
        tp=tp,
        cpuinfer_threads=15,
        num_gpu_experts=0,
        chunked_prefill_size=16384,
        gpu_prefill_token_threshold=2048,
        max_total_tokens=1 << 18,
        max_running_requests=BATCH,
    )


def old_decode_ms(c: Components, cfg: LaunchConfig, ctx: int) -> float:
    """The step as charged before: the whole cell of every cached token read."""
    now = decode_step_ms(c, cfg, BATCH, ctx)
    whole = c.decode_dense_ms(BATCH, 0) + BATCH * ctx * kv_cell_bytes(c.model, c.tp) * c.hbm_ms_per_byte
    return now - c.decode_dense_ms(BATCH, ctx) + whole


def measure_one(name: str, label: str, prof, tp: int) -> dict:
    m = load_model(name)
    c = Components(prof, m, m.default_method, tp=tp, attention_backend="nsa")
    d = Components(prof, m, m.default_method, tp=tp)  # kttune's launch: triton
    cfg = flags(m.default_method, tp)
    return {
        "model": name,
        "machine": label,
        "tp": tp,
        "gpu_sm": c.gpu_sm,
        "fp8_speedup": c.fp8_speedup,
        "attention_ms": [
            {"tokens": t, "prefix": p, "nsa": c.attention_ms(t, p), "triton": d.attention_ms(t, p)} for t, p in SHAPES
        ],
        "prefill_tok_s": [
            {"prompt": n, "nsa": n / prefill_time_ms(c, cfg, n) * 1e3, "triton": n / prefill_time_ms(d, cfg, n) * 1e3}
            for n in PROMPTS
        ],
        "decode_ms": [
            {
                "context": x,
                "nsa": decode_step_ms(c, cfg, BATCH, x),
                "triton": decode_step_ms(d, cfg, BATCH, x),
                "before": old_decode_ms(d, cfg, x),
            }
            for x in CONTEXTS
        ],
    }


def table(rows: list[dict], key: str, head: str, cols: list[str], cell) -> list[str]:
    out = [f"| model | machine | {' | '.join(cols)} |", "|---|---|" + "---|" * len(cols)]
    for r in rows:
        out.append(f"| {r['model']} | {r['machine']} | " + " | ".join(cell(x) for x in r[key]) + " |")
    return [head, "", *out, ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    rows = [measure_one(n, label, prof, tp) for n in MODELS for label, prof, tp in machines()]
    lines = [
        "# Sparse attention (DeepSeek-V3.2, GLM-5, GLM-5.2 with IndexShare): nsa against triton, and before",
        "",
        "nsa (SGLang's backend for these models when `--attention-backend` is unset): dense MLA while "
        "prefix + tokens <= 2,048 on SM 90 / 100, else the indexer and top-k latent attention, heads "
        "padded to 64 per rank on Hopper, 128 from SM 100; decode reads every token's index key and the "
        "top-k latents. triton (what kttune and KT's DeepSeek-V3.2 tutorial launch): no indexer, "
        "MLA attention over every token, in the latent form over a prefix (3.4x MHA's flops a pair), "
        "every latent read. Before: the decode read kttune charged until 2026-12-05, the whole cell (indexer keys "
        "included) of every token. Flags: 0 GPU experts, chunk 16,384, threshold 2,048, 15 threads, "
        "the model's checkpoint method. Computed (sparse kernels priced at the profile's "
        "dense-attention rate), not measured.",
        "",
    ]
    lines += table(
        rows,
        "attention_ms",
        "## Attention of one layer, ms (nsa / triton)",
        [f"{t // 1024}K after {p // 1024}K" for t, p in SHAPES],
        lambda x: f"{x['nsa']:.2f} / {x['triton']:.2f}",
    )
    lines += table(
        rows,
        "prefill_tok_s",
        "## Prefill, tok/s (nsa / triton)",
        [f"{n // 1024}K" for n in PROMPTS],
        lambda x: f"{x['nsa']:,.0f} / {x['triton']:,.0f} ({x['nsa'] / x['triton'] - 1:+.0%})",
    )
    lines += table(
        rows,
        "decode_ms",
        f"## Decode step of {BATCH} requests, ms (nsa / triton / before)",
        [f"{x // 1024}K context" for x in CONTEXTS],
        lambda x: f"{x['nsa']:.1f} / {x['triton']:.1f} / {x['before']:.1f}",
    )
    write_result(args.out, {"batch": BATCH, "rows": rows}, "\n".join(lines))


if __name__ == "__main__":
    main()
