"""Throughput of each GPU kernel of the layerwise path against this box's ceilings.

Ceilings measured first: pinned H2D bandwidth (the pipeline's), device-to-device copy bandwidth
(bytes read + written) and the bf16 matmul rate (8192^3 on random data). Then:

- stage C repack (Triton): bytes read + written per second vs the D2D copy bandwidth
- int4 w4a16 MoE GEMM (Triton), bf16 and fp8 grouped MoE (torch): TFLOP/s vs the bf16 matmul rate at
  large token counts, and bytes of the experts actually routed to per second vs the D2D bandwidth
  (the HBM's rate) at small ones
- attention (SDPA): TFLOP/s vs the matmul rate
- the layerwise pipeline: layer GB/s vs pinned H2D

Prints a table (and `--json FILE` writes the numbers). Not a test: nothing is asserted.
Usage: python benchmarks/bench_gpu_kernels.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys

from kttune.units import GIB


def _copy_ceilings(dev) -> tuple[float, float]:
    """Pinned H2D and device-to-device copy rates (GB/s) over 2 GiB; the buffers go on return."""
    import torch

    from kttune.probes.gpu_common import cuda_time_point

    n = 2 * GIB
    h = torch.empty(n, dtype=torch.uint8, pin_memory=True).fill_(1)
    g = torch.empty(n, dtype=torch.uint8, device=dev).fill_(2)
    g2 = torch.empty_like(g)
    h2d = n / (cuda_time_point(lambda: g.copy_(h, non_blocking=True), x=n).t_ms * 1e-3) / 1e9
    d2d = 2 * n / (cuda_time_point(lambda: g2.copy_(g), x=n).t_ms * 1e-3) / 1e9
    return h2d, d2d


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-pipeline", action="store_true")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to benchmark")
        return 1
    from kttune.kernels import grouped_moe as gm
    from kttune.kernels import int4 as int4_fmt
    from kttune.kernels.expert_weights import slot_kinds
    from kttune.kernels.routing import random_routing
    from kttune.probes import gpu_attention, gpu_gemm
    from kttune.probes.gpu_common import DEEPSEEK_ATTN, DEEPSEEK_V3, QWEN3_30B_A3B, QWEN3_ATTN, cuda_time_point
    from kttune.probes.gpu_moe import _weights

    dev = torch.device("cuda", 0)
    rows: list[dict] = []

    def row(kernel, shape, value, unit, ceiling, ceiling_name, t_ms, backend=""):
        r = {
            "kernel": kernel,
            "shape": shape,
            "value": round(value, 2),
            "unit": unit,
            "ceiling": round(ceiling, 1),
            "ceiling_name": ceiling_name,
            "fraction": round(value / ceiling, 3) if ceiling else None,
            "t_ms": round(t_ms, 4),
            "backend": backend,
        }
        rows.append(r)

    # ---- ceilings -----------------------------------------------------------------------------
    h2d, d2d = _copy_ceilings(dev)
    mm = gpu_gemm.matmul_peak_tflops()
    print(f"ceilings: pinned H2D {h2d:.1f} GB/s, D2D copy {d2d:.0f} GB/s (read+write), bf16 matmul {mm:.0f} TFLOP/s")

    # ---- stage C repack ------------------------------------------------------------------------
    for shape in (QWEN3_30B_A3B, DEEPSEEK_V3):
        kinds = {k.name: k for k in slot_kinds("RAWINT4", shape.hidden, shape.inter)}
        per = sum(k.nbytes for k in kinds.values())
        for c in (1, 16) if args.quick else (1, 4, 16, 64):
            src = {
                nm: (
                    torch.randint(-(2**31), 2**31 - 1, (c,) + k.shape, dtype=torch.int32, device=dev)
                    if k.dtype == torch.int32
                    else torch.rand((c,) + k.shape, device=dev).to(k.dtype)
                )
                for nm, k in kinds.items()
            }
            dst = {nm: torch.empty((c, t.shape[2], t.shape[1]), dtype=t.dtype, device=dev) for nm, t in src.items()}

            def fn(src=src, dst=dst):
                int4_fmt.repack_int4(src["w13"], src["s13"], dst["w13"], dst["s13"])
                int4_fmt.repack_int4(src["w2"], src["s2"], dst["w2"], dst["s2"])

            t = cuda_time_point(fn, x=c, repeats=20).t_ms
            row(
                "stage C repack (triton)",
                f"{shape.name} x{c} experts",
                2 * c * per / (t * 1e-3) / 1e9,
                "GB/s",
                d2d,
                "D2D",
                t,
            )

    # ---- MoE -----------------------------------------------------------------------------------
    for shape in (QWEN3_30B_A3B, DEEPSEEK_V3):
        for method in ("BF16", "FP8", "RAWINT4"):
            w = _weights(shape, method, dev)
            wbytes = {"BF16": 2, "FP8": 1, "RAWINT4": 0.5625}[method] * 3 * shape.hidden * shape.inter * shape.experts
            for m in (16, 8192) if args.quick else (1, 16, 256, 2048, 8192, 32768):
                x = torch.randn(m, shape.hidden, device=dev, dtype=torch.bfloat16)
                ids, tw = random_routing(m, shape.experts, shape.top_k, dev, seed=m)
                fn = {
                    "BF16": lambda: gm.moe_bf16(x, w[0], w[1], ids, tw),
                    "FP8": lambda: gm.moe_fp8(x, w, ids, tw),
                    "RAWINT4": lambda: gm.moe_int4(x, w, ids, tw),
                }[method]
                _, backend = fn()
                t = cuda_time_point(fn, x=m, repeats=5, min_total_ms=50).t_ms
                flops = 2 * m * shape.top_k * 3 * shape.hidden * shape.inter
                touched = int(torch.unique(ids).numel()) / shape.experts  # experts whose weights are read
                row(
                    f"MoE {method}",
                    f"{shape.name} {m} tok",
                    flops / (t * 1e-3) / 1e12,
                    "TFLOP/s",
                    mm,
                    "bf16 matmul",
                    t,
                    backend,
                )
                # D2D copy GB/s counts bytes read + written: the HBM's total rate, which a pure read can also reach
                row(
                    f"MoE {method} weights",
                    f"{shape.name} {m} tok",
                    wbytes * touched / (t * 1e-3) / 1e9,
                    "GB/s",
                    d2d,
                    "D2D (HBM)",
                    t,
                    backend,
                )
            del w
            torch.cuda.empty_cache()

    # ---- attention -----------------------------------------------------------------------------
    for a in (QWEN3_ATTN, DEEPSEEK_ATTN):
        c = gpu_attention.probe_attention(a, quick=True)
        for p in c.points:
            row(
                f"attention {a.attention}",
                f"{a.name} {int(p.x)} ctx",
                p.extra["tflops"],
                "TFLOP/s",
                mm,
                "bf16 matmul",
                p.t_ms,
                c.backend,
            )

    # ---- pipeline ------------------------------------------------------------------------------
    if not args.no_pipeline:
        from kttune.probes import gpu_pipeline

        curves, results, notes = gpu_pipeline.probe_pipeline_layer(
            QWEN3_30B_A3B,
            configs=gpu_pipeline.QUICK_CONFIGS,
            repeats=2,
            expert_fractions=(1.0,),
            threads_options=gpu_pipeline.default_thread_options(quick=True),
        )
        for nt in notes:
            print("note:", nt)
        for curve in curves:
            p = curve.points[-1]
            row(
                "layerwise pipeline",
                f"{QWEN3_30B_A3B.name} BF16 layer, {curve.params['threads']} thr",
                p.x / (p.t_ms * 1e-3) / 1e9,
                "GB/s",
                h2d,
                "pinned H2D",
                p.t_ms,
                curve.backend,
            )

    w = max(len(r["kernel"]) for r in rows)
    print(f"{'kernel':<{w}}  {'shape':<28} {'value':>9} {'unit':<8} {'of ceiling':>10}  ceiling")
    for r in rows:
        print(
            f"{r['kernel']:<{w}}  {r['shape']:<28} {r['value']:>9.2f} {r['unit']:<8} {100 * (r['fraction'] or 0):>9.1f}%  "
            f"{r['ceiling_name']} {r['ceiling']}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ceilings": {"h2d_gbps": h2d, "d2d_gbps": d2d, "matmul_tflops": mm}, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
