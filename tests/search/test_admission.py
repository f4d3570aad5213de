"""The KV pool and the workload agree: SGLang admits a request only when its prompt and output fit
the pool (kttune.search.admission), so every configuration the search offers runs
`--max-running-requests` requests of the workload's mean length in its pool
(pool tokens >= running requests x (mean prompt + output)), the workload's concurrency whenever
the budget holds it, and where it does not, the report says so."""

from __future__ import annotations

import math

import optuna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kttune import app
from kttune.cost.components import Components
from kttune.search.admission import (
    pool_note,
    pool_tokens_for,
    request_kv_tokens,
    requests_the_pool_holds,
    running_requests,
)
from kttune.search.evaluate import Budget, evaluate
from kttune.search.space import KV_UNIT, build_space
from kttune.search.workload import Workload
from kttune.units import GIB
from tests.helpers import model, profile

MEASURED = "h200-pcie5-xeon-amx-16c"

workloads = st.builds(
    lambda prompts, out, conc: Workload("w", tuple(prompts), tuple(1 / len(prompts) for _ in prompts), out, conc),
    st.lists(st.integers(64, 40000), min_size=1, max_size=5),
    st.integers(1, 2000),
    st.integers(1, 64),
)


@given(workloads, st.integers(1, 2**22))
def test_the_flag_follows_from_the_pool(wl, pool):
    """The running requests of a pool fit it at the workload's mean length (or there is one, which
    the longest-request constraint makes fit), and never exceed the concurrency."""
    run = running_requests(pool, wl)
    per = math.ceil(wl.mean_prompt_tokens + wl.output_tokens - 1e-6)  # whole tokens, float noise aside
    assert 1 <= run <= wl.concurrency
    assert run == 1 or pool >= run * per
    assert run == wl.concurrency or pool < (run + 1) * per  # fewer only when one more would not fit
    assert (pool_note(pool, run, wl) is None) == (requests_the_pool_holds(pool, wl) >= wl.concurrency)
    assert (
        pool_tokens_for(wl) >= wl.concurrency * per
        and requests_the_pool_holds(pool_tokens_for(wl), wl) >= wl.concurrency
    )


def test_float_noise_in_the_mean_costs_no_request():
    """The example hypothesis found: 5 equal weights of 0.2 average 554 as 554.0000000000001; a pool
    of 33,967 tokens holds 37 requests of 918 tokens, not 36 of 919."""
    wl = Workload("w", (64, 308, 484, 1646, 268), (0.2,) * 5, 364, 37)
    assert wl.mean_prompt_tokens != 554 and request_kv_tokens(wl) == 918
    assert running_requests(33967, wl) == 37


CASES = [("qwen3-30b-a3b", "BF16"), ("kimi-k2-thinking", "RAWINT4"), ("deepseek-v3", "FP8"), ("gpt-oss-120b", "MXFP4")]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), wl=workloads, vram=st.integers(16, 160))
def test_every_offered_config_holds_its_running_requests(case, wl, vram):
    m = model(case[0])
    wl = wl.clipped(m.max_position_embeddings)
    comp = Components(profile(), m, case[1], 1)
    s = build_space(comp, wl, Budget(vram * GIB, 4096 * GIB), 1)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=vram))
    per = request_kv_tokens(wl)
    largest_holds = requests_the_pool_holds(s.kv_units_max * KV_UNIT, wl) >= wl.concurrency
    for _ in range(10):
        c = s.suggest(study.ask())
        assert c.max_running_requests == c.cuda_graph_max_bs
        assert c.max_running_requests == 1 or c.max_total_tokens >= c.max_running_requests * per
        if largest_holds:  # the budget holds the concurrency: every offered pool does
            assert c.max_running_requests == wl.concurrency
        ev = evaluate(comp, c, wl, Budget(vram * GIB, 4096 * GIB))
        assert ev.decode_batch == c.max_running_requests


def test_the_rag_search_runs_the_workload_concurrency():
    """The README's main job: the pick's pool holds the 8 RAG requests at their mean length and the
    command says --max-running-requests 8 (it used to pick a pool of ~2 requests with 8 printed)."""
    inp = app.resolve_inputs("qwen3-30b-a3b", 32 * GIB, 1, MEASURED, "rag")
    out = app.search(inp, trials=120, seed=1, storage=":memory:")
    wl, c = inp.request.workload, out.best.cfg
    assert c.max_running_requests == wl.concurrency == 8
    assert c.max_total_tokens >= 8 * (wl.mean_prompt_tokens + wl.output_tokens)
    argv = list(out.argv)
    assert argv[argv.index("--max-running-requests") + 1] == "8"
    assert not any("KV pool" in n for n in out.explanation.notes)


def test_a_budget_too_small_for_the_concurrency_prints_what_the_pool_holds():
    inp = app.resolve_inputs("qwen3-30b-a3b", 8 * GIB, 1, "datasheet-rtx4090-pcie4-xeon-amx-64c", "rag")
    out = app.search(inp, trials=80, seed=1, storage=":memory:")
    wl, c = inp.request.workload, out.best.cfg
    held = c.max_total_tokens // request_kv_tokens(wl)
    assert held < wl.concurrency and c.max_running_requests == held
    argv = list(out.argv)
    assert argv[argv.index("--max-running-requests") + 1] == str(held)
    note = next(n for n in out.explanation.notes if "KV pool" in n)
    assert f"holds {held} request(s)" in note and f"{pool_tokens_for(wl):,} tokens would hold them" in note
    assert any("KV pool" in n for n in out.to_dict()["notes"])


@pytest.mark.parametrize("pool,noted", [(16384, True), (65536, False)])
def test_explain_warns_when_the_given_pool_cannot_hold_the_concurrency(pool, noted):
    inp = app.resolve_inputs("qwen3-30b-a3b", 32 * GIB, 1, MEASURED, "rag")
    out = app.explain_flags(inp, 0, 8192, 0, pool)
    wl = inp.request.workload
    assert out.evaluation.cfg.max_running_requests == min(
        8, pool // math.ceil(wl.mean_prompt_tokens + wl.output_tokens)
    )
    assert any("KV pool" in n for n in out.explanation.notes) == noted
