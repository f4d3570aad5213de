"""Both prefill paths, the per-forward switch, the crossover and the traffic law."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kttune.cost.components import Components
from kttune.cost.decode import decode_step_ms
from kttune.cost.prefill import (
    crossover_tokens,
    forward_path,
    hybrid_moe_layer,
    layerwise_moe_layer,
    layerwise_traffic_bytes,
    prefill_forwards,
    prefill_time_ms,
)
from kttune.spec.forwards import chunks_of
from tests.helpers import cfg, model, profile


def comp(name="minimax-m2.1", method="FP8", tp=1):
    return Components(profile(), model(name), method, tp)


def test_full_chunks_go_layerwise_and_a_short_tail_goes_hybrid():
    c = comp()
    k = cfg("FP8", chunked_prefill_size=8192, gpu_prefill_token_threshold=4096)
    fw = prefill_forwards(c, k, 2 * 8192 + 1000)
    assert [f.path for f in fw] == ["layerwise", "layerwise", "hybrid"]
    assert [f.prefix for f in fw] == [0, 8192, 16384]


def test_threshold_above_chunk_never_fires():
    c = comp()
    k = cfg("FP8", chunked_prefill_size=4096, gpu_prefill_token_threshold=8192)
    assert all(f.path == "hybrid" for f in prefill_forwards(c, k, 100_000))


def test_methods_without_layerwise_always_run_hybrid():
    c = comp("deepseek-v3", "AMXINT4")
    assert forward_path(c, cfg("AMXINT4", gpu_prefill_token_threshold=1), 8192) == "hybrid"
    assert crossover_tokens(c, cfg("AMXINT4")) is None


def test_crossover_separates_the_paths():
    c = comp()
    k = cfg("FP8", num_gpu_experts=4)
    x = crossover_tokens(c, k)
    assert x is not None and 64 < x < 65536
    assert layerwise_moe_layer(c, k, x).total_ms <= hybrid_moe_layer(c, k, x).total_ms
    assert layerwise_moe_layer(c, k, x - 64).total_ms > hybrid_moe_layer(c, k, x - 64).total_ms


@settings(max_examples=30, deadline=None)
@given(L=st.integers(20_000, 200_000), C=st.sampled_from([4096, 8192, 16384]))
def test_traffic_is_forwards_times_layers_times_layer_bytes(L, C):
    c = comp()
    k = cfg("FP8", chunked_prefill_size=C, gpu_prefill_token_threshold=2048)
    m = c.model
    n_lw = sum(1 for s in chunks_of(L, C) if s >= 2048)
    assert layerwise_traffic_bytes(c, k, L) == n_lw * m.num_moe_layers * m.num_experts * c.gpu_bytes_per_expert


@settings(max_examples=20, deadline=None)
@given(L=st.integers(40_000, 200_000))
def test_layerwise_prefill_time_falls_as_the_chunk_grows(L):
    # each layerwise chunk re-streams every layer: a bigger chunk streams fewer times
    c = comp()
    times = [
        prefill_time_ms(c, cfg("FP8", chunked_prefill_size=C, gpu_prefill_token_threshold=1024), L)
        for C in (4096, 8192, 16384)
    ]
    assert times[0] > times[1] > times[2]


def test_gpu_experts_speed_up_the_hybrid_path_and_decode():
    c = comp()
    k0, k32 = cfg("FP8", num_gpu_experts=0), cfg("FP8", num_gpu_experts=32)
    assert hybrid_moe_layer(c, k32, 2048).total_ms < hybrid_moe_layer(c, k0, 2048).total_ms
    assert decode_step_ms(c, k32, 4, 4096) < decode_step_ms(c, k0, 4, 4096)


def test_bf16_skips_streaming_resident_gpu_experts_but_fp8_resends_them():
    # docs/sglang-kt.md#the-two-prefill-paths: BF16/MXFP4 copy resident experts GPU->GPU; FP8 re-sends every expert
    bf = Components(profile(), model("qwen3-30b-a3b"), "BF16")
    assert (
        layerwise_moe_layer(bf, cfg("BF16", num_gpu_experts=64), 8192).load_ms
        < layerwise_moe_layer(bf, cfg("BF16", num_gpu_experts=0), 8192).load_ms
    )
    fp = comp()
    assert layerwise_moe_layer(fp, cfg("FP8", num_gpu_experts=64), 8192).load_ms == pytest.approx(
        layerwise_moe_layer(fp, cfg("FP8", num_gpu_experts=0), 8192).load_ms
    )


def test_cpu_experts_run_on_rank0_so_tp_does_not_speed_them_up():
    c1, c2 = comp(tp=1), comp(tp=2)
    k = cfg("FP8")
    assert hybrid_moe_layer(c2, replace(k, tp=2), 1024).cpu_ms == pytest.approx(hybrid_moe_layer(c1, k, 1024).cpu_ms)
    # the layerwise copies run over every link at once: each rank copies half
    assert layerwise_moe_layer(c2, replace(k, tp=2), 8192).stage_b_ms < layerwise_moe_layer(c1, k, 8192).stage_b_ms


def test_a_full_core_thread_pool_is_slower():
    # docs/sglang-kt.md#the-cpuinfer-thread-cliff: with kt-cpuinfer = cores the driving thread starves (8 ms vs 0.3 ms per 1-token forward)
    c = comp()
    assert c.cpu_moe_ms(1, 256, 16) > 5 * c.cpu_moe_ms(1, 256, 15)


# ---- the TP layerwise load as sglang-kt 0.7.2 runs it (docs/sglang-kt.md#layerwise-prefill-at-tp--1) ----


def _tp_comp(n: int, name="kimi-k2-thinking", method="RAWINT4") -> Components:
    from kttune.hw.derive import Change, derive_profile
    from kttune.hw.registry import load_shipped

    p = derive_profile(load_shipped("h200-pcie5-xeon-amx-16c"), Change(gpu="rtx4090", n_gpus=n)).profile
    return Components(p, model(name), method, n)


@pytest.mark.parametrize("name,method", [("kimi-k2-thinking", "RAWINT4"), ("minimax-m2.1", "FP8")])
def test_rank0_writes_every_shard_so_stage_a_does_not_shrink_with_tp(name, method):
    from kttune.cost.prefill import layerwise_load_ms

    loads = {n: layerwise_load_ms(_tp_comp(n, name, method), cfg(method, tp=n, cpuinfer_threads=13)) for n in (1, 2, 4)}
    assert loads[1][1] == pytest.approx(loads[2][1]) == pytest.approx(loads[4][1])  # stage A: the whole layer
    assert loads[4][2] < loads[2][2] < loads[1][2]  # stage B: each rank its 1/tp shard, all links at once


@pytest.mark.parametrize("n", [2, 4, 8])
def test_every_expert_copy_waits_for_a_barrier(n):
    """Per expert: rank 0 waits for the copy of e-1 before it writes e+1, every rank passes a
    dist.barrier before copying e: the step is max(A, B + barrier, C), the barrier is the
    smallest all-reduce of the profile's curve, and the load is at least E_s steps."""
    from kttune.cost.prefill import layerwise_load_ms, streamed_experts_per_layer

    c = _tp_comp(n)
    k = cfg("RAWINT4", tp=n, cpuinfer_threads=13)
    curve = c.profile.curves_of("allreduce", ranks=n)[0]
    assert c.barrier_ms() == pytest.approx(min(curve.ts))
    load, a, b, cc = layerwise_load_ms(c, k)
    e = streamed_experts_per_layer(c, k)
    step = max(a / e, b / e + c.barrier_ms(), cc / e)
    assert load >= e * step * c.overlap_ratio * (1 - 1e-9)


def test_kimi_k2_layerwise_on_4090s_is_bounded_by_stage_a_not_a_scaled_launch_cost():
    """The bottleneck issue 22 found: stage C's 0.25 ms launch cost scaled by the HBM ratio into
    1.14 ms per expert, 384 x 1.14 = 440 ms per layer on any GPU count. Stage C stays 0.25 ms and
    the multi-GPU load is stage A's (rank 0 writes every shard)."""
    from kttune.cost.prefill import layerwise_load_ms

    for n in (2, 4, 8):
        c = _tp_comp(n)
        assert c.stage_c_ms(c.gpu_bytes_per_expert) < 0.3
        load, a, b, cc = layerwise_load_ms(c, cfg("RAWINT4", tp=n, cpuinfer_threads=13))
        assert a >= max(b, cc) and load < 1.2 * a
