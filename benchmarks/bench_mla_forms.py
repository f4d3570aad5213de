"""What charging each MLA prefill form changes (docs/cost-model.md#mla-prefill-forms): DeepSeek-V3
and Kimi-K2 on the measured H200 profile, prefill tok/s by chunk size and prompt length on triton
(what kttune launches: the latent form over any prefix), on fa3 (SGLang's pick on Hopper: latent
below 8,192 prefix tokens, expanded in one shot from there) and with every prefix expanded (the path
runner's form; what the cost model charged every MLA forward until 2026-12-05, which also left out
kv_b_proj over the prefix). Flags: 0 GPU experts, threshold 2,048, 15 threads, the checkpoint's
method. Computed from the cost model, not measured: the latent form's rate is the profile's MHA
attention rate.

    python3 benchmarks/bench_mla_forms.py --out benchmarks/results/2026-12-05-computed/mla-forms
"""

from __future__ import annotations

import argparse
from pathlib import Path

from results_layout import write_result

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.cost.prefill import prefill_time_ms
from kttune.hw.registry import load_shipped
from kttune.memory.vram import EXPAND_EVERY_PREFIX
from kttune.spec.loader import load_model

MODELS = ("deepseek-v3", "kimi-k2-thinking")
PROFILE = "h200-pcie5-xeon-amx-16c"
BACKENDS = (("triton", "triton (kttune's launch)"), ("fa3", "fa3 (SGLang's pick on Hopper)"))
CHUNKS = (8192, 16384, 32768, 65536)
PROMPTS = (8192, 32768, 131072)
SHAPES = ((8192, 8192), (8192, 57344), (16384, 16384), (16384, 114688))


def flags(method: str, chunk: int) -> LaunchConfig:
    return LaunchConfig(
        method=method,
        tp=1,
        num_gpu_experts=0,
        chunked_prefill_size=chunk,
        gpu_prefill_token_threshold=2048,
        max_total_tokens=1 << 18,
        cpuinfer_threads=15,
    )


def rows_for(name: str, prof) -> dict:
    m = load_model(name)
    comps = {b: Components(prof, m, m.default_method, attention_backend=b) for b, _ in BACKENDS}
    comps["expanded"] = Components(prof, m, m.default_method, attention_backend=EXPAND_EVERY_PREFIX)
    prefill = []
    for chunk in CHUNKS:
        cfg = flags(m.default_method, chunk)
        for n in PROMPTS:
            if chunk > n and chunk != CHUNKS[0]:
                continue
            prefill.append(
                {"chunk": chunk, "prompt": n} | {b: n / prefill_time_ms(c, cfg, n) * 1e3 for b, c in comps.items()}
            )
    attention = [{"tokens": t, "prefix": p} | {b: c.attention_ms(t, p) for b, c in comps.items()} for t, p in SHAPES]
    return {"model": name, "method": m.default_method, "prefill_tok_s": prefill, "attention_ms": attention}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    prof = load_shipped(PROFILE)
    rows = [rows_for(n, prof) for n in MODELS]
    names = [b for b, _ in BACKENDS] + ["expanded"]
    head = " / ".join(names)
    lines = [
        "# MLA prefill forms: DeepSeek-V3 and Kimi-K2 on the H200 profile",
        "",
        "triton: the latent form over any prefix (kttune's launch). fa3: latent below 8,192 prefix tokens, "
        "one expanded shot from there (SGLang's default on Hopper). expanded: every prefix expanded (the "
        "path runner's form; before 2026-12-05 the cost model charged every MLA forward so, without "
        "kv_b_proj over the prefix). Flags: 0 GPU experts, threshold 2,048, 15 threads. Computed, not "
        "measured: every form at the profile's MHA attention rate.",
        "",
        f"## Attention of one layer, ms ({head})",
        "",
        "| model | " + " | ".join(f"{t // 1024}K after {p // 1024}K" for t, p in SHAPES) + " |",
        "|---|" + "---|" * len(SHAPES),
    ]
    for r in rows:
        cells = [" / ".join(f"{a[b]:.1f}" for b in names) for a in r["attention_ms"]]
        lines.append(f"| {r['model']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"## Prefill, tok/s ({head})",
        "",
        "| model | chunk | " + " | ".join(f"{n // 1024}K prompt" for n in PROMPTS) + " |",
        "|---|---|" + "---|" * len(PROMPTS),
    ]
    for r in rows:
        for chunk in CHUNKS:
            by = {x["prompt"]: x for x in r["prefill_tok_s"] if x["chunk"] == chunk}
            cells = [" / ".join(f"{by[n][b]:,.0f}" for b in names) if n in by else "" for n in PROMPTS]
            lines.append(f"| {r['model']} ({r['method']}) | {chunk:,} | " + " | ".join(cells) + " |")
    write_result(args.out, {"profile": PROFILE, "rows": rows}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
