"""All-reduce time against message size across the GPUs of this host: one process per GPU over NCCL
(the collective sglang's tensor parallelism runs after each layer's attention and MoE), or, for the
CPU variant, CPU processes over gloo.

`Curve(kind="allreduce", x_unit="bytes", params={ranks, backend, dtype})`: x is the bytes of the
tensor each rank contributes (bf16), t_ms the median time of one all_reduce (barrier-aligned start,
synchronised end, rank 0's clock)."""

from __future__ import annotations

from typing import Any

from kttune.hw.profile import Curve, Point
from kttune.probes.common import quantiles
from kttune.probes.ranks import rank_process_group, run_ranks

SIZES = tuple(1 << s for s in range(16, 29, 2))  # 64 KiB .. 256 MiB
QUICK_SIZES = (1 << 16, 1 << 20, 1 << 24, 1 << 28)


def _worker(rank: int, ranks: int, backend: str, sizes: tuple[int, ...], repeats: int, port: int, queue: Any) -> None:
    import time

    import torch
    import torch.distributed as dist

    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    with rank_process_group(rank, ranks, backend, port, queue):
        out = []
        for nbytes in sizes:
            t = torch.ones(nbytes // 2, dtype=torch.bfloat16, device=dev)
            for _ in range(2):
                dist.all_reduce(t)
            samples = []
            for _ in range(repeats):
                dist.barrier()
                if cuda:
                    torch.cuda.synchronize(dev)
                t0 = time.perf_counter()
                dist.all_reduce(t)
                if cuda:
                    torch.cuda.synchronize(dev)
                samples.append((time.perf_counter() - t0) * 1e3)
            out.append((nbytes, samples))
        if rank == 0:
            queue.put(("ok", out))


def probe_allreduce(
    ranks: int, *, backend: str = "", quick: bool = False, repeats: int = 10, timeout_s: float = 300.0
) -> Curve:
    """The all-reduce curve over `ranks` processes (NCCL on as many GPUs when CUDA has them, else
    gloo on the CPU)."""
    import torch

    if ranks < 2:
        raise ValueError("an all-reduce needs at least two ranks")
    backend = backend or ("nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= ranks else "gloo")
    sizes = QUICK_SIZES if quick else SIZES
    if backend == "gloo":
        sizes = tuple(s for s in sizes if s <= 1 << 24)  # CPU copies: keep it short
    payload = run_ranks(_worker, ranks, (ranks, backend, sizes, repeats), timeout_s)
    pts = []
    for nbytes, samples in payload:
        p10, med, p90 = quantiles(samples)
        pts.append(
            Point(
                x=nbytes,
                t_ms=med,
                t_ms_p10=p10,
                t_ms_p90=p90,
                n=len(samples),
                extra={"algbw_gbps": round(nbytes / (med * 1e-3) / 1e9, 2)},
            )
        )
    return Curve(
        kind="allreduce",
        x_unit="bytes",
        points=tuple(pts),
        params={"ranks": ranks, "backend": backend, "dtype": "bf16"},
        backend=f"torch.distributed {backend}",
    )
