"""What the diagnostics share: the runner's stack built as they all build it (kt-kernel's console
output sent to stderr, the model's own router unless given), so each script says only its shape; the
probe's layer and options; and the timing of one call (`timed_calls`) with experts masked (`masked`).

    from diag_common import diag_stack   # the scripts run as `python benchmarks/diag/x.py`
    st = diag_stack(spec, "BF16", layers=1, threads=11, max_tokens=3072)
"""

from __future__ import annotations

import statistics
import time
from typing import Any


def diag_stack(
    spec: Any,
    method: str,
    *,
    router: Any = None,
    layers: int = 2,
    gpu_experts: int = 0,
    threads: int = 13,
    max_tokens: int,
    cpu_max_tokens: int | None = None,
    device: str = "cuda",
) -> Any:
    """`kttune.runner.stack.build_stack` of `layers` decoder layers of `spec` in `method`, `threads`
    kt-kernel workers, device buffers for `max_tokens` and kt-kernel's max_len `cpu_max_tokens`
    (default `max_tokens`)."""
    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.runner.stack import StackOptions, build_stack

    opts = StackOptions(
        layers=layers,
        gpu_experts=gpu_experts,
        cpuinfer=threads,
        max_tokens=max_tokens,
        cpu_max_tokens=cpu_max_tokens if cpu_max_tokens is not None else max_tokens,
        device=device,
    )
    with quiet_stdout(to_stderr=True):
        return build_stack(spec, router if router is not None else spec.router, method, opts)


def layer_inputs(st: Any, layer: Any, tokens: int, device: str) -> tuple:
    """A MoE layer's inputs as the runner makes them, for `tokens` random hidden states (seeded by
    the count): the normed input on the device and on the host, and the (ids, weights) of the
    layer's own router and of uniform routing (`kttune.kernels.routing.random_routing`)."""
    import torch

    from kttune.kernels.decoder import rms_norm, route
    from kttune.kernels.routing import random_routing

    spec = st.spec
    g = torch.Generator().manual_seed(tokens)
    x = (torch.randn(tokens, spec.hidden_size, generator=g) * 0.5).to(torch.bfloat16)
    h = rms_norm(x.to(device), layer.w.post_norm)
    ids_r, w_r = route(h @ layer.w.gate.t(), st.router, spec.top_k, layer.w.bias)
    ids_u, w_u = random_routing(tokens, spec.num_experts, spec.top_k, seed=tokens)
    return h, h.cpu().contiguous(), (ids_r, w_r), (ids_u, w_u)


def four_inputs(st: Any, layer: Any, spec: Any, tokens: int, device: str) -> dict:
    """What the probe-runner diagnostics feed one layer at `tokens`: four normed hidden states
    (seeded by the count) on the device (`h`) and the host (`h_cpu`), the routing of the layer's own
    router over the first and uniform routing (`kttune.kernels.routing.random_routing`), each as
    (host ids, host weights, device ids, device weights), and a host output buffer (`out`)."""
    import torch

    from kttune.kernels.decoder import rms_norm, route
    from kttune.kernels.routing import random_routing

    hs = []
    for k in range(4):
        g = torch.Generator().manual_seed(1000 * tokens + k)
        x = (torch.randn(tokens, spec.hidden_size, generator=g) * 0.5).to(torch.bfloat16).to(device)
        hs.append(rms_norm(x, layer.w.post_norm))
    ids_r, w_r = route(hs[0] @ layer.w.gate.t(), st.router, spec.top_k, layer.w.bias)
    ids_u, w_u = random_routing(tokens, spec.num_experts, spec.top_k, seed=tokens)
    return {
        "h": hs,
        "router": (ids_r.cpu().contiguous(), w_r.cpu().contiguous(), ids_r, w_r),
        "uniform": (ids_u.contiguous(), w_u.contiguous(), ids_u.to(device), w_u.to(device)),
        "h_cpu": [h.cpu().contiguous() for h in hs],
        "out": torch.empty(tokens, spec.hidden_size, dtype=torch.bfloat16),
    }


def probe_built_layer(st: Any, spec: Any, threads: int, isa: Any, max_tokens: int) -> Any:
    """A kt-kernel layer over the stack's host experts built as the CPU MoE probe builds it: its
    max_len, one pool on NUMA node 0, the host's ISA (the runner's layer takes `cpu_max_tokens`)."""
    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.kernels.kt_moe import KtMoeLayer

    with quiet_stdout(to_stderr=True):
        return KtMoeLayer(
            st.host, top_k=spec.top_k, threads=threads, threadpools=1, numa_nodes=[0], max_tokens=max_tokens, isa=isa
        )


def probe_options(spec: Any, method: str, sizes: list[int], threads: int) -> Any:
    """`probe_cpu_moe`'s options at one model's expert shape, sizes and thread count, as
    `kttune probe --model` times them (`kttune.probes.run.cpu_moe_options`, its token series replaced
    by `sizes`)."""
    from dataclasses import replace

    from kttune.probes.run import ProbeOptions, cpu_moe_options

    full = cpu_moe_options(ProbeOptions(model=spec, methods=(method,), threads=(threads,)))
    return replace(full, tokens=tuple(sizes))


def runner_stack(run_spec: Any, spec: Any, method: str, threads: int, sizes: list[int], device: str) -> Any:
    """One decoder layer of `run_spec` as the path runner builds it for forwards of `sizes`: the
    model's own router, kt-kernel's max_len the runner's default (`PathsRequest.cpu_max_tokens`,
    4,096) or the largest size."""
    return diag_stack(
        run_spec,
        method,
        router=spec.router,
        layers=1,
        threads=threads,
        max_tokens=max(sizes),
        cpu_max_tokens=max(4096, max(sizes)),
        device=device,
    )


def timed_calls(fn, calls: int, gap_s: float = 0.0) -> float:
    """One warm-up call, then `calls` timed ones (a `gap_s` sleep after each); their median, ms."""
    fn()
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
        if gap_s:
            time.sleep(gap_s)
    return statistics.median(out)


def masked(layer, n: int, fn):
    """`fn()` with the layer's first `n` experts masked (`KtMoeLayer.set_gpu_experts`), the mask cleared after."""
    layer.set_gpu_experts(n)
    try:
        return fn()
    finally:
        layer.set_gpu_experts(0)
