"""What charging Qwen3-Next's Gated DeltaNet layers as SGLang runs them changes
(docs/cost-model.md#linear-attention-layers): in prefill the chunked recurrence of each linear layer
(its projections were already counted), in decode the recurrent state each request's step reads and
writes back, against the same model with those terms at zero (what kttune charged until 2026-12-05).

Profile: the measured H200 box, TP 1. Flags: 8 GPU experts, chunk 16,384, threshold 4,096, 15
kt-kernel threads; prompts 4K-128K; decode of 1, 8 and 32 requests at 8K of context. Computed from
the cost model, not measured: FLA's kernels are priced at the profile's attention rate (the probe
times SDPA; sglang does not install on the measured box).

    python3 benchmarks/bench_linear_attention.py --out benchmarks/results/2026-12-05-computed/linear-attention
"""

from __future__ import annotations

import argparse
from pathlib import Path

from results_layout import write_result

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.cost.decode import decode_step_ms
from kttune.cost.prefill import prefill_forwards, prefill_time_ms
from kttune.hw.registry import load_shipped
from kttune.memory.vram import linear_state_bytes_per_request
from kttune.spec.loader import load_model

MODEL = "qwen3-next-80b-a3b"
MEASURED = "h200-pcie5-xeon-amx-16c"
PROMPTS = (4096, 16384, 32768, 131072)
BATCHES = (1, 8, 32)
CONTEXT = 8192


def flags(method: str) -> LaunchConfig:
    return LaunchConfig(
        method=method,
        tp=1,
        cpuinfer_threads=15,
        num_gpu_experts=8,
        chunked_prefill_size=16384,
        gpu_prefill_token_threshold=4096,
        max_total_tokens=1 << 18,
        max_running_requests=max(BATCHES),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    m = load_model(MODEL)
    c = Components(load_shipped(MEASURED), m, m.default_method)
    cfg = flags(m.default_method)
    layers = len(m.linear_attention_layer_ids)
    prefill = []
    for n in PROMPTS:
        now = prefill_time_ms(c, cfg, n)
        rec = sum(layers * c.linear_attention_ms(f.tokens) for f in prefill_forwards(c, cfg, n))
        prefill.append({"prompt": n, "ms": now, "recurrence_ms": rec, "before_ms": now - rec})
    state = 2 * linear_state_bytes_per_request(m, 1)
    decode = []
    for b in BATCHES:
        now = decode_step_ms(c, cfg, b, CONTEXT)
        extra = b * state * c.hbm_ms_per_byte
        decode.append({"batch": b, "ms": now, "state_ms": extra, "before_ms": now - extra})
    lines = [
        "# Qwen3-Next's linear-attention layers: the recurrence and the state, charged",
        "",
        f"{MODEL} ({layers} Gated DeltaNet layers of {m.num_layers}) on the shipped H200 profile, TP 1, "
        "8 GPU experts, chunk 16,384, threshold 4,096, 15 threads. Before: the same terms at zero, as "
        "charged until 2026-12-05. Computed (FLA's kernels priced at the profile's attention rate), not measured.",
        "",
        "## Prefill",
        "",
        "| prompt | tok/s now | tok/s before | recurrence, ms (all layers and forwards) | share of the prefill |",
        "|---|---|---|---|---|",
    ]
    for r in prefill:
        lines.append(
            f"| {r['prompt']:,} | {r['prompt'] / r['ms'] * 1e3:,.0f} | {r['prompt'] / r['before_ms'] * 1e3:,.0f} | "
            f"{r['recurrence_ms']:.1f} | {r['recurrence_ms'] / r['ms']:.1%} |"
        )
    lines += [
        "",
        f"## Decode step at {CONTEXT:,} tokens of context (state read and written: {state / 2**20:.0f} MiB a request)",
        "",
        "| requests | ms now | ms before | the states' share |",
        "|---|---|---|---|",
    ]
    for r in decode:
        lines.append(f"| {r['batch']} | {r['ms']:.2f} | {r['before_ms']:.2f} | {r['state_ms'] / r['ms']:.1%} |")
    write_result(args.out, {"model": MODEL, "prefill": prefill, "decode": decode}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
