"""Shared test inputs: real catalog models and the shipped profiles."""

from __future__ import annotations

from functools import lru_cache

from kttune.config import LaunchConfig
from kttune.hw.registry import load_shipped
from kttune.spec.loader import load_model

DATASHEET_H200 = "datasheet-h200-pcie5-xeon-amx-16c"


@lru_cache(maxsize=None)
def model(name: str, method: str | None = None):
    return load_model(name, method)


@lru_cache(maxsize=None)
def profile(name: str = DATASHEET_H200):
    return load_shipped(name)


def cfg(method: str, **kw) -> LaunchConfig:
    base = dict(method=method, tp=1, num_gpu_experts=0, chunked_prefill_size=8192, gpu_prefill_token_threshold=0,
                max_total_tokens=65536, cpuinfer_threads=15, threadpool_count=1, max_running_requests=8,
                cuda_graph_max_bs=8)
    base.update(kw)
    return LaunchConfig(**base)
