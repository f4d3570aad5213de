"""Prefill attention time of one layer against context length (a chunk of `context` tokens from an
empty cache), for the model's attention: GQA by torch SDPA, MLA in its prefill form (latent expanded
by kv_b_proj, then SDPA). See `kttune.kernels.attention`."""

from __future__ import annotations

from kttune.hw.profile import Curve, Point
from kttune.probes.common import NullReporter, Reporter
from kttune.kernels.attention_shape import AttentionShape
from kttune.probes.gpu_common import cuda_time_point

CONTEXTS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
CONTEXTS_QUICK = (1024, 4096, 16384)


def attention_flops(shape: AttentionShape, t: int) -> float:
    """Causal attention FLOPs (QK^T and PV, half the square) plus the MLA kv expansion GEMM."""
    f = 2 * shape.heads * t * t * (shape.head_dim + shape.v_head_dim) / 2
    if shape.attention == "mla":
        nope = shape.head_dim - shape.qk_rope_head_dim
        f += 2 * t * shape.kv_lora_rank * shape.heads * (nope + shape.v_head_dim)
    return f


def probe_attention(
    shape: AttentionShape, *, quick: bool = False, gpu: int = 0, reporter: Reporter | None = None
) -> Curve:
    import torch

    from kttune.kernels import attention as attn

    rep = reporter or NullReporter()
    device = torch.device("cuda", gpu)
    bf = torch.bfloat16
    pts, skipped = [], []
    backend = "torch SDPA"
    for t in CONTEXTS_QUICK if quick else CONTEXTS:
        rep.step(f"attention {shape.name} {shape.attention} {t}", 0)
        try:
            if shape.attention == "mla":
                dims = attn.MlaDims(
                    shape.heads,
                    shape.kv_lora_rank,
                    shape.head_dim - shape.qk_rope_head_dim,
                    shape.qk_rope_head_dim,
                    shape.v_head_dim,
                )
                q = torch.randn(t, shape.heads, shape.head_dim, device=device, dtype=bf)
                c = torch.randn(t, shape.kv_lora_rank, device=device, dtype=bf)
                kr = torch.randn(t, shape.qk_rope_head_dim, device=device, dtype=bf)
                w = (
                    torch.randn(
                        shape.heads * (dims.qk_nope_head_dim + dims.v_head_dim),
                        shape.kv_lora_rank,
                        device=device,
                        dtype=bf,
                    )
                    * 0.05
                )
                fn = lambda: attn.mla_prefill(q, c, kr, w, dims)  # noqa: E731
                backend = "torch kv_b_proj matmul + SDPA (MLA prefill, non-absorbed)"
            else:
                q = torch.randn(t, shape.heads, shape.head_dim, device=device, dtype=bf)
                k = torch.randn(t, shape.kv_heads, shape.head_dim, device=device, dtype=bf)
                v = torch.randn(t, shape.kv_heads, shape.v_head_dim, device=device, dtype=bf)
                fn = lambda: attn.gqa_prefill(q, k, v)  # noqa: E731
                backend = "torch SDPA causal (GQA)"
            p = cuda_time_point(fn, x=t, warmup=2, repeats=5, min_total_ms=50, max_repeats=20)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            skipped.append({"x": t, "reason": "CUDA out of memory"})
            continue
        tf = attention_flops(shape, t) / (p.t_ms * 1e-3) / 1e12
        pts.append(Point(p.x, p.t_ms, p.t_ms_p10, p.t_ms_p90, p.n, {"tflops": round(tf, 2)}))
    return Curve(
        "attention",
        "context",
        tuple(pts),
        shape.params() | {"model": shape.name},
        backend=backend,
        skipped=tuple(skipped),
    )


# ---- the attention block ---------------------------------------------------------------------------

# Chunk sizes (tokens, from an empty cache) the attention block is timed at: the smallest are all
# launch and host-side work, so the fit's fixed part is measured where nothing else hides it.
BLOCK_TOKENS = (16, 64, 256, 1024, 4096)
BLOCK_TOKENS_QUICK = (16, 256, 4096)


def block_backend(device) -> str:
    """What runs the attention block on `device`, as the path runner runs it: torch ops, with RMSNorm
    and rotary as one Triton launch each on CUDA where Triton runs (`kttune.kernels.decoder`)."""
    import torch

    from kttune.kernels.decoder import fused_elementwise

    fused = fused_elementwise(torch.device(device))
    how = "torch ops, RMSNorm and rotary one Triton launch each" if fused else "eager torch ops"
    return f"kttune.kernels.decoder.attention_block ({how}, as the path runner runs them)"


def probe_attention_block(
    spec, *, quick: bool = False, device=None, reporter: Reporter | None = None, repeats: int = 7
) -> Curve:
    """Wall time of one MoE decoder layer's attention block (`kttune.kernels.decoder.attention_block`:
    norms, projections, attention, residual, router) of `spec` at its real shape, the device
    synchronised before and after each call as the path runner times its `attn` phase. Its fixed
    part is the per-layer launch and host-side cost no SDPA or GEMM curve holds
    (docs/cost-model.md#the-attention-blocks-fixed-cost). Runs on CUDA, or on the CPU for tests."""
    import time

    import torch

    from kttune.kernels.attention_shape import attention_shape, block_layer_id
    from kttune.kernels.decoder import Attention, AttnCache, LayerWeights, attention_block
    from kttune.probes.common import point_from_samples

    rep = reporter or NullReporter()
    dev = torch.device(device) if device is not None else torch.device("cuda", 0)
    shape = attention_shape(spec, block_layer_id(spec))
    attn = Attention(shape, dev)
    w = LayerWeights.random(spec.hidden_size, spec.num_experts, 0, spec.router, dev)
    weights = attn.nbytes + w.nbytes
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    g = torch.Generator(device=dev).manual_seed(0)
    pts, skipped = [], []
    for t in BLOCK_TOKENS_QUICK if quick else BLOCK_TOKENS:
        rep.step(f"attention block {spec.name} {t}", 0)
        try:
            x0 = torch.randn(t, spec.hidden_size, generator=g, device=dev, dtype=torch.bfloat16).mul_(0.5)
            pos = torch.arange(t, device=dev)

            samples = []
            for i in range(3 + repeats):  # 3 warm-up calls: kernels, the allocator's blocks
                x = x0.clone()  # the block adds its residual in place; the copy is made before the clock starts
                cache = AttnCache()
                sync()
                t0 = time.perf_counter()
                attention_block(attn, w, x, pos, cache, spec.router, spec.top_k)
                sync()
                if i >= 3:
                    samples.append((time.perf_counter() - t0) * 1e3)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            skipped.append({"x": t, "reason": "CUDA out of memory"})
            continue
        pts.append(point_from_samples(t, samples))
    params = shape.params() | {
        "model": spec.name,
        "hidden": spec.hidden_size,
        "block_params": weights // 2,  # bf16
        "experts": spec.num_experts,
        "top_k": spec.top_k,
        "qk_norm": shape.qk_norm or "none",
    }
    return Curve("attention_block", "tokens", tuple(pts), params, backend=block_backend(dev), skipped=tuple(skipped))
