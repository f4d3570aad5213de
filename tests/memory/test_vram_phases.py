"""VRAM by phase: laws of the phase model, and the check against the path runner's measured device
peaks (tests/data/paths-*.json: `kttune paths --out` results from the GPU box) when present:
at every chunk, measured <= predicted <= 1.15 x measured."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from kttune.memory import vram
from kttune.spec.loader import load_model
from kttune.units import GIB
from tests.helpers import DATA, cfg, model

ALLOCATOR_GRANULARITY_BYTES = 4 * 2**20
RESULTS = sorted(DATA.glob("paths-*.json"))


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(["kimi-k2-thinking", "deepseek-v3", "qwen3-30b-a3b", "minimax-m2"]),
    chunk=st.sampled_from([1024, 4096, 16384, 65536, 131072]),
    tp=st.sampled_from([1, 2, 4, 8]),
    thr=st.sampled_from([0, 1024, 4096]),
    n=st.sampled_from([0, 8]),
)
def test_peak_is_persistent_plus_the_largest_phase_never_the_sum(name, chunk, tp, thr, n):
    m = model(name)
    c = cfg(m.default_method, tp=tp, chunked_prefill_size=chunk, gpu_prefill_token_threshold=thr, num_gpu_experts=n)
    ph = vram.activation_phases(m, c)
    phases = (ph.attention, ph.router, ph.hybrid_moe, ph.layerwise_moe)
    assert ph.peak_bytes == ph.persistent + max(phases)
    assert ph.peak_bytes < ph.persistent + sum(phases) or sum(1 for p in phases if p) <= 1
    b = vram.vram_breakdown(m, c)
    assert b.runtime_peak_bytes == b.startup_bytes + b.layerwise_slot + ph.peak_bytes
    # twice the chunk never needs less
    b2 = vram.vram_breakdown(m, replace(c, chunked_prefill_size=2 * chunk))
    assert b2.prefill_activations >= b.prefill_activations


def test_margin_rule_round_trips():
    assert vram.vram_needed_bytes(vram.usable_vram_bytes(100 * GIB, 0.05), 0.05) == pytest.approx(100 * GIB, rel=1e-9)


def _runs():
    """Every run with a measured peak at the judged chunks (4096..65536), read with the runner's own
    reader (`runs_in_results`) from the results files' `{machine, results: [{request, runs}]}`."""
    from kttune.runner.result import runs_in_results

    from kttune.runner.memory import layerwise_slot_held

    for f in RESULTS:
        for _, runs in runs_in_results(json.loads(f.read_text())):
            for run, held in zip(runs, layerwise_slot_held(runs)):
                if run.peak_allocated_bytes and 4096 <= run.chunk <= 65536:
                    yield f.name, run, held


def _ratios() -> list[tuple]:
    from kttune.runner.memory import predicted_runner_peak_bytes

    rows = list(_runs())
    assert rows, "the results files hold no run with a measured peak at chunks 4096..65536"
    out = []
    for name, run, held in rows:
        pred = predicted_runner_peak_bytes(load_model(run.model, run.method), run, held)["total"]
        out.append(
            (name, run.model, run.chunk, run.prompt_tokens, run.gpu_experts, run.paths, pred / run.peak_allocated_bytes)
        )
    return out


@pytest.mark.skipif(
    not RESULTS, reason="no tests/data/paths-*.json: run `kttune paths --out` on the GPU box, copy its result there"
)
def test_phase_model_bounds_the_runners_measured_peak():
    """Held out (nothing is fitted to these peaks): SGLang's terms (kttune.memory.vram) for what the
    runner holds, plus its named runner-only terms (kttune/calibration/runner.py), against every measured
    peak at chunks 4096..65536: measured <= predicted <= 1.15 x measured."""
    bad = [r for r in _ratios() if not 1.0 <= r[-1] <= 1.15]
    assert not bad, bad


@pytest.mark.skipif(
    not RESULTS, reason="no tests/data/paths-*.json: run `kttune paths --out` on the GPU box, copy its result there"
)
def test_the_sglang_terms_carry_the_prediction():
    """The runner allocates as SGLang does: what only the runner holds (MLA's padded values, one
    expert run's GEMM buffers, its staging ring...) is a small share of every predicted peak."""
    from kttune.runner.memory import predicted_runner_peak_bytes

    shares = []
    for name, run, held in _runs():
        t = predicted_runner_peak_bytes(load_model(run.model, run.method), run, held)
        shares.append(
            (
                (t["runner_activation_difference"] + t["pipeline_ring"]) / t["total"],
                run.model,
                run.chunk,
                run.prompt_tokens,
            )
        )
    assert max(shares)[0] <= 0.15, max(shares)


@pytest.mark.skipif(
    not RESULTS, reason="no tests/data/paths-*.json: run `kttune paths --out` on the GPU box, copy its result there"
)
def test_every_phase_peak_is_bounded_by_its_phase():
    """Per forward, the device peak while the attention block ran and while the MoE block ran (the
    runner records both) is at most the predicted peak of that phase: the phases are alive one after
    the other, so each one's prediction must hold on its own, not only the largest. Up to 4 MiB over
    is the caching allocator's granularity, not the model: a cached block is split only when more
    than 1 MiB would remain, so a live tensor can hold up to 1 MiB beyond its size (it shows at the
    32..256-token forwards, where a phase's own tensors are a few MiB)."""
    from kttune.runner.memory import predicted_phase_peaks
    from kttune.runner.result import runs_in_results

    bad, seen = [], 0
    for f in RESULTS:
        for _, runs in runs_in_results(json.loads(f.read_text())):
            for run in runs:  # the slot counted whenever the method has one: an upper bound for every order
                spec = load_model(run.model, run.method)
                for fw, pred in zip(run.forwards, predicted_phase_peaks(spec, run)):
                    if not fw.attn_peak_bytes:
                        continue
                    seen += 1
                    for phase, meas in (("attn", fw.attn_peak_bytes), ("moe", fw.moe_peak_bytes)):
                        if pred[phase] + ALLOCATOR_GRANULARITY_BYTES < meas:
                            bad.append(
                                (run.model, run.gpu_experts, fw.tokens, fw.prefix, fw.path, phase, pred[phase] / meas)
                            )
    if not seen:
        pytest.skip("no run in the results records phase peaks")
    assert not bad, bad


def test_mla_attention_form_follows_sglangs_dispatch():
    """No prefix: the expanded form; with one, triton (kttune's launch) absorbs; fa3 / flashinfer
    expand prefix and chunk together from SGLANG_CHUNKED_PREFIX_CACHE_THRESHOLD tokens on."""
    assert vram.mla_attention_form(0, "triton") == vram.mla_attention_form(0, "flashinfer") == "expanded"
    assert vram.mla_attention_form(100_000, "triton") == "absorbed"
    assert vram.mla_attention_form(vram.MLA_CHUNKED_PREFIX_THRESHOLD - 1, "flashinfer") == "absorbed"
    assert vram.mla_attention_form(vram.MLA_CHUNKED_PREFIX_THRESHOLD, "fa3") == "one_shot"


@settings(max_examples=30, deadline=None)
@given(prefix=st.integers(8192, 400_000), extra=st.integers(1, 100_000), tp=st.sampled_from([1, 2, 8]))
def test_one_shot_attention_grows_with_the_prefix_up_to_the_kv_chunk_cap(prefix, extra, tp):
    m = model("deepseek-v3")
    a = vram.attention_phase_bytes(m, 4096, tp, prefix=prefix, backend="flashinfer")
    b = vram.attention_phase_bytes(m, 4096, tp, prefix=prefix + extra, backend="flashinfer")
    assert b >= a
    if prefix + 4096 >= vram.MLA_MAX_KV_CHUNK_TOKENS:
        assert b == a  # pieces of at most MLA_MAX_KV_CHUNK_TOKENS
    # the triton backend never expands a prefix: its phase does not depend on it
    assert vram.attention_phase_bytes(m, 4096, tp, prefix=prefix, backend="triton") == vram.attention_phase_bytes(
        m, 4096, tp, prefix=prefix + extra, backend="triton"
    )
    # GQA models have no MLA forms: the prefix never matters
    q = model("qwen3-30b-a3b")
    assert vram.attention_phase_bytes(q, 4096, tp, prefix=prefix, backend="flashinfer") == vram.attention_phase_bytes(
        q, 4096, tp
    )


def test_w8a8_methods_hold_their_quantised_activations():
    m = model("deepseek-v3")
    for tokens in (1, 4096, 100_000):
        plain, w8a8 = vram.moe_activation_bytes(m, tokens, 1), vram.moe_activation_bytes(m, tokens, 1, w8a8=True)
        piece = min(tokens, vram.FUSED_MOE_CHUNK_TOKENS)
        assert w8a8 - plain >= piece * m.top_k * m.moe_intermediate_size  # cache2 in fp8, at least
    from kttune.spec.methods import get_method

    assert vram.w8a8_activations(get_method("FP8")) and not vram.w8a8_activations(get_method("BF16"))
    assert not vram.w8a8_activations(get_method("RAWINT4"))


@settings(max_examples=20, deadline=None)
@given(tokens=st.integers(1, 1 << 17), tp=st.sampled_from([1, 2, 4, 8]))
def test_the_output_gate_is_a_second_q_in_the_attention_phase(tokens, tp):
    """Qwen3-Next's qkv_proj projects a gate of q's size with q (sglang models/qwen3_next.py): the
    attention phase holds M x heads/tp x head_dim bf16 more than the same layer without it."""
    gated = load_model("qwen3-next-80b-a3b")
    assert gated.attention_output_gate
    plain = replace(gated, attention_output_gate=False)
    extra = vram.attention_phase_bytes(gated, tokens, tp) - vram.attention_phase_bytes(plain, tokens, tp)
    assert extra == tokens * (gated.num_attention_heads // tp) * gated.head_dim * vram.BF16
    assert not load_model("qwen3-30b-a3b").attention_output_gate


def test_the_sparse_indexer_s_buffers_join_the_attention_phase_on_nsa():
    """On nsa a sparse-attention model's attention phase also holds the indexer's query (bf16, then
    fp8) and the top-k ids, then those ids and the page table made of them (SGLang `nsa_indexer.py`
    `forward_cuda`, `nsa_backend.py` `forward_extend`): counted against the tensors, built on the meta
    device with SGLang's dtypes; no other backend and no other model holds them."""
    import torch

    m = model("deepseek-v3.2")
    dsa, tokens = m.sparse_attention, 4096
    meta = dict(device="meta")
    query = torch.empty(tokens, dsa.index_heads, dsa.index_head_dim, dtype=torch.bfloat16, **meta)
    q_fp8 = torch.empty(tokens, dsa.index_heads, dsa.index_head_dim, dtype=torch.float8_e4m3fn, **meta)
    topk = torch.empty(tokens, dsa.index_topk, dtype=torch.int32, **meta)
    page_table = torch.empty_like(topk)
    scoring = query.nbytes + q_fp8.nbytes + topk.nbytes
    attending = topk.nbytes + page_table.nbytes
    extra = vram.attention_phase_bytes(m, tokens, 1, backend="nsa") - vram.attention_phase_bytes(m, tokens, 1)
    assert extra == max(scoring, attending)
    v3 = model("deepseek-v3")
    assert vram.attention_phase_bytes(v3, tokens, 1, backend="nsa") == vram.attention_phase_bytes(v3, tokens, 1)


@settings(max_examples=30, deadline=None)
@given(tiles=st.integers(1, 512), tp=st.sampled_from([1, 2, 4, 8, 16]))
def test_a_linear_attention_layer_s_phase_grows_with_the_tokens_and_its_tile_states(tiles, tp):
    """Qwen3-Next's Gated DeltaNet phase: exactly proportional to the tokens over whole tiles of 64
    (every tensor is per token, the states per tile), one token more opens a tile (a state per value
    head, K x V in bf16, and that token's tensors); more ranks never need more; none without linear
    layers."""
    m = model("qwen3-next-80b-a3b")
    t = tiles * vram.GDN_CHUNK
    one = vram.linear_attention_phase_bytes(m, vram.GDN_CHUNK, tp)
    assert vram.linear_attention_phase_bytes(m, t, tp) == tiles * one
    lin = m.linear_attention
    state = max(1, lin.num_value_heads // tp) * lin.key_head_dim * lin.value_head_dim * 2
    assert vram.linear_attention_phase_bytes(m, t + 1, tp) - vram.linear_attention_phase_bytes(m, t, tp) > state
    if tp > 1:
        assert vram.linear_attention_phase_bytes(m, t, tp) < vram.linear_attention_phase_bytes(m, t, tp // 2)
    assert vram.linear_attention_phase_bytes(model("qwen3-30b-a3b"), t, tp) == 0


def test_sglang_s_attention_phase_is_the_linear_layer_s_where_larger_and_the_runner_s_is_not():
    """SGLang runs the recurrence, whose activations outgrow a full-attention layer's at Qwen3-Next's
    shapes; the path runner runs a linear layer's projections alone (kernels/decoder.py)."""
    m = model("qwen3-next-80b-a3b")
    c = cfg(m.default_method, tp=1, chunked_prefill_size=16384)
    full = vram.attention_phase_bytes(m, 16384, 1)
    linear = vram.linear_attention_phase_bytes(m, 16384, 1)
    assert linear > full
    assert vram.activation_phases(m, c).attention == linear
    assert vram.activation_phases(m, c, linear_recurrence=False).attention == full
