"""The online metrics against the in-memory computation on the full record of the same run:
exact where they are exact, within the sketch's stated error once it takes over; the run's memory
does not grow with its requests; no input makes the loop spin."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kttune.cost.components import Components
from kttune.errors import UserError
from kttune.search.workload import load_workload
from kttune.sim import engine
from kttune.sim.costs import IterationCosts
from kttune.sim.metrics import Slo, Summary
from kttune.sim.quantiles import RELATIVE_ACCURACY
from kttune.sim.simulate import schedule_config
from kttune.sim.workload import LengthsStream, MixStream, RequestList, check_chunk
from tests.helpers import cfg, model, profile

A = RELATIVE_ACCURACY * (1 + 1e-9)
M = model("qwen3-30b-a3b")
COMP = Components(profile("h200-pcie5-xeon-amx-16c"), M, M.default_method)
FLAGS = cfg(
    COMP.method.name,
    num_gpu_experts=8,
    chunked_prefill_size=8192,
    gpu_prefill_token_threshold=4096,
    max_total_tokens=60000,
    max_running_requests=16,
)
SLO = Slo(ttft_s=20.0, tbt_ms=400.0)
ARXIV = load_workload("arxiv-summarize").mix
RAG = load_workload("rag")


def reference(tr: engine.Trace, slo: Slo) -> dict:
    """The metrics computed on the whole record with numpy (what the simulator computed before it streamed)."""
    ttft = tr.first_token_s - tr.arrival_s
    served = ~tr.rejected
    multi = served & (tr.output_tokens > 1)
    has = tr.iter_decode > 0
    xs, ws = tr.iter_ms[has], tr.iter_decode[has].astype(float)
    order = np.argsort(xs)
    cum = np.cumsum(ws[order])
    ok_ttft = np.nan_to_num(ttft, nan=np.inf) <= slo.ttft_s
    ok_tbt = np.nan_to_num(tr.max_gap_ms, nan=np.inf) <= slo.tbt_ms
    return {
        "ttft": np.percentile(ttft[served], (50, 90, 99)),
        "ttft_lo": np.percentile(ttft[served], (50, 90, 99), method="lower"),
        "ttft_hi": np.percentile(ttft[served], (50, 90, 99), method="higher"),
        "ttft_mean": ttft[served].mean(),
        "ttft_max": ttft[served].max(),
        "tbt": [xs[order][min(xs.size - 1, int(np.searchsorted(cum, q / 100 * cum[-1])))] for q in (50, 90, 99)],
        "tbt_mean": float((xs * ws).sum() / ws.sum()),
        "tbt_max": xs.max(),
        "gap": np.percentile(tr.max_gap_ms[multi], (50, 90, 99)),
        "gap_max": tr.max_gap_ms[multi].max(),
        "attainment": float((ok_ttft & ok_tbt).mean()),
        "ttft_attainment": float(ok_ttft.mean()),
        "tbt_attainment": float(ok_tbt.mean()),
        "rejected": int(tr.rejected.sum()),
        "requests": len(tr.arrival_s),
        "iterations": len(tr.iter_ms),
        "decode_batch": float(tr.iter_decode.mean()),
        "loads": float(tr.layer_loads.sum() / max(1, served.sum())),
        "duration": float(tr.end_s - tr.arrival_s.min()),
        "ttft_needed": float(np.percentile(np.nan_to_num(ttft, nan=np.inf), 90, method="higher")),
        "gap_needed": float(np.percentile(np.nan_to_num(tr.max_gap_ms, nan=np.inf), 90, method="higher")),
    }


def _run(stream, schedule, **limits):
    c = schedule_config(FLAGS, engine.Schedule(schedule))
    costs = IterationCosts(COMP, c)
    tr = engine.run(costs, c, stream, engine.Schedule(schedule))
    s = Summary(SLO, samples=True, **limits)
    engine.serve(costs, c, stream, engine.Schedule(schedule), s)
    return reference(tr, SLO), s, s.result(schedule), tr


@settings(max_examples=6, deadline=None)
@given(
    schedule=st.sampled_from(engine.SCHEDULES),
    rate=st.floats(0.02, 0.3, allow_subnormal=False),
    seed=st.integers(0, 50),
)
def test_online_metrics_are_the_in_memory_ones(schedule, rate, seed):
    stream = MixStream(ARXIV, rate, 150, seed)
    ref, s, r, tr = _run(stream, schedule)
    assert r.quantiles_exact
    assert [r.ttft_s.p50, r.ttft_s.p90, r.ttft_s.p99] == list(ref["ttft"])
    assert r.ttft_s.mean == pytest.approx(ref["ttft_mean"], rel=1e-12) and r.ttft_s.max == ref["ttft_max"]
    assert [r.tbt_ms.p50, r.tbt_ms.p90, r.tbt_ms.p99] == ref["tbt"] and r.tbt_ms.max == ref["tbt_max"]
    assert r.tbt_ms.mean == pytest.approx(ref["tbt_mean"], rel=1e-12)
    assert [r.max_tbt_ms.p50, r.max_tbt_ms.p90, r.max_tbt_ms.p99] == list(ref["gap"]) and r.max_tbt_ms.max == ref[
        "gap_max"
    ]
    for k in ("attainment", "ttft_attainment", "tbt_attainment"):
        assert getattr(r, k) == ref[k]
    assert (r.rejected, r.requests, r.iterations) == (ref["rejected"], ref["requests"], ref["iterations"])
    assert r.mean_decode_batch == pytest.approx(ref["decode_batch"], rel=1e-12)
    assert r.layer_loads_per_prompt == pytest.approx(ref["loads"], rel=1e-12) and r.duration_s == ref["duration"]
    assert s.ttft.higher(90) == ref["ttft_needed"] and s.max_gap.higher(90) == ref["gap_needed"]
    # every request sampled (the run is shorter than the reservoir), in arrival order
    assert r.samples["prompt_tokens"] == tr.prompt_tokens.tolist()
    assert r.samples["ttft_s"] == pytest.approx(np.round(tr.first_token_s - tr.arrival_s, 4).tolist(), nan_ok=True)


@settings(max_examples=6, deadline=None)
@given(
    schedule=st.sampled_from(engine.SCHEDULES),
    rate=st.floats(0.02, 0.3, allow_subnormal=False),
    seed=st.integers(0, 50),
)
def test_past_the_exact_limit_quantiles_stay_within_the_stated_error(schedule, rate, seed):
    stream = LengthsStream(RAG.prompt_tokens, RAG.weights, RAG.output_tokens, rate, 150, seed)
    ref, s, r, tr = _run(stream, schedule, exact_limit=0, gap_exact_limit=0, sample_limit=40)
    assert not r.quantiles_exact and r.quantile_relative_error == RELATIVE_ACCURACY
    for got, lo, hi, want in zip(
        (r.ttft_s.p50, r.ttft_s.p90, r.ttft_s.p99), ref["ttft_lo"], ref["ttft_hi"], ref["ttft"]
    ):
        assert lo * (1 - A) <= got <= hi * (1 + A) and abs(got - want) <= A * want
    for got, want in zip((r.tbt_ms.p50, r.tbt_ms.p90, r.tbt_ms.p99), ref["tbt"]):
        assert abs(got - want) <= A * want
    for got, want in zip((r.max_tbt_ms.p50, r.max_tbt_ms.p90, r.max_tbt_ms.p99), ref["gap"]):
        assert abs(got - want) <= A * want
    # exact whatever the mode
    assert r.ttft_s.max == ref["ttft_max"] and r.tbt_ms.max == ref["tbt_max"] and r.max_tbt_ms.max == ref["gap_max"]
    assert r.ttft_s.mean == pytest.approx(ref["ttft_mean"], rel=1e-12) and r.tbt_ms.mean == pytest.approx(
        ref["tbt_mean"], rel=1e-12
    )
    for k in ("attainment", "ttft_attainment", "tbt_attainment"):
        assert getattr(r, k) == ref[k]
    assert abs(s.ttft.higher(90) - ref["ttft_needed"]) <= A * ref["ttft_needed"]
    # a uniform sample of 40 of the 150 requests, each with its own values
    smp = r.samples
    assert smp["requests_sampled"] == 40 and smp["of_requests"] == 150
    by_prompt_ttft = set(zip(tr.prompt_tokens.tolist(), np.round(tr.first_token_s - tr.arrival_s, 4).tolist()))
    assert set(zip(smp["prompt_tokens"], smp["ttft_s"])) <= by_prompt_ttft
    assert sum(smp["tbt_hist_ms"]["counts"]) == int(tr.iter_decode.sum())


def _peak_bytes(costs: IterationCosts, requests: int) -> int:
    stream = MixStream(ARXIV, 0.05, requests, 3, chunk=200)
    tracemalloc.start()
    engine.serve(
        costs,
        FLAGS,
        stream,
        engine.Schedule("chunked"),
        Summary(SLO, samples=True, exact_limit=1000, gap_exact_limit=1000, sample_limit=100),
    )
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def test_memory_does_not_grow_with_the_requests():
    """Ten times the requests, about the same peak: what a run holds is what is in flight and a
    chunk of requests (200 here; the cost memos, bounded, are filled by a first run of the same
    requests outside the measurement)."""
    costs = IterationCosts(COMP, FLAGS)
    engine.serve(costs, FLAGS, MixStream(ARXIV, 0.05, 10_000, 3), engine.Schedule("chunked"), Summary(SLO))
    small, large = _peak_bytes(costs, 1_000), _peak_bytes(costs, 10_000)
    assert large < 1.3 * small + (1 << 20), (small, large)


class _Bad:
    """A stream that skips its own checks, to reach the engine's."""

    def __init__(self, arr, plen=None, olen=None):
        self.arr = np.array(arr, dtype=float)
        self.plen = np.array(plen or [100] * len(arr), dtype=np.int64)
        self.olen = np.array(olen or [5] * len(arr), dtype=np.int64)
        self.count = len(arr)

    def chunks(self):
        yield self.arr, self.plen, self.olen


@pytest.mark.parametrize(
    "stream,needle",
    [
        (_Bad([0.0, math.nan, 3.0]), "arrives at nan"),
        (_Bad([0.0, math.inf]), "arrives at inf"),
        (_Bad([2.0, 1.0]), "not in order"),
        (_Bad([-1.0]), "arrives at -1"),
        (_Bad([0.0, 1.0], [100, 10**9]), "prompt_tokens 1000000000"),
        (_Bad([0.0], [100], [0]), "output_tokens 0"),
    ],
)
def test_the_engine_refuses_what_would_make_it_spin(stream, needle):
    with pytest.raises(UserError, match=needle):
        engine.run(IterationCosts(COMP, FLAGS), FLAGS, stream, engine.Schedule("chunked"))


@pytest.mark.parametrize("rate", [math.nan, math.inf, 0.0, -1.0])
def test_streams_refuse_a_rate_that_is_not_positive_and_finite(rate):
    for make in (lambda: MixStream(ARXIV, rate, 10), lambda: LengthsStream((100,), (1.0,), 5, rate, 10)):
        with pytest.raises(UserError, match="rate"):
            make()


def test_a_chunk_check_names_the_request():
    with pytest.raises(UserError, match="request 2 of a chunk"):
        check_chunk(np.array([0.0, math.nan]), np.array([1, 1]), np.array([1, 1]), 0.0, "x")


def test_request_lists_replay_in_arrival_order():
    from kttune.sim.workload import Request

    reqs = [Request(0, 5.0, 100, 2), Request(1, 1.0, 200, 3), Request(2, 1.0, 300, 4)]
    ((arr, p, o),) = RequestList(tuple(reqs)).chunks()
    assert arr.tolist() == [1.0, 1.0, 5.0] and p.tolist() == [200, 300, 100]
