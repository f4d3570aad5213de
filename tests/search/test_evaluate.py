"""Evaluating one configuration: what the search optimises and the constraints it respects."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kttune.cost.components import Components
from kttune.cost.prefill import prefill_time_ms
from kttune.search.evaluate import Budget, evaluate
from kttune.search.workload import load_workload
from kttune.units import GIB
from tests.helpers import cfg, model, profile

ROOMY = Budget(1000 * GIB, 4096 * GIB)


def comp(name="qwen3-30b-a3b", method="BF16"):
    return Components(profile(), model(name), method)


def test_mean_ttft_is_the_request_weighted_mean_of_its_prompts():
    c, wl = comp(), load_workload("rag")
    e = evaluate(c, cfg("BF16"), wl, ROOMY)
    assert [p for p, _ in e.ttft_ms] == list(wl.prompt_tokens)
    for p, t in e.ttft_ms[:3]:
        assert t == prefill_time_ms(c, cfg("BF16"), p)
    assert min(t for _, t in e.ttft_ms) <= e.mean_ttft_ms <= max(t for _, t in e.ttft_ms)
    assert e.mean_ttft_ms == pytest.approx(sum(w * t for (_, t), w in zip(e.ttft_ms, wl.weights)))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kv=st.integers(1, 256), running=st.integers(1, 64))
def test_decode_batch_is_capped_by_concurrency_requests_and_kv(kv, running):
    wl = load_workload("chat")
    e = evaluate(comp(), cfg("BF16", max_total_tokens=kv * 1024, max_running_requests=running), wl, ROOMY)
    # SGLang admits a request only when its prompt and output fit the pool (kttune.search.admission)
    assert e.decode_batch == max(
        1, min(wl.concurrency, running, kv * 1024 // (wl.mean_prompt_tokens + wl.output_tokens))
    )
    assert e.decode_tok_s == pytest.approx(e.decode_batch / (e.tbt_ms / 1e3))
    # each request sees one token per step; the batch's total is that times the batch
    assert e.decode_tok_s_per_request == pytest.approx(1e3 / e.tbt_ms)
    assert e.decode_tok_s_per_request * e.decode_batch == pytest.approx(e.decode_tok_s)


def test_a_threshold_above_the_chunk_is_infeasible_and_zero_never_is():
    c, wl = comp(), load_workload("rag")
    assert (
        "threshold_le_chunk"
        in evaluate(c, cfg("BF16", chunked_prefill_size=2048, gpu_prefill_token_threshold=4096), wl, ROOMY).violated
    )
    assert evaluate(c, cfg("BF16", chunked_prefill_size=4096, gpu_prefill_token_threshold=4096), wl, ROOMY).feasible
    assert evaluate(c, cfg("BF16", chunked_prefill_size=1024, gpu_prefill_token_threshold=0), wl, ROOMY).feasible


def test_the_kv_pool_must_hold_the_longest_request():
    c, wl = comp(), load_workload("long-context")
    longest = wl.max_prompt_tokens + wl.output_tokens
    assert "kv_holds_longest" in evaluate(c, cfg("BF16", max_total_tokens=longest - 1024), wl, ROOMY).violated
    assert "kv_holds_longest" not in evaluate(c, cfg("BF16", max_total_tokens=longest), wl, ROOMY).violated


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(vram=st.integers(8, 200), more=st.integers(1, 100), n=st.integers(0, 128), lw=st.booleans())
def test_more_vram_never_makes_a_feasible_config_infeasible(vram, more, n, lw):
    c, wl = comp(), load_workload("rag")
    k = cfg("BF16", num_gpu_experts=n, gpu_prefill_token_threshold=4096 if lw else 0)
    small = evaluate(c, k, wl, Budget(vram * GIB, 512 * GIB))
    big = evaluate(c, k, wl, Budget((vram + more) * GIB, 512 * GIB))
    if small.feasible:
        assert big.feasible
    assert ("vram" in small.violated) >= ("vram" in big.violated)


def test_the_layerwise_slot_counts_only_when_layerwise_can_fire():
    # the lazily allocated slot is checked at the runtime peak, and only if a forward can reach the threshold
    c, wl = comp("kimi-k2-thinking", "RAWINT4"), load_workload("rag")
    off = evaluate(c, cfg("RAWINT4", chunked_prefill_size=8192, gpu_prefill_token_threshold=0), wl, ROOMY)
    on = evaluate(c, cfg("RAWINT4", chunked_prefill_size=8192, gpu_prefill_token_threshold=4096), wl, ROOMY)
    assert off.vram.layerwise_slot == 0 < on.vram.layerwise_slot
    assert on.vram.startup_bytes == off.vram.startup_bytes
    tight = Budget(int((off.vram.runtime_peak_bytes + 1) / 0.95) + 1, 4096 * GIB)
    assert evaluate(c, off.cfg, wl, tight).feasible and "vram" in evaluate(c, on.cfg, wl, tight).violated


def test_host_ram_is_a_constraint():
    c, wl = comp("kimi-k2-thinking", "RAWINT4"), load_workload("rag")
    e = evaluate(c, cfg("RAWINT4"), wl, Budget(1000 * GIB, 256 * GIB))  # 570 GB of experts do not fit
    assert "host_ram" in e.violated


def test_a_tbt_slo_becomes_a_constraint():
    c = comp()
    wl = load_workload("chat")
    assert "tbt_slo" not in evaluate(c, cfg("BF16"), wl, ROOMY).constraints
    e = evaluate(c, cfg("BF16"), replace(wl, tbt_slo_ms=1e-3), ROOMY)
    assert "tbt_slo" in e.violated
    assert evaluate(c, cfg("BF16"), replace(wl, tbt_slo_ms=1e6), ROOMY).feasible


def test_more_gpu_experts_speed_up_decode_on_a_slow_cpu_side():
    # the hybrid decode step waits for the CPU experts; moving experts to the GPU shortens it
    c, wl = comp(), load_workload("chat")
    tbt = [evaluate(c, cfg("BF16", num_gpu_experts=n), wl, ROOMY).tbt_ms for n in (0, 32, 64, 96, 128)]
    assert tbt == sorted(tbt, reverse=True) and tbt[-1] < tbt[0]
