"""kt-kernel worker pools (`CPUInfer`), one per thread configuration for the whole process.

sglang-kt builds one CPUInfer per server process and keeps it; the probes and the layerwise
writer do the same. Building and destroying pools over and over inside one process crashed
kt-kernel 0.7.2 now and then (a segfault or abort inside the next `CPUInfer(...)` constructor,
about one pytest run in ten on the AVX2 development VM), and an idle pool costs nothing once its
workers have parked (measured: 0.09 CPU-s in the first 2 s, then none).
"""

from __future__ import annotations

from typing import Any, Sequence

_POOLS: dict[tuple[int, ...], Any] = {}


def pool_split(threads: int, pools: int) -> list[int]:
    """Threads per sub-pool, as kt-kernel's `_get_cpu_infer` splits `--kt-cpuinfer`:
    pool i gets n // p + (i < n % p)."""
    return [threads // pools + (1 if i < threads % pools else 0) for i in range(pools)]


def cpu_infer(ext: Any, threads: int, pools: int = 1, numa_nodes: Sequence[int] | None = None) -> Any:
    """The process's CPUInfer with `threads` workers split over `pools` NUMA sub-pools."""
    nodes = list(numa_nodes) if numa_nodes is not None else list(range(pools))
    key = (threads, pools, *nodes[:pools])
    if key not in _POOLS:
        cfg = ext.WorkerPoolConfig()
        cfg.subpool_count = pools
        cfg.subpool_numa_map = nodes[:pools]
        cfg.subpool_thread_count = pool_split(threads, pools)
        _POOLS[key] = ext.CPUInfer(cfg)
    return _POOLS[key]
