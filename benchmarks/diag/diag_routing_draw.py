"""How much one prompt draw moves the GPU experts' share of the routed pairs, on the path runner's
router (docs/path-runner.md#one-prompt-draw-per-round).

The path runner builds each layer's router from a seed (`kttune.kernels.decoder.LayerWeights.random`)
and draws the prompt's hidden states from another; the GPU-resident experts are the first N. Per
model, layer and forward length this draws `--draws` prompts (hidden states as the runner draws them,
through the layer's post-attention norm and router; the attention block left out, which adds a
random-weight projection of the same draw) and reports the share of routed pairs that land on the
GPU experts: its mean over draws (the cost model's expectation, N/E for a router without a favoured
expert) and its spread from one draw to the next. Pure computation, no timing.

    python benchmarks/diag/diag_routing_draw.py --out F [--model gpt-oss-20b:MXFP4:8 ...] [--tokens 2,4,8,16,32,256]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from results_layout import write_result  # noqa: E402

from kttune.kernels.decoder import LayerWeights, rms_norm, route  # noqa: E402
from kttune.spec.loader import load_model  # noqa: E402
from kttune.spec.model_spec import ModelSpec  # noqa: E402


def shares(m: ModelSpec, gpu_experts: int, tokens: int, draws: int, layer: int) -> list[float]:
    """The GPU experts' (the first `gpu_experts`) share of the routed pairs in each of `draws` prompts
    of `tokens` tokens, on the router of the runner's layer `layer` of model `m`."""
    w = LayerWeights.random(
        m.hidden_size, m.num_experts, m.shared_expert_intermediate_size, m.router, "cpu", seed=layer
    )
    out = []
    for seed in range(draws):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(tokens, m.hidden_size, generator=g, dtype=torch.bfloat16).mul_(0.5)
        ids, _ = route(rms_norm(x, w.post_norm) @ w.gate.t(), m.router, m.top_k, w.bias)
        out.append(((ids >= 0) & (ids < gpu_experts)).float().mean().item())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    ap.add_argument("--model", action="append", default=[], metavar="MODEL:METHOD:GPU_EXPERTS")
    ap.add_argument("--tokens", default="2,4,8,16,32,256")
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--layers", type=int, default=2, help="the runner's K layers (router seeds 0..K-1)")
    args = ap.parse_args()
    models = args.model or ["gpt-oss-20b:MXFP4:8", "qwen3-30b-a3b:BF16:8", "mixtral-8x7b:BF16:2"]
    rows = []
    for spec in models:
        model, method, n = spec.split(":")
        m = load_model(model, method)
        e = m.num_experts
        for t in (int(v) for v in args.tokens.split(",")):
            for layer in range(args.layers):
                s = torch.tensor(shares(m, int(n), t, args.draws, layer))
                rows.append(
                    {
                        "model": model,
                        "gpu_experts": int(n),
                        "experts": e,
                        "tokens": t,
                        "layer": layer,
                        "draws": args.draws,
                        "mean": s.mean().item(),
                        "sd": s.std().item(),
                        "p10": s.quantile(0.1).item(),
                        "p90": s.quantile(0.9).item(),
                        # the CPU's share of the pairs, relative to its expectation 1 - N/E, per draw
                        "cpu_rel_sd": s.std().item() / (1 - int(n) / e),
                    }
                )
    md = (
        "# The GPU experts' share of one prompt's routed pairs, draw to draw (the path runner's router)\n\n"
        f"{args.draws} prompt draws per model, layer and length; the CPU's relative spread is the share's "
        "standard deviation over the CPU's expected share 1 - N/E.\n\n"
        "| model | GPU experts | tokens | layer | mean share | sd | p10-p90 | CPU share, relative sd |\n"
        "|---|---|---|---|---|---|---|---|\n"
        + "".join(
            f"| {r['model']} | {r['gpu_experts']} of {r['experts']} | {r['tokens']} | {r['layer']} | {r['mean']:.3f} | "
            f"{r['sd']:.3f} | {r['p10']:.3f}-{r['p90']:.3f} | {r['cpu_rel_sd']:.0%} |\n"
            for r in rows
        )
    )
    write_result(args.out, {"models": models, "draws": args.draws, "rows": rows}, md)


if __name__ == "__main__":
    main()
