"""The search space: its bounds obey the structural rules of docs/sglang-kt.md and are tight
against the memory model (the largest values it offers fit, one more does not)."""

from __future__ import annotations

from dataclasses import replace

import optuna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.errors import ParameterError, UserError
from kttune.memory.host import host_ram_breakdown
from kttune.cost.prefill import prefill_time_ms
from kttune.memory.vram import vram_breakdown
from kttune.search.baselines import kt_run_default
from kttune.search.evaluate import Budget
from kttune.search.space import (
    CHUNK_CHOICES,
    CHUNK_PAGE,
    KV_UNIT,
    MIN_USEFUL_KV_TOKENS,
    build_space,
    check_chunks,
    minimal_config,
)
from kttune.search.workload import load_workload
from kttune.units import GIB
from tests.helpers import model, profile

CASES = [
    ("qwen3-30b-a3b", "BF16"),
    ("qwen3-30b-a3b", "AMXINT4"),
    ("kimi-k2-thinking", "RAWINT4"),
    ("deepseek-v3", "FP8"),
    ("minimax-m2.1", "FP8"),
    ("gpt-oss-120b", "MXFP4"),
]


def space_for(name, method, vram_gib=80, wl="rag", tp=1):
    m = model(name)
    comp = Components(profile(), m, method, tp)
    workload = load_workload(wl).clipped(m.max_position_embeddings)
    budget = Budget(int(vram_gib * GIB), 1024 * GIB)
    return comp, workload, budget, build_space(comp, workload, budget, tp)


def fits(m, c: LaunchConfig, budget: Budget) -> bool:
    return vram_breakdown(m, c).runtime_peak_bytes <= budget.usable_vram_bytes


@pytest.mark.parametrize("name,method", CASES)
def test_structural_rules(name, method):
    comp, wl, budget, s = space_for(name, method)
    assert max(s.thresholds) <= max(s.chunks)
    assert max(s.chunks) <= max(1024, comp.model.max_position_embeddings)
    if not comp.method.layerwise:
        assert s.thresholds == (0,)  # the layerwise crash of non-native methods is never proposed
    else:
        assert 0 in s.thresholds and len(s.thresholds) > 1
    assert s.kv_units_min * KV_UNIT >= max(MIN_USEFUL_KV_TOKENS, wl.max_prompt_tokens + wl.output_tokens)
    assert s.kv_units_max >= s.kv_units_min
    assert set(s.threads) == set(comp.cpu_thread_options())


@pytest.mark.parametrize("name,method", CASES)
def test_the_largest_offered_values_fit_and_one_more_expert_does_not(name, method):
    comp, wl, budget, s = space_for(name, method)
    m = comp.model
    least = minimal_config(comp, s.tp, s.threads[0], s.threadpools, s.kv_units_min * KV_UNIT, s.max_running_requests)
    if not fits(m, least, budget):
        pytest.skip("nothing fits this budget")  # check_request reports it; the bounds are moot
    most_kv = least.__class__(**{**least.to_dict(), "max_total_tokens": s.kv_units_max * KV_UNIT})
    assert fits(m, most_kv, budget)
    n = s.gpu_experts_max
    at_max = least.__class__(**{**least.to_dict(), "num_gpu_experts": n})
    assert fits(m, at_max, budget)
    if n < m.num_experts:
        assert not fits(m, least.__class__(**{**least.to_dict(), "num_gpu_experts": n + 1}), budget)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), small=st.integers(24, 80), extra=st.integers(1, 60))
def test_more_vram_never_shrinks_the_space(case, small, extra):
    *_, a = space_for(*case, vram_gib=small)
    *_, b = space_for(*case, vram_gib=small + extra)
    assert b.gpu_experts_max >= a.gpu_experts_max
    assert b.kv_units_max >= a.kv_units_max


@pytest.mark.parametrize("name,method", CASES)
def test_suggested_configs_stay_in_bounds_and_round_trip(name, method):
    comp, wl, budget, s = space_for(name, method)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(30):
        trial = study.ask()
        c = s.suggest(trial)
        assert c.chunked_prefill_size in s.chunks and c.gpu_prefill_token_threshold in s.thresholds
        assert 0 <= c.num_gpu_experts <= s.gpu_experts_max
        assert s.kv_units_min * KV_UNIT <= c.max_total_tokens <= s.kv_units_max * KV_UNIT
        assert c.cpuinfer_threads in s.threads and c.method == comp.method.name
        assert s.params_of(c) == trial.params  # an enqueued config is the trial it came from
        study.tell(trial, 1.0)


@pytest.mark.parametrize("name,method", CASES)
def test_kt_run_default_keeps_the_threshold_legal(name, method):
    comp, wl, budget, s = space_for(name, method)
    d = kt_run_default(s, cores=16)
    assert d.gpu_prefill_token_threshold == (4096 if comp.method.layerwise and 4096 in s.thresholds else 0)
    assert d.num_gpu_experts == min(1, s.gpu_experts_max)
    assert d.chunked_prefill_size == (4096 if 4096 in s.chunks else s.chunks[-1])


# ---- chunk choices: up to 131072, the user's own, cut to what fits VRAM and host RAM -----------------


def comp(name="kimi-k2-thinking", method="RAWINT4", tp=1):
    return Components(profile(), model(name), method, tp)


def test_default_choices_reach_131072():
    assert CHUNK_CHOICES[-1] == 131072 and 65536 in CHUNK_CHOICES


@pytest.mark.parametrize("bad", [(), (1000,), (-64,), (0,), (64, 100)])
def test_check_chunks_refuses_with_one_line_naming_the_parameter(bad):
    with pytest.raises(ParameterError) as e:
        check_chunks(bad)
    assert "\n" not in str(e.value) and e.value.param == "chunks" and str(e.value).startswith("chunks ")


@given(n=st.integers(1, 4096))
def test_multiples_of_the_page_pass_others_fail(n):
    assert check_chunks([n * CHUNK_PAGE]) == (n * CHUNK_PAGE,)
    if n % CHUNK_PAGE:
        with pytest.raises(UserError):
            check_chunks([n])


def test_large_chunks_dropped_when_host_ram_or_vram_cannot_hold_them():
    c = comp()
    wl = load_workload("rag")
    big = Budget(80 * GIB, 4096 * GIB)
    tight_host = Budget(80 * GIB, 560 * GIB)  # the experts fit, the scratch of the largest chunks does not
    s_big = build_space(c, wl, big, 4)
    s_tight = build_space(c, wl, tight_host, 4)
    assert 131072 in s_big.chunks
    assert max(s_tight.chunks) < 131072
    # an independent check of the bound: the least launch at each kept chunk fits both budgets
    for ch in s_tight.chunks:
        cfg = minimal_config(c, 4, s_tight.threads[0], s_tight.threadpools, 4096, s_tight.max_running_requests)
        cfg = replace(cfg, chunked_prefill_size=ch)
        assert host_ram_breakdown(c.model, cfg).total_bytes <= tight_host.host_ram_bytes
        assert vram_breakdown(c.model, cfg).runtime_peak_bytes <= tight_host.usable_vram_bytes


def test_user_chunks_replace_the_defaults_and_none_fitting_is_a_user_error():
    c = comp()
    wl = load_workload("rag")
    s = build_space(c, wl, Budget(80 * GIB, 4096 * GIB), 4, chunks=(8192, 65536))
    assert s.chunks == (8192, 65536)
    with pytest.raises(UserError) as e:
        build_space(c, wl, Budget(80 * GIB, 540 * GIB), 4, chunks=(131072,))
    assert "131072" in str(e.value) and "host RAM" in str(e.value)


# ---- thresholds reach the crossover -----------------------------------------------------------------


@pytest.mark.parametrize(
    "name,method",
    [("kimi-k2-thinking", "RAWINT4"), ("deepseek-v3", "FP8"), ("minimax-m2.1", "FP8"), ("qwen3-30b-a3b", "BF16")],
)
def test_thresholds_hold_every_predicted_crossover_and_start_at_64(name, method):
    """The crossover of a configuration the space offers (any thread count, no or the most GPU
    experts, the largest chunk) is itself a threshold candidate, and the candidates start at 64
    tokens: the large FP8/INT4 models cross at 64-512 tokens per forward."""
    from kttune.cost.prefill import crossover_tokens

    c, wl, budget, s = space_for(name, method, vram_gib=140)
    assert min(t for t in s.thresholds if t) == 64
    for n in (0, s.gpu_experts_max):
        for t in s.threads:
            cross = crossover_tokens(c, s.config(s.chunks[-1], 0, n, s.kv_units_min, t))
            if cross is not None and cross <= s.chunks[-1]:
                assert cross in s.thresholds


def test_the_search_reaches_a_crossover_below_512():
    """DeepSeek-V3 FP8 on the measured H200 profile crosses below 512 tokens; the pick's threshold
    sits at the crossover, not at the old smallest candidate 512."""
    from kttune import app

    inp = app.resolve_inputs("deepseek-v3", 140 * GIB, 1, "h200-pcie5-xeon-amx-16c", "rag", host_ram_bytes=2048 * GIB)
    out = app.search(inp, trials=150, seed=1, storage=":memory:")
    cross = out.explanation.crossover_tokens
    assert cross is not None and cross < 512
    assert out.best.cfg.gpu_prefill_token_threshold in (0, cross)


@pytest.mark.parametrize(
    "name,method,gpu,backends",
    [
        ("qwen3-30b-a3b", "BF16", None, ("",)),
        ("deepseek-v3", "FP8", None, ("", "flashinfer")),
        ("deepseek-v3.2", "FP8", None, ("", "flashinfer", "nsa")),
        ("deepseek-v3.2", "FP8", "rtx5090", ("", "flashinfer")),
    ],
)
def test_the_attention_backend_is_searched_for_mla_models(name, method, gpu, backends):
    """triton (kttune's launch) and flashinfer for MLA; nsa too for a sparse-attention model on the GPUs
    SGLang runs its kernels on (docs/cost-model.md#mla-prefill-forms); each config round-trips
    through a trial's params."""
    from kttune.hw.derive import Change, derive_profile

    m = model(name)
    p = profile() if gpu is None else derive_profile(profile(), Change(gpu=gpu)).profile
    comp = Components(p, m, method)
    space = build_space(comp, load_workload("rag").clipped(m.max_position_embeddings), Budget(141 * GIB, 1024 * GIB), 1)
    assert space.backends == backends
    for b in backends:
        cfg = space.config(space.chunks[-1], 0, 0, space.kv_units_min, space.threads[0], b)
        assert space.config_of(space.params_of(cfg)) == cfg and cfg.attention_backend == b
    assert ("attention" in space.params_of(cfg)) == (len(backends) > 1)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunk=st.sampled_from([4096, 16384, 65536]), kv_k=st.integers(8, 256), tp=st.sampled_from([1, 2, 4]))
def test_flashinfer_trades_activation_vram_for_prefill_time(chunk, kv_k, tp):
    """Against triton on the same flags: never slower (one expanded shot costs fewer flops than the latent
    form for any chunk of 4K tokens), and its attention phase is the larger of the latent form's and the
    one-shot expansion of the longest prefix the pool admits once that prefix reaches 8,192 tokens
    (at a 4K chunk, the expansion), else the same bytes."""
    from kttune.memory.vram import MLA_CHUNKED_PREFIX_THRESHOLD, activation_phases

    m = model("deepseek-v3")
    comp = Components(profile(), m, "FP8", tp)
    tri = LaunchConfig("FP8", tp, 0, chunk, 0, kv_k * KV_UNIT, 15)
    fi = replace(tri, attention_backend="flashinfer")
    for n in (8192, 40000, 120000):
        assert prefill_time_ms(comp, fi, n) <= prefill_time_ms(comp, tri, n) * (1 + 1e-12)
    a, b = activation_phases(m, tri).attention, activation_phases(m, fi).attention
    longest = min(m.max_position_embeddings, kv_k * KV_UNIT) - chunk
    assert b >= a and (b == a if longest < MLA_CHUNKED_PREFIX_THRESHOLD else (b > a or chunk > 4096))
