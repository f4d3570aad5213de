"""What choosing `--attention-backend` changes in `kttune search`'s picks for MLA models
(docs/cost-model.md#mla-prefill-forms): each model on the H200 profile, per workload and VRAM
budget, the search's pick (seed 1, 300 trials) with the backend searched, against the same search
offering triton alone (kttune's launch until 2026-12-05; the backend dimension taken out of the
space for that run). Predicted by the cost model, not measured: the latent form's rate on the box
is the profile's MHA attention rate.

    python3 benchmarks/bench_backend_pick.py --out benchmarks/results/2026-12-05-computed/backend-pick
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager
from pathlib import Path

from results_layout import write_result

import kttune.search.space as space_module
from kttune.hw.registry import load_shipped
from kttune.search.evaluate import Budget
from kttune.search.study import StudyOptions, run_search
from kttune.search.request import SearchRequest
from kttune.search.workload import load_workload
from kttune.spec.loader import load_model
from kttune.units import GIB

PROFILE = "h200-pcie5-xeon-amx-16c"
MODELS = ("deepseek-v3", "kimi-k2-thinking", "deepseek-v3.2", "glm-5")
WORKLOADS = ("rag", "long-context")
VRAM_GIB = (80, 141)
HOST_RAM = 2048 * GIB


@contextmanager
def triton_only():
    """The space as it was before the backend was searched: one choice, kttune's launch default."""
    offered = space_module.attention_backends
    space_module.attention_backends = lambda comp: ("",)
    try:
        yield
    finally:
        space_module.attention_backends = offered


def pick(req: SearchRequest) -> dict:
    r = run_search(req, StudyOptions(trials=300, seed=1, storage=":memory:"))
    e = r.best
    return {
        "backend": e.cfg.attention_backend or "triton",
        "chunk": e.cfg.chunked_prefill_size,
        "gpu_experts": e.cfg.num_gpu_experts,
        "max_total_tokens": e.cfg.max_total_tokens,
        "mean_prefill_ms": e.mean_ttft_ms,
        "decode_tok_s": e.decode_tok_s,
        "peak_gib": e.vram.runtime_peak_bytes / GIB,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    prof = load_shipped(PROFILE)
    rows = []
    for name in MODELS:
        m = load_model(name)
        for wl in WORKLOADS:
            w = load_workload(wl).clipped(m.max_position_embeddings)
            for gib in VRAM_GIB:
                req = SearchRequest(m, m.default_method, prof, w, Budget(gib * GIB, HOST_RAM))
                now = pick(req)
                with triton_only():
                    before = pick(req)
                rows.append({"model": name, "workload": wl, "vram_gib": gib, "now": now, "triton_only": before})
                print(
                    name,
                    wl,
                    gib,
                    now["backend"],
                    f"{before['mean_prefill_ms'] / now['mean_prefill_ms']:.2f}x",
                    flush=True,
                )
    lines = [
        "# `kttune search` with `--attention-backend` searched, against triton alone",
        "",
        f"Profile {PROFILE}; seed 1, 300 trials, host RAM 2 TiB; the checkpoint's method. Predicted by the "
        "cost model (the latent form at the profile's MHA attention rate), not measured.",
        "",
        "| model | workload | VRAM | pick: backend, chunk, GPU experts | mean prefill (ms) | decode tok/s | "
        "triton only: chunk, GPU experts | mean prefill (ms) | decode tok/s | prefill speed-up |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        n, b = r["now"], r["triton_only"]
        lines.append(
            f"| {r['model']} | {r['workload']} | {r['vram_gib']} GiB | {n['backend']}, {n['chunk']:,}, {n['gpu_experts']} | "
            f"{n['mean_prefill_ms']:,.0f} | {n['decode_tok_s']:.1f} | {b['chunk']:,}, {b['gpu_experts']} | "
            f"{b['mean_prefill_ms']:,.0f} | {b['decode_tok_s']:.1f} | {b['mean_prefill_ms'] / n['mean_prefill_ms']:.2f}x |"
        )
    write_result(args.out, {"profile": PROFILE, "rows": rows}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
