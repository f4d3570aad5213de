"""Laws of the simulator: single requests against the cost model's idle-server prediction, expert
traffic against the analytic count, Layered Prefill's one load per layer and its bounded stalls."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kttune.cost.components import Components
from kttune.cost.prefill import prefill_time_ms
from kttune.sim import engine
from kttune.sim.costs import IterationCosts, layer_groups
from kttune.sim.metrics import Slo
from kttune.sim.router import activated_fraction
from kttune.sim.simulate import simulate_one, summarise_run
from kttune.search.workload import load_workload
from kttune.sim.workload import Request, poisson_requests
from kttune.spec.methods import bytes_per_expert, get_method, gpu_format
from tests.helpers import cfg, model, profile

ARXIV, SHAREGPT = load_workload("arxiv-summarize").mix, load_workload("sharegpt-chat").mix
MEASURED = "h200-pcie5-xeon-amx-16c"
SLO = Slo(ttft_s=10.0, tbt_ms=150.0)


def _comp(name: str = "qwen3-30b-a3b", prof: str = MEASURED) -> Components:
    m = model(name)
    return Components(profile(prof), m, m.default_method)


COMP = {}


def comp(name: str = "qwen3-30b-a3b", prof: str = MEASURED) -> Components:
    if (name, prof) not in COMP:
        COMP[(name, prof)] = _comp(name, prof)
    return COMP[(name, prof)]


def _flags(c: Components, **kw):
    base = dict(
        num_gpu_experts=8,
        chunked_prefill_size=8192,
        gpu_prefill_token_threshold=4096,
        max_total_tokens=1 << 20,
        max_running_requests=32,
    )
    base.update(kw)
    return cfg(c.method.name, **base)


@settings(max_examples=20, deadline=None)
@given(
    prompt=st.integers(1, 40000),
    chunk=st.sampled_from([1024, 2048, 4096, 8192, 16384]),
    threshold=st.sampled_from([0, 1024, 4096]),
    prof=st.sampled_from([MEASURED, "datasheet-h200-pcie5-xeon-amx-16c"]),
)
def test_single_request_ttft_is_the_idle_server_prediction(prompt, chunk, threshold, prof):
    c = comp(prof=prof)
    f = _flags(c, chunked_prefill_size=chunk, gpu_prefill_token_threshold=threshold)
    r = simulate_one(c, f, [Request(0, 3.0, prompt, 1)], engine.Schedule("chunked"), SLO)
    assert math.isclose(r.ttft_s.p50 * 1e3, prefill_time_ms(c, f, prompt), rel_tol=1e-9)


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "gpt-oss-120b", "deepseek-v3.2"])
@pytest.mark.parametrize("prompt,output", [(2000, 300), (60, 200), (5000, 50)])
def test_a_lone_request_decodes_for_the_sum_of_its_steps(name, prompt, output):
    """The engine runs quiet decode iterations in batches; step by step, each is the cost model's
    decode step at that context, across the caps of a sliding window (gpt-oss: 128) and of a sparse
    model's top-k (2,048) on the nsa backend: the batches end where a capped read stops growing."""
    m = model(name)
    c = Components(profile(MEASURED), m, m.default_method, attention_backend="nsa")
    f = _flags(c)
    r = simulate_one(c, f, [Request(0, 3.0, prompt, output)], engine.Schedule("chunked"), SLO)
    ic = IterationCosts(c, f)
    steps = sum(ic.decode(1, prompt + j).ms for j in range(1, output))
    assert math.isclose((r.duration_s - r.ttft_s.p50) * 1e3, steps, rel_tol=1e-9)


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "kimi-k2-thinking", "deepseek-v3"])
@pytest.mark.parametrize("prompt", [700, 8192, 20000])
def test_layered_single_request_within_ten_percent_of_one_large_chunk(name, prompt):
    """Layered Prefill of one prompt on an idle server does the work of token-chunked prefill with
    chunk = the large chunk, split over G iterations (one forward overhead each)."""
    c = comp(name)
    f = _flags(c)
    r = simulate_one(c, f, [Request(0, 0.0, prompt, 1)], engine.Schedule("layered"), SLO)
    ref = prefill_time_ms(c, f, prompt) / 1e3
    assert abs(r.ttft_s.p50 - ref) <= 0.10 * ref


@settings(max_examples=15, deadline=None)
@given(
    chunks=st.integers(1, 6),
    chunk=st.sampled_from([2048, 4096, 8192]),
    name=st.sampled_from(["qwen3-30b-a3b", "kimi-k2-thinking"]),
    skew=st.sampled_from([0.0, 1.0]),
)
def test_chunked_traffic_is_chunks_x_layers_x_bytes_x_activated_fraction(chunks, chunk, name, skew):
    c = comp(name)
    m = c.model
    f = _flags(c, chunked_prefill_size=chunk, gpu_prefill_token_threshold=chunk, num_gpu_experts=0)
    prompt = chunks * chunk
    costs = IterationCosts(c, f, skew)
    r = summarise_run(costs, f, [Request(0, 0.0, prompt, 1)], engine.Schedule("chunked"), SLO).result("chunked")
    meth = get_method(m.default_method)
    layer_bytes = m.num_experts * bytes_per_expert(
        gpu_format(meth, m.checkpoint_format), m.hidden_size, m.moe_intermediate_size
    )
    n = math.ceil(prompt / chunk) * m.num_moe_layers
    # PCIe: KT's layerwise path sends every expert of each layer, whatever the tokens activate
    assert math.isclose(r.traffic_prefill_per_prompt.pcie_bytes, n * layer_bytes, rel_tol=1e-9)
    # HBM: the GPU reads the experts the chunk activates
    frac = activated_fraction(chunk, m.top_k, m.num_experts, skew)
    assert math.isclose(r.traffic_prefill_per_prompt.hbm_bytes, n * layer_bytes * frac, rel_tol=1e-9)
    assert r.layer_loads_per_prompt == pytest.approx(n)


@settings(max_examples=15, deadline=None)
@given(prompts=st.lists(st.integers(600, 40000), min_size=1, max_size=6), large=st.sampled_from([4096, 8192, 16384]))
def test_layered_loads_each_moe_layer_once_per_large_chunk(prompts, large):
    """Requests far apart (each alone on the server): every MoE layer is streamed once per prompt
    and large chunk, where token-chunked prefill with chunk 512 would reload it per 512 tokens."""
    c = comp()
    f = _flags(c, gpu_prefill_token_threshold=512)
    reqs = [Request(i, 1000.0 * i, p, 1) for i, p in enumerate(prompts)]
    tr = engine.run(IterationCosts(c, f), f, reqs, engine.Schedule("layered", large_chunk=large))
    expected = [
        math.ceil(p / large) * c.model.num_moe_layers
        if p % large == 0 or p % large >= 512
        else (p // large) * c.model.num_moe_layers
        for p in prompts
    ]
    assert tr.layer_loads.tolist() == pytest.approx(expected)


@settings(max_examples=10, deadline=None)
@given(
    rate=st.floats(0.02, 0.5, allow_subnormal=False), groups=st.sampled_from([None, 4, 16]), seed=st.integers(0, 100)
)
def test_layered_decode_never_waits_longer_than_one_group_iteration(rate, groups, seed):
    c = comp()
    f = _flags(c)
    reqs = poisson_requests(ARXIV, rate, 60, seed)
    costs = IterationCosts(c, f)
    tr = engine.run(costs, f, reqs, engine.Schedule("layered", groups=groups))
    # the longest a decoding request can wait: one iteration carrying one layer group of a staged
    # batch with the largest decode batch the server admits; the group's forward is slowest at the
    # large chunk (layerwise) or just below the threshold (hybrid, whose time grows with tokens), after
    # the longest prefix a prompt of the mix can have
    d = f.max_running_requests
    worst_group = max(
        costs.forward([(t - d, 30000)], d, d * 40000.0, g_total, g).ms
        for t in (f.gpu_prefill_token_threshold - 1, 8192 + d)
        for g_total in set(tr.groups_used)
        for g in range(g_total)
    )
    gaps = tr.max_gap_ms[tr.output_tokens > 1]
    assert np.all(gaps <= worst_group + 1e-9)
    # and every gap is exactly one iteration: no request ever waits across two
    assert np.all(np.isin(gaps, tr.iter_ms))


def test_chunked_stalls_decode_for_a_whole_layerwise_chunk():
    """The trade-off the layered schedule removes: a decoding request waits through the whole
    8192-token layerwise forward under token-chunked prefill, one group of it under layered."""
    c = comp()
    f = _flags(c)
    reqs = [Request(0, 0.0, 1000, 200), Request(1, 5.0, 16384, 1)]
    chunked = simulate_one(c, f, reqs, engine.Schedule("chunked"), SLO)
    layered = simulate_one(c, f, reqs, engine.Schedule("layered"), SLO)
    full = IterationCosts(c, f).forward([(8192, 0)], 0, 0.0).ms
    assert chunked.max_tbt_ms.max >= full
    assert layered.max_tbt_ms.max < full / 2


def test_every_request_finishes_and_kv_limits_hold():
    c = comp()
    f = _flags(c, max_total_tokens=20000, max_running_requests=4)
    reqs = poisson_requests(SHAREGPT, 0.5, 200, 3) + [Request(999, 1.0, 30000, 10)]
    for s in engine.SCHEDULES:
        tr = engine.run(IterationCosts(c, f), f, reqs, engine.Schedule(s))
        assert tr.rejected.sum() == 1 and tr.rejected[np.argmax(tr.prompt_tokens)]
        ok = ~tr.rejected
        assert np.all(tr.finish_s[ok] >= tr.first_token_s[ok]) and np.all(tr.first_token_s[ok] > tr.arrival_s[ok])
        assert tr.iter_decode.max() <= 4


@given(layers=st.integers(1, 100), g=st.integers(1, 120))
def test_layer_groups_split_every_layer_once(layers, g):
    moe = tuple(range(1, layers, 2))
    gs = layer_groups(layers, moe, g)
    assert sum(a for a, _ in gs) == layers and sum(b for _, b in gs) == len(moe)
    assert max(a for a, _ in gs) - min(a for a, _ in gs) <= 1


def test_gap_histogram_counts_every_gap_once():
    c = comp()
    f = _flags(c, max_total_tokens=20000, max_running_requests=8)
    reqs = poisson_requests(SHAREGPT, 0.2, 120, 5)
    for s in engine.SCHEDULES:
        r = simulate_one(c, f, reqs, engine.Schedule(s), SLO, samples=True)
        served = [q for q in reqs if q.prompt_tokens + q.output_tokens <= 20000]
        assert sum(r.samples["tbt_hist_ms"]["counts"]) == sum(q.output_tokens - 1 for q in served)
        assert r.requests - r.rejected == len(served)


class WholePromptsPrefill(engine.ChunkedPrefill):
    """A schedule added the way docs/howto-add-a-schedule.md says: no chunking, every admitted
    prompt whole in the next forward."""

    def plan(self, take, decode):
        return take(1 << 30), 1, 0


def test_a_new_schedule_is_one_class_in_the_table(monkeypatch):
    """The seam: registering a planner is all `simulate` needs, and the new schedule's laws hold: a
    lone request's TTFT is one forward of its whole prompt, and the forwards that prefill carry whole
    prompts: their sizes add up to sums of consecutive prompts, none cut."""
    from dataclasses import replace

    monkeypatch.setitem(engine.PLANNERS, "whole-prompts", WholePromptsPrefill)
    c = comp()
    f = _flags(c, chunked_prefill_size=2048)
    lone = simulate_one(c, f, [Request(0, 1.0, 5000, 1)], engine.Schedule("whole-prompts"), SLO)
    whole = prefill_time_ms(c, replace(f, chunked_prefill_size=8192), 5000)
    assert math.isclose(lone.ttft_s.p50 * 1e3, whole, rel_tol=1e-9) and whole != prefill_time_ms(c, f, 5000)
    reqs = poisson_requests(ARXIV, 0.5, 12, seed=3)
    trace = engine.run(IterationCosts(c, f), f, reqs, engine.Schedule("whole-prompts"))
    ends = set(np.cumsum([int(r.prompt_tokens) for r in reqs]).tolist())
    done = np.cumsum([int(p) for p in trace.iter_prefill if p > 0]).tolist()
    assert set(done) <= ends and done[-1] == max(ends) and len(trace.arrival_s) == len(reqs)
