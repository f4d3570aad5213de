"""The stage A probe times kt-kernel's writer (what it writes is checked in
tests/kernels/test_expert_weights.py)."""

from __future__ import annotations

import pytest

from kttune.kernels.expert_weights import write_nbytes
from kttune.kernels.kt_ext import load_kt_kernel
from kttune.probes import stage_a as sa
from kttune.probes.inventory import collect_cpu
from kttune.units import MIB


@pytest.fixture(scope="module")
def kt():
    k = load_kt_kernel()
    if k is None:
        pytest.skip("kt-kernel not importable")
    return k


@pytest.mark.kt
def test_stage_a_probe_writes_curves_from_kt_kernel(kt):
    import torch

    cpu = collect_cpu()
    opts = sa.StageAOptions(
        hidden=1024, inters=(256, 512), threads=(1,), layer_bytes=16 * MIB, warmup=1, repeats=3, min_total_s=0.0
    )
    curves = sa.probe_stage_a(opts, cpu, cores=1, numa_ids=[0], quick=True)
    assert {c.params["method"] for c in curves} == set(sa.STAGE_A_METHODS)
    for c in curves:
        assert c.kind == "stage_a_write" and c.x_unit == "bytes"
        assert c.backend == f"kt-kernel:{kt.variant}" and c.params["threads"] == 1
        assert [p.x for p in c.points] == [write_nbytes(c.params["method"], 1024, i) for i in (256, 512)]
        for p in c.points:
            assert p.t_ms > 0 and p.extra["kernel"] == c.params["kernel"]
            assert p.extra["pinned"] is torch.cuda.is_available()  # pinned slot only with CUDA
