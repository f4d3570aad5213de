"""The routing the runner feeds each layer on the device (finite inputs, distinct experts, the largest
expert load, the eight busiest experts' share of the slots) beside the hybrid MoE times.

    python benchmarks/diag/diag_runner_routing.py qwen3-30b-a3b BF16 2048
"""

from __future__ import annotations

import sys

import torch

from kttune.runner.path_runner import PathRunner
from diag_common import diag_stack
from kttune.spec.loader import load_model


def main() -> None:
    name, method, m = sys.argv[1], sys.argv[2], int(sys.argv[3])
    spec = load_model(name, method)
    st = diag_stack(spec, method, max_tokens=m)
    r = PathRunner(st)
    hybrid = r._hybrid

    def spy(layer, h, ids, w):
        cnt = torch.bincount(ids.flatten().clamp_min(0), minlength=spec.num_experts)
        top8 = cnt.sort(descending=True).values[:8].sum().item() / cnt.sum().item()
        print(
            f"  layer {layer.layer_id} h finite {bool(torch.isfinite(h).all())} absmax {h.float().abs().max().item():.3g} "
            f"std {h.float().std().item():.3g} distinct {int((cnt > 0).sum())} max load {int(cnt.max())} "
            f"top-8 share {top8:.2f}",
            flush=True,
        )
        return hybrid(layer, h, ids, w)

    r._hybrid = spy
    for _ in range(3):
        run = r.run_prompt(m, m, m, "hybrid")
        print(name, m, "moe ms", [round(x, 1) for x in run.forwards[0].moe_ms], flush=True)
    st.close()


if __name__ == "__main__":
    main()
