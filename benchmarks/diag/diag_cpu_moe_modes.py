"""Why the CPU MoE probe and the path runner's hybrid layer time kt-kernel differently: in one process,
on one kt-kernel layer, the same forward timed the probe's way (synchronous `forward`, uniform random
routing) and the runner's way (enqueued on a CUDA stream, the model's router), each with the other's
routing, plus a second layer built as the probe builds it; and the outputs compared.

    python benchmarks/diag/diag_cpu_moe_modes.py qwen3-30b-a3b BF16 1024,2048
"""

from __future__ import annotations

import sys

import torch

from kttune.kernels.kt_ext import quiet_stdout
from kttune.kernels.kt_moe import KtMoeLayer
from kttune.probes.common import measure
from kttune.runner.path_runner import PathRunner
from diag_common import diag_stack, layer_inputs
from kttune.spec.loader import load_model


def timed(fn) -> float:
    """Median ms of 7 calls after 2, the device synchronised around each (`probes.common.measure`)."""
    return measure(
        fn, x=0, warmup=2, repeats=7, sync=torch.cuda.synchronize if torch.cuda.is_available() else None
    ).t_ms


def main() -> None:
    name, method = sys.argv[1], sys.argv[2]
    sizes = [int(x) for x in sys.argv[3].split(",")]
    spec = load_model(name, method)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    st = diag_stack(spec, method, layers=1, max_tokens=max(sizes), device=dev)
    with quiet_stdout(to_stderr=True):
        probe_like = KtMoeLayer(
            st.host, top_k=spec.top_k, threads=13, threadpools=1, numa_nodes=[0], max_tokens=max(sizes), isa=None
        )
    r = PathRunner(st)
    layer = st.layers[0]
    print(
        f"# {name} {method}: runner layer {st.cpu.kernel_class}, probe-built layer {probe_like.kernel_class}",
        flush=True,
    )
    for m in sizes:
        h, h_cpu, (ids_r, w_r), (ids_u, w_u) = layer_inputs(st, layer, m, dev)
        out = torch.empty(m, spec.hidden_size, dtype=torch.bfloat16)
        rows = {}
        for tag, ids, w in (("router", ids_r, w_r), ("uniform", ids_u.to(dev), w_u.to(dev))):
            ic, wc = ids.cpu().contiguous(), w.cpu().contiguous()
            rows[f"sync forward, runner's layer, {tag}"] = timed(lambda: st.cpu.forward(h_cpu, ic, wc, out))
            rows[f"sync forward, probe-built layer, {tag}"] = timed(lambda: probe_like.forward(h_cpu, ic, wc, out))
            if dev == "cuda":
                rows[f"on the CUDA stream (runner), {tag}"] = timed(lambda: r._cpu_submit(h, ids, w)())
            st.cpu.forward(h_cpu, ic, wc, out)
            ref = out.float().clone()
            if dev == "cuda":
                y = r._cpu_submit(h, ids, w)().float().cpu()
                torch.cuda.synchronize()
                rel = ((y - ref).abs().mean() / ref.abs().mean()).item()
                rows[f"stream output vs sync output, {tag} (rel. mean abs diff)"] = rel
            distinct = int(torch.unique(ic).numel())
            rows[f"distinct experts, {tag}"] = distinct
        for k, v in rows.items():
            print(f"M={m:5d} {k:60s} {v:10.3f}", flush=True)
    probe_like.close()
    st.close()


if __name__ == "__main__":
    main()
