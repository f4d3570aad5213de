import json
from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

from kttune.memory.host import (
    AVX2,
    cpu_expert_bytes,
    host_ram_breakdown,
    kernel_family,
    kt_allocation_bytes,
    kt_scratch_bytes,
)
from kttune.spec.moe_shape import MoeLayerShape
from kttune.units import GB
from tests.helpers import DATA, cfg, model


def test_all_experts_stay_in_host_ram_whatever_the_gpu_expert_count():
    # ktransformers#2084: host RAM does not shrink as experts move to the GPU
    m = model("deepseek-v3")
    a = host_ram_breakdown(m, cfg("FP8", num_gpu_experts=0)).total_bytes
    b = host_ram_breakdown(m, cfg("FP8", num_gpu_experts=64)).total_bytes
    assert a == b


def test_cpu_experts_in_the_methods_format():
    m = model("kimi-k2-thinking")
    # docs/model-configs.md#sizes-derived-from-the-configs: K2-Thinking routed bytes total 570.8 GB in INT4 g32
    assert abs(cpu_expert_bytes(m, "RAWINT4") / GB - 570.76) < 0.1
    assert cpu_expert_bytes(m, "BF16") > 3 * cpu_expert_bytes(m, "RAWINT4")


def test_cpu_scratch_grows_with_the_chunk():
    m = model("kimi-k2-thinking")
    c = cfg("RAWINT4")
    small = host_ram_breakdown(m, replace(c, chunked_prefill_size=4096)).cpu_scratch
    big = host_ram_breakdown(m, replace(c, chunked_prefill_size=32768)).cpu_scratch
    assert big > 4 * small


# ---- the scratch formula against real kt-kernel objects ------------------------------------------

RESULTS = sorted(DATA.glob("host_ram-*.json"))


def _measured_points():
    return [p for f in RESULTS for p in json.loads(f.read_text())["points"]]


@pytest.mark.skipif(
    not RESULTS, reason="no tests/data/host_ram-*.json (run benchmarks/bench_host_ram.py, copy its result there)"
)
def test_formula_within_10_percent_of_measured_kt_kernel_allocations():
    # Every point is held out: the formula is read from kt-kernel's source, nothing is fitted.
    pts = _measured_points()
    assert len(pts) >= 20
    for p in pts:
        s = MoeLayerShape(
            hidden=p["hidden"], inter=p["inter"], experts=p["experts"], top_k=p["top_k"], method=p["method"]
        )
        pred = kt_allocation_bytes(s, p["max_len"], p["layers"], amx=p["kernel"].startswith("AMX"))
        assert abs(pred / p["reserved_bytes"] - 1) <= 0.10, (p["method"], p["max_len"], pred, p["reserved_bytes"])


@given(
    n=st.integers(64, 131072),
    pools=st.sampled_from([1, 2, 4]),
    m=st.sampled_from(["BF16", "FP8", "RAWINT4", "AMXINT4"]),
)
def test_scratch_is_linear_in_max_len_and_shared_by_layers(n, pools, m):
    s = MoeLayerShape(hidden=7168, inter=2048, experts=384, top_k=8, method=m)
    fam = kernel_family(m, amx=True)
    one, two = kt_scratch_bytes(s, n, fam, pools), kt_scratch_bytes(s, 2 * n, fam, pools)
    zero = kt_scratch_bytes(s, 0, fam, pools)
    assert two - one == one - zero  # linear in max_len
    w = kt_allocation_bytes(s, n, 2, True, pools) - kt_allocation_bytes(s, n, 1, True, pools)
    assert w == kt_allocation_bytes(s, 1, 2, True, pools) - kt_allocation_bytes(s, 1, 1, True, pools)
    assert kt_scratch_bytes(s, n, AVX2, pools) > 0
