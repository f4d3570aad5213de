"""GPU MoE compute time against tokens, per method, for the model's expert shapes: what the layerwise
path's compute step (and the GPU experts of the hybrid path) cost.

Ours from `kttune.kernels.grouped_moe` (bf16 grouped GEMM, fp8 per-channel scaled grouped GEMM,
Triton int4 w4a16); where sglang's `fused_moe` (triton) or sgl-kernel's `fused_marlin_moe` import, they
are timed too and their curves say so in `backend`. Random uniform top-k routing over all experts.
"""

from __future__ import annotations

from kttune.hw.profile import Curve, Point
from kttune.probes.common import NullReporter, Reporter
from kttune.probes.gpu_common import cuda_time_point
from kttune.spec.methods import REPACKED_METHODS
from kttune.spec.moe_shape import MoeLayerShape
from kttune.units import GIB

TOKENS = (1, 4, 16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768)
TOKENS_QUICK = (1, 16, 256, 2048, 8192)
GPU_MOE_METHODS = ("BF16", "FP8", "RAWINT4")  # timed at every shape
# every method the GPU MoE probe can time: the default set and MXFP4 (timed for a model served in it)
GPU_MOE_KERNELS = GPU_MOE_METHODS + ("MXFP4",)


def _weights(shape: MoeLayerShape, method: str, device):
    """Random experts of `shape` on the GPU in the method's layout (quantised on the GPU)."""
    import torch

    from kttune.kernels import grouped_moe as gm
    from kttune.kernels.int4 import NIBBLE_CODES

    E, H, I = shape.experts, shape.hidden, shape.inter
    g = torch.Generator(device=device).manual_seed(0)
    if method == "BF16":
        w13 = torch.randn(E, 2 * I, H, device=device, dtype=torch.bfloat16, generator=g) * 0.02
        w2 = torch.randn(E, H, I, device=device, dtype=torch.bfloat16, generator=g) * 0.02
        return (w13, w2)
    if method in ("FP8", "FP8_PERCHANNEL"):
        q13, s13, q2, s2 = [], [], [], []
        for _ in range(E):  # expert by expert: keeps the fp32 transient small
            a, b = gm.quantize_fp8_per_channel(torch.randn(2 * I, H, device=device, generator=g) * 0.02)
            q13.append(a), s13.append(b)
            a, b = gm.quantize_fp8_per_channel(torch.randn(H, I, device=device, generator=g) * 0.02)
            q2.append(a), s2.append(b)
        return gm.Fp8Weights(torch.stack(q13), torch.stack(s13), torch.stack(q2), torch.stack(s2))
    if method in REPACKED_METHODS:
        w13q = torch.randint(-(2**31), 2**31 - 1, (E, H // 8, 2 * I), device=device, dtype=torch.int32, generator=g)
        w2q = torch.randint(-(2**31), 2**31 - 1, (E, I // 8, H), device=device, dtype=torch.int32, generator=g)
        if method == "MXFP4":  # power-of-two scales, as the checkpoint's ue8m0 bytes give
            w13s = torch.exp2(-torch.randint(7, 11, (E, H // 32, 2 * I), device=device, generator=g).float())
            w2s = torch.exp2(-torch.randint(7, 11, (E, I // 32, H), device=device, generator=g).float())
            return gm.Int4Weights(w13q, w13s.to(torch.bfloat16), w2q, w2s.to(torch.bfloat16), NIBBLE_CODES[method])
        w13s = (torch.rand(E, H // 32, 2 * I, device=device, generator=g) * 0.004 + 0.001).to(torch.bfloat16)
        w2s = (torch.rand(E, I // 32, H, device=device, generator=g) * 0.004 + 0.001).to(torch.bfloat16)
        return gm.Int4Weights(w13q, w13s, w2q, w2s)
    raise ValueError(method)


def _weight_bytes(shape: MoeLayerShape, method: str) -> int:
    from kttune.spec.methods import bytes_per_expert, get_method

    fmt = "fp8_channel" if method == "FP8" else get_method(method).cpu_format
    return shape.experts * bytes_per_expert(fmt, shape.hidden, shape.inter)


def probe_gpu_moe_shape(
    shape: MoeLayerShape,
    methods=GPU_MOE_METHODS,
    *,
    quick: bool = False,
    gpu: int = 0,
    reporter: Reporter | None = None,
) -> tuple[list[Curve], list[str]]:
    import torch

    from kttune.kernels import grouped_moe as gm
    from kttune.kernels.routing import random_routing

    rep = reporter or NullReporter()
    device = torch.device("cuda", gpu)
    tokens = TOKENS_QUICK if quick else TOKENS
    curves, notes = [], []
    for method in methods:
        need = (
            1.2 * _weight_bytes(shape, method) + 8 * max(tokens) * shape.top_k * max(2 * shape.inter, shape.hidden) * 2
        )
        free, _ = torch.cuda.mem_get_info(device)
        if need > 0.9 * free:
            notes.append(f"gpu_moe {shape.name} {method}: skipped, needs {need / GIB:.1f} GiB, {free / GIB:.1f} free")
            continue
        w = _weights(shape, method, device)
        pts, skipped, backend = [], [], ""
        for m in tokens:
            rep.step(f"gpu_moe {shape.name} {method} {m} tokens", 0)
            x = torch.randn(m, shape.hidden, device=device, dtype=torch.bfloat16)
            ids, tw = random_routing(m, shape.experts, shape.top_k, device, seed=m)
            if method == "BF16":
                fn = lambda: gm.moe_bf16(x, w[0], w[1], ids, tw)  # noqa: E731
            elif method in REPACKED_METHODS:
                fn = lambda: gm.moe_int4(x, w, ids, tw)  # noqa: E731
            else:
                fn = lambda: gm.moe_fp8(x, w, ids, tw)  # noqa: E731
            try:
                _, backend = fn()
                p = cuda_time_point(fn, x=m, warmup=2, repeats=5, min_total_ms=50, max_repeats=20)
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()
                skipped.append({"x": m, "reason": "CUDA out of memory"})
                continue
            flops = 2 * m * shape.top_k * 3 * shape.hidden * shape.inter
            pts.append(
                Point(p.x, p.t_ms, p.t_ms_p10, p.t_ms_p90, p.n, {"tflops": round(flops / (p.t_ms * 1e-3) / 1e12, 2)})
            )
        params = {
            "method": method,
            "hidden": shape.hidden,
            "inter": shape.inter,
            "experts": shape.experts,
            "top_k": shape.top_k,
            "model": shape.name,
        }
        if method == "FP8":
            params["fp8_scales"] = "per-channel weights, per-token activations (stand-in for 128x128 block)"
        curves.append(
            Curve("gpu_moe", "tokens", tuple(pts), params, backend=f"ours: {backend}", skipped=tuple(skipped))
        )
        curves += _sglang_curves(shape, method, w, tokens, device, rep)
        w = None  # this method's weights go before the next is built
        torch.cuda.empty_cache()
    return curves, notes


def sglang_ops_available() -> dict[str, bool]:
    """Which of sglang's / sgl-kernel's real MoE ops import here."""
    out = {}
    try:
        from sglang.srt.layers.moe.fused_moe_triton import fused_moe  # noqa: F401

        out["fused_moe"] = True
    except Exception:
        out["fused_moe"] = False
    try:
        from sgl_kernel import gptq_marlin_repack  # noqa: F401

        out["gptq_marlin_repack"] = True
    except Exception:
        out["gptq_marlin_repack"] = False
    try:
        from sglang.srt.layers.moe.fused_moe_triton.fused_marlin_moe import fused_marlin_moe  # noqa: F401

        out["fused_marlin_moe"] = True
    except Exception:
        out["fused_marlin_moe"] = False
    return out


def _sglang_curves(shape, method, w, tokens, device, rep) -> list[Curve]:
    """sglang's triton fused_moe for bf16 when importable (its signature: hidden, w1, w2, topk_output)."""
    if method != "BF16" or not sglang_ops_available().get("fused_moe"):
        return []
    import torch

    from kttune.kernels.routing import random_routing

    try:
        from sglang.srt.layers.moe.fused_moe_triton import fused_experts

        pts = []
        for m in tokens:
            x = torch.randn(m, shape.hidden, device=device, dtype=torch.bfloat16)
            ids, tw = random_routing(m, shape.experts, shape.top_k, device, seed=m)
            fn = lambda: fused_experts(x, w[0], w[1], tw, ids.to(torch.int32))  # noqa: E731
            pts.append(cuda_time_point(fn, x=m, repeats=5, min_total_ms=50, max_repeats=20))
        return [
            Curve(
                "gpu_moe",
                "tokens",
                tuple(pts),
                {
                    "method": method,
                    "hidden": shape.hidden,
                    "inter": shape.inter,
                    "experts": shape.experts,
                    "top_k": shape.top_k,
                    "model": shape.name,
                },
                backend="sglang fused_experts (triton)",
            )
        ]
    except Exception as e:  # sglang's API moves between releases
        rep.note(f"sglang fused_experts present but not timed: {type(e).__name__}: {e}")
        return []
