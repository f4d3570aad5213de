"""bf16 GEMM rate on the GPU: [tokens, hidden] x [hidden, out], the dense layers and projections the
cost model adds around MoE and attention."""

from __future__ import annotations

from kttune.hw.profile import Curve, Point
from kttune.probes.common import NullReporter, Reporter
from kttune.probes.gpu_common import cuda_time_point

TOKENS = (1, 16, 128, 512, 2048, 8192, 16384, 32768)
TOKENS_QUICK = (16, 512, 4096, 16384)


def probe_gpu_gemm(
    hidden: int, out: int, *, quick: bool = False, gpu: int = 0, reporter: Reporter | None = None
) -> Curve:
    import torch

    rep = reporter or NullReporter()
    device = torch.device("cuda", gpu)
    w = torch.randn(hidden, out, device=device, dtype=torch.bfloat16)
    pts = []
    for m in TOKENS_QUICK if quick else TOKENS:
        rep.step(f"gpu_gemm {m}x{hidden}x{out}", 0)
        a = torch.randn(m, hidden, device=device, dtype=torch.bfloat16)
        p = cuda_time_point(lambda: a @ w, x=m, repeats=10, min_total_ms=30, max_repeats=100)
        tf = 2 * m * hidden * out / (p.t_ms * 1e-3) / 1e12
        pts.append(Point(p.x, p.t_ms, p.t_ms_p10, p.t_ms_p90, p.n, {"tflops": round(tf, 2)}))
    return Curve("gpu_gemm", "tokens", tuple(pts), {"hidden": hidden, "out": out}, backend="torch.matmul (cuBLAS) bf16")


def matmul_peak_tflops(gpu: int = 0, n: int = 8192) -> float:
    """The box's measured bf16 matmul rate (n x n x n on random data), for benchmarks."""
    import torch

    device = torch.device("cuda", gpu)
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    p = cuda_time_point(lambda: a @ b, x=n, warmup=3, repeats=10)
    return 2 * n**3 / (p.t_ms * 1e-3) / 1e12
