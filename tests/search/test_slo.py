"""SLO checks of one configuration: the limits it reports as needed are the ones it meets."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from kttune.cost.components import Components
from kttune.search.slo import SloTarget, check_slo, workload_requests
from kttune.search.workload import load_workload
from tests.helpers import cfg, model, profile

COMP = Components(profile("h200-pcie5-xeon-amx-16c"), model("qwen3-30b-a3b"), "BF16")
FLAGS = cfg(
    "BF16", gpu_prefill_token_threshold=2048, num_gpu_experts=8, max_total_tokens=200000, max_running_requests=16
)


@settings(max_examples=8, deadline=None)
@given(
    rate=st.floats(0.005, 0.5, allow_subnormal=False),
    ttft=st.floats(1.0, 100.0, allow_subnormal=False),
    tbt=st.floats(50.0, 5000.0, allow_subnormal=False),
    wl=st.sampled_from(["summarize", "chat", "rag"]),
)
def test_needed_limits_are_met_and_shortfalls_name_the_missed_limit(rate, ttft, tbt, wl):
    w = load_workload(wl)
    target = SloTarget(rate, ttft, tbt, requests=80)
    reqs = workload_requests(w, target)
    chk = check_slo(COMP, FLAGS, reqs, target)
    assert (chk.constraint <= 0) == chk.met
    # with each limit set to what the check says 90% of requests need, each alone is met
    exact = SloTarget(rate, chk.ttft_needed_s, chk.tbt_needed_ms, requests=80)
    again = check_slo(COMP, FLAGS, reqs, exact)
    assert again.ttft_attainment >= 0.9 and again.tbt_attainment >= 0.9
    text = " ".join(chk.shortfalls())
    assert ("TTFT" in text) == (chk.ttft_needed_s > ttft)
    assert ("TBT:" in text) == (chk.tbt_needed_ms > tbt)


def test_light_load_with_loose_limits_is_met_and_overload_misses_ttft():
    w = load_workload("chat")
    light = SloTarget(0.001, 60.0, 5000.0, requests=60)
    assert check_slo(COMP, FLAGS, workload_requests(w, light), light).met
    heavy = SloTarget(5.0, 60.0, None, requests=60)
    chk = check_slo(COMP, FLAGS, workload_requests(w, heavy), heavy)
    assert not chk.met and chk.shortfalls()[0].startswith("TTFT")


def _request(wl="chat"):
    from kttune import app
    from kttune.units import GIB

    return app.resolve_inputs("qwen3-30b-a3b", 80 * GIB, profile="h200-pcie5-xeon-amx-16c", workload=wl).request


def _opts(tmp_path):
    from kttune.search.study import StudyOptions

    return StudyOptions(trials=25, seed=0, storage=str(tmp_path / "s.journal"))


def test_search_under_an_slo_picks_flags_that_meet_it(tmp_path):
    from kttune.search.study import run_search

    slo = SloTarget(0.01, 30.0, 3000.0, requests=60)
    res = run_search(_request(), _opts(tmp_path), slo=slo)
    assert res.slo["met"] and res.best.feasible and res.best.constraints["slo_attainment"] <= 0
    again = check_slo(
        COMP.__class__(COMP.profile, COMP.model, res.best.cfg.method),
        res.best.cfg,
        workload_requests(load_workload("chat"), slo),
        slo,
    )
    assert again.met


def test_search_under_an_impossible_slo_says_which_limit_and_by_how_much(tmp_path):
    import re

    import pytest

    from kttune.errors import InfeasibleError
    from kttune.search.study import run_search

    with pytest.raises(InfeasibleError) as e:
        run_search(_request(), _opts(tmp_path), slo=SloTarget(0.01, 30.0, 1.0, requests=60))
    msg = e.value.line()
    assert "TBT:" in msg and "TTFT:" not in msg and re.search(r"the limit is 1 ms \([\d,]+ ms over\)", msg), msg
    assert "not even an idle server" in msg
