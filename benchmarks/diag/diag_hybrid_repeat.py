"""Repeat hybrid forwards on the GPU and report, per layer, whether the normed input is finite, the
share of slots routed to the GPU-resident experts and the output's magnitude (a check that repeated
runs keep the CPU experts busy)."""

import sys

import torch

from kttune.runner.path_runner import PathRunner
from diag_common import diag_stack
from kttune.spec.loader import load_model

name, method, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sizes = [int(s) for s in sys.argv[4].split(",")]
spec = load_model(name, method)
st = diag_stack(spec, method, max_tokens=max(sizes), cpu_max_tokens=4096)
st.set_gpu_experts(n)
r = PathRunner(st)
orig = r._hybrid


def spy(layer, h, ids, w):
    y = orig(layer, h, ids, w)
    torch.cuda.synchronize()
    print(
        f"    h finite {bool(torch.isfinite(h).all())} absmax {h.float().abs().max().item():.3g} gpu-share "
        f"{(ids < n).float().mean().item():.2f} y finite {bool(torch.isfinite(y).all())} absmax {y.float().abs().max().item():.3g}",
        flush=True,
    )
    return y


r._hybrid = spy
r.run_prompt(64, 64, 0, "hybrid")
for L in sizes:
    for i in range(3):
        run = r.run_prompt(L, L, L, "hybrid")
        print(f"{name} n={n} L={L} try {i}: {run.measured_ms:.1f} ms", flush=True)
st.close()
