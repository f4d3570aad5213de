"""What sglang-kt picks for unset memory flags, and the KV pool it sizes from
--mem-fraction-static at start (kttune.memory.sglang_defaults)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kttune.memory.sglang_defaults import (
    default_chunked_prefill_size,
    default_cuda_graph_max_bs,
    default_max_running_requests,
    default_mem_fraction_static,
    kv_tokens_the_room_holds,
    linear_state_slots_at_start,
    profiled_kv_tokens,
    profiling_cell_bytes,
)
from kttune.memory.vram import (
    kv_cell_bytes,
    linear_state_bytes_per_request,
    linear_state_slots,
    mem_fraction_static,
    vram_breakdown,
)
from kttune.units import GIB
from tests.helpers import cfg, model


@pytest.mark.parametrize(
    "gib,chunk,bs,bs_tp4",
    [
        (16, 2048, 8, 8),
        (24, 2048, 24, 80),
        (48, 4096, 32, 160),
        (80, 8192, 256, 512),
        (141, 8192, 256, 512),
        (192, 16384, 256, 512),
    ],
)
def test_defaults_by_gpu_memory(gib, chunk, bs, bs_tp4):
    v = gib * GIB
    assert default_chunked_prefill_size(v) == chunk
    assert default_cuda_graph_max_bs(v, 1) == bs and default_cuda_graph_max_bs(v, 4) == bs_tp4


@given(
    st.integers(8, 300), st.integers(1, 64).map(lambda k: 1024 * k), st.integers(1, 512), st.sampled_from([1, 2, 4, 8])
)
def test_the_default_fraction_keeps_its_reserve(gib, chunk, bs, tp):
    f = default_mem_fraction_static(gib * GIB, chunk, bs, tp)
    reserved_mib = (1 - f) * gib * 1024
    want = 512 + 1.5 * max(chunk, 2048) + 2 * bs + 128 * tp
    if gib > 60:
        want = max(want, 10 * 1024)
    assert reserved_mib == pytest.approx(want, abs=gib * 1024 * 0.0005 + 1e-6)  # rounded to 0.001


@settings(max_examples=40, deadline=None)
@given(
    st.floats(0.3, 0.98, allow_subnormal=False),
    st.floats(0.0, 0.3, allow_subnormal=False),
    st.integers(0, 60),
    st.sampled_from(["qwen3-30b-a3b", "kimi-k2-thinking"]),
)
def test_the_pool_grows_with_the_fraction_and_shrinks_with_gpu_experts(f, more, n, name):
    m = model(name)
    c = cfg("BF16" if name.startswith("qwen") else "RAWINT4", num_gpu_experts=n)
    v = 141 * GIB
    a = profiled_kv_tokens(m, c, v, f)
    assert profiled_kv_tokens(m, c, v, min(0.99, f + more)) >= a
    assert profiled_kv_tokens(m, replace(c, num_gpu_experts=n + 1), v, f) <= a
    if a:  # what the fraction leaves after the weights, in whole cells of sglang-kt's profiling cell
        b = vram_breakdown(m, replace(c, max_total_tokens=a))
        rest = (v - b.cuda_context) * f - b.non_expert_weights - b.gpu_experts
        cell = profiling_cell_bytes(m, 1)
        assert a * cell <= rest < (a + 1) * cell
        # the pool stores the full cell: for Kimi-K2's MLA (512 + 64 stored, 128 + 64 counted) 3x the room
        assert b.kv_cache / (a * cell) == pytest.approx(kv_cell_bytes(m, 1) / cell)
        assert kv_tokens_the_room_holds(m, c, v, f) * kv_cell_bytes(m, 1) <= rest


@settings(max_examples=60, deadline=None)
@given(
    st.integers(24, 200),
    st.integers(0, 40),
    st.integers(1, 128).map(lambda k: 1024 * k),
    st.integers(1, 64),
    st.sampled_from(["qwen3-30b-a3b", "qwen3-next-80b-a3b"]),
)
def test_the_fraction_kttune_prints_leaves_its_pool_at_start(gib, n, kv, running, name):
    """The emitted --mem-fraction-static sizes a pool of at least the emitted --max-total-tokens, so
    SGLang runs the pool kttune modelled (the cap, not the fraction, decides it); for a model with
    linear-attention layers, with the emitted --max-mamba-cache-size's states taken first."""
    m = model(name)
    c = cfg("BF16", num_gpu_experts=n, max_total_tokens=kv, max_running_requests=running)
    b = vram_breakdown(m, c)
    if b.startup_bytes > 0.97 * gib * GIB:
        return  # over the budget: the search never prints it
    f = mem_fraction_static(b, gib * GIB)
    emitted = replace(c, linear_state_slots=linear_state_slots(m, c))  # as SGLang reads the command back
    assert profiled_kv_tokens(m, emitted, gib * GIB, f) >= kv


@settings(max_examples=40, deadline=None)
@given(st.floats(0.5, 0.95, allow_subnormal=False), st.floats(0.1, 4.0, allow_subnormal=False), st.integers(0, 60))
def test_unset_state_slots_take_their_share_and_the_kv_pool_the_rest(f, ratio, n):
    """`--max-mamba-cache-size` unset: SGLang gives the states ratio / (1 + ratio) of what the fraction
    leaves after the weights, in whole states, and the KV pool what is left of it."""
    m = model("qwen3-next-80b-a3b")
    c = cfg("BF16", num_gpu_experts=n, max_total_tokens=0)
    v = 80 * GIB
    b = vram_breakdown(m, c)
    rest = (v - b.cuda_context) * f - b.non_expert_weights - b.gpu_experts
    per = linear_state_bytes_per_request(m, 1)
    slots = linear_state_slots_at_start(m, c, v, f, ratio)
    assert slots * per <= rest * ratio / (1 + ratio) < (slots + 1) * per
    kv = profiled_kv_tokens(m, replace(c, linear_state_slots=slots), v, f)
    assert kv <= profiled_kv_tokens(m, c, v, f)  # the states come out of the KV pool's room
    assert kv * kv_cell_bytes(m, 1) <= rest - slots * per < (kv + 1) * kv_cell_bytes(m, 1)
    assert linear_state_slots_at_start(m, c, v, f, ratio, running_if_no_radix=7) == 7
    assert linear_state_slots_at_start(model("qwen3-30b-a3b"), c, v, f, ratio) == 0


def test_unset_running_requests_follow_the_request_pool():
    m = model("qwen3-30b-a3b")  # 40,960-token context
    assert default_max_running_requests(m, cfg("BF16", max_total_tokens=65536)) == 2048
    assert (
        default_max_running_requests(m, cfg("BF16", max_total_tokens=400 * 1024)) == 4096
    )  # rows: 400K / 40K x 512, capped
    assert default_max_running_requests(m, cfg("BF16", max_total_tokens=1000)) == 500


def test_sglang_kt_profiles_an_mla_pool_by_the_query_width_not_the_latent():
    """sglang-kt 0.7.2's get_cell_size_per_token counts qk_nope + qk_rope per MLA layer (128 + 64 for
    DeepSeek-V3 and Kimi-K2) where MLATokenToKVPool stores kv_lora_rank + qk_rope (512 + 64); with
    the sparse-attention indexer's 132 B beside both (GLM-5: 192 + 64 against 512 + 64)."""
    for name, layers in (("deepseek-v3", 61), ("kimi-k2-thinking", 61)):
        assert profiling_cell_bytes(model(name), 1) == (128 + 64) * layers * 2
        assert kv_cell_bytes(model(name), 1) == 3 * profiling_cell_bytes(model(name), 1)
    assert profiling_cell_bytes(model("glm-5"), 1) == ((192 + 64) * 2 + 132) * 78
    q = model("qwen3-30b-a3b")  # GQA: the cell it stores
    assert profiling_cell_bytes(q, 1) == kv_cell_bytes(q, 1)
