"""The measured search with real Optuna storage. Its evaluator here is the cost model
(`ModelEvaluator`): deterministic, so the pick can be held to an exhaustive grid computed
independently; the path runner plugs into the same protocol on a real machine."""

from __future__ import annotations

import json
import multiprocessing as mp
import time

import optuna
import pytest
from hypothesis import given, strategies as st

from kttune.cost.components import Components
from kttune.cost.prefill import prefill_time_ms
from kttune.errors import UserError
from kttune.search.evaluate import Budget, evaluate
from kttune.units import parse_duration_s
from kttune.search.measured import MeasuredRequest, ModelEvaluator, prefill_tok_s, run_measured_search
from kttune.search.space import KV_UNIT, build_space
from kttune.search.study import StudyOptions, run_search
from kttune.search.request import SearchRequest
from kttune.search.workload import workload_from_dict
from kttune.units import GIB
from tests.helpers import TORN_TAIL, model, profile, set_aside, torn_journal

SHIPPED = "h200-pcie5-xeon-amx-16c"


# prompts up to 16K keep the exhaustive grid below cheap; 8 lengths give the signed-rank test room to prune
WORKLOAD = workload_from_dict(
    {
        "prompt_tokens": [300, 700, 1500, 2500, 4000, 6000, 10000, 16384],
        "weights": [8, 7, 6, 5, 4, 3, 2, 1],
        "output_tokens": 256,
        "concurrency": 4,
        "decode_weight": 0.3,
    },
    "test",
    "test workload",
)


def base(name="qwen3-30b-a3b", vram=32) -> SearchRequest:
    m = model(name)
    return SearchRequest(
        model=m,
        method=m.default_method,
        profile=profile(SHIPPED),
        workload=WORKLOAD,
        budget=Budget(vram * GIB, 512 * GIB),
    )


def model_search(b: SearchRequest, storage: str, seed: int = 3):
    return run_search(b, StudyOptions(trials=60, seed=seed, storage=storage))


def comp_of(b: SearchRequest) -> Components:
    return Components(b.profile, b.model, b.method, b.tp)


def test_budget_durations():
    assert parse_duration_s("10m", "--budget") == 600 and parse_duration_s("1h30m", "--budget") == 5400
    assert parse_duration_s("90", "--budget") == 90
    assert parse_duration_s("1.5h", "--budget") == 5400 and parse_duration_s("45s", "--budget") == 45
    for bad in ("ten minutes", "10x", "0", "-5m"):
        with pytest.raises(UserError):
            parse_duration_s(bad, "--budget")


@given(
    st.lists(
        st.tuples(st.integers(1, 100_000), st.floats(0.01, 1e5), st.floats(0.01, 1.0)),
        min_size=1,
        max_size=8,
        unique_by=lambda x: x[0],
    ),
    st.floats(0.1, 10),
)
def test_throughput_scales_inversely_with_time(rows, k):
    lengths = [r[0] for r in rows]
    ms = {r[0]: r[1] for r in rows}
    w = [r[2] for r in rows]
    a = prefill_tok_s(ms, lengths, w)
    b = prefill_tok_s({n: k * t for n, t in ms.items()}, lengths, w)
    assert abs(a / b - k) < 1e-9 * k


def _grid_optimum(b: SearchRequest, kv_units: int) -> float:
    """Exhaustive over chunk x threshold x GPU experts x threads at the measured search's KV pool,
    computed straight from the cost model."""
    comp = comp_of(b)
    space = build_space(comp, b.workload, b.budget, b.tp)
    wl = b.workload
    best = 0.0
    experts = sorted({round(space.gpu_experts_max * f) for f in (0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1)})
    for chunk in space.chunks:
        for thr in space.thresholds:
            for n in experts:
                for th in space.threads:
                    cfg = space.config(chunk, thr, n, kv_units, th)
                    if not evaluate(comp, cfg, wl, b.budget).feasible:
                        continue
                    ms = {p: prefill_time_ms(comp, cfg, p) for p in wl.prompt_tokens}
                    best = max(best, prefill_tok_s(ms, wl.prompt_tokens, wl.weights))
    return best


def test_pick_within_3_percent_of_the_grid_in_20_trials_and_beats_baselines(tmp_path):
    b = base()
    model_res = model_search(b, str(tmp_path / "model.journal"))
    res = run_measured_search(
        MeasuredRequest(base=b, trials=20, seed=3, storage=":memory:"), ModelEvaluator(comp_of(b)), model_res
    )
    assert res.trials_measured <= 21
    assert res.best.measured_tok_s >= 0.97 * _grid_optimum(b, res.model_pick.cfg.max_total_tokens // KV_UNIT)
    for bl in res.baselines:
        if bl.fits:
            assert bl.state == "complete" and res.best.measured_tok_s >= bl.measured_tok_s
    # the model's candidates and the baselines were measured in full, never pruned
    assert all(c.state == "complete" for c in res.model_candidates)
    assert res.model_pick.measured_tok_s == pytest.approx(res.model_pick.predicted_tok_s)


def test_pruned_trials_stop_early_and_are_worse(tmp_path):
    b, storage = base(), str(tmp_path / "s.journal")
    res = run_measured_search(
        MeasuredRequest(base=b, trials=25, seed=11, storage=storage, model_prefill_trials=40),
        ModelEvaluator(comp_of(b)),
        model_search(b, storage, seed=11),
    )
    study = optuna.load_study(
        study_name=res.study_name,
        storage=optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(res.storage)),
    )
    pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED and t.user_attrs.get("measured")]
    assert res.trials_pruned == len(pruned) > 0
    n = len(res.lengths)
    for t in pruned:
        assert len(t.intermediate_values) < n
        assert t.user_attrs.get("role") is None  # enqueued candidates and baselines are never pruned


def test_resume_keeps_what_was_measured(tmp_path):
    b, storage = base(), str(tmp_path / "s.journal")
    model_res = model_search(b, storage)
    opts = dict(seed=3, storage=storage, model_prefill_trials=40)
    first = run_measured_search(MeasuredRequest(base=b, trials=8, **opts), ModelEvaluator(comp_of(b)), model_res)
    again = run_measured_search(MeasuredRequest(base=b, trials=12, **opts), ModelEvaluator(comp_of(b)), model_res)
    assert again.study_name == first.study_name
    assert 12 <= again.trials_measured <= 13 and again.trials_measured > first.trials_measured
    assert again.best.measured_tok_s >= first.best.measured_tok_s
    done = run_measured_search(MeasuredRequest(base=b, trials=12, **opts), ModelEvaluator(comp_of(b)), model_res)
    assert done.trials_new == 0  # nothing left to measure


def test_a_torn_journal_is_repaired_and_the_result_says_so(tmp_path):
    """The measured search opens its own storage: a journal torn by a crash is cut back to its
    intact records, and the repair note reaches the result (the model search ran elsewhere)."""
    b, journal = base(), tmp_path / "s.journal"
    intact = torn_journal(journal)
    model_res = model_search(b, str(tmp_path / "model.journal"))
    res = run_measured_search(
        MeasuredRequest(base=b, trials=3, seed=3, storage=str(journal), model_prefill_trials=20),
        ModelEvaluator(comp_of(b)),
        model_res,
    )
    (note,) = [n for n in res.notes if "set aside a torn last record" in n]
    assert str(journal) in note and note.rsplit("kept in ", 1)[1].startswith(str(journal) + ".set-aside-")
    assert set_aside(note) == [(len(intact), TORN_TAIL)]  # the torn bytes and where they were, kept
    data = journal.read_bytes()
    assert data.startswith(intact) and TORN_TAIL not in data  # cut back, then appended to
    assert all(json.loads(line)["op_code"] is not None for line in data.splitlines())  # every record whole
    # the model search's notes (the profile's fits) come first, once each
    assert list(res.notes[: len(model_res.notes)]) == list(dict.fromkeys(model_res.notes))
    again = run_measured_search(
        MeasuredRequest(base=b, trials=3, seed=3, storage=str(journal), model_prefill_trials=20),
        ModelEvaluator(comp_of(b)),
        model_res,
    )
    assert not any("torn" in n for n in again.notes)  # nothing left to repair


def test_the_users_chunks_bound_the_measured_search_as_they_bound_the_model_search(tmp_path):
    """--chunks (SearchRequest.chunks) sets one space for both searches: the measured study never
    tries a chunk the user did not offer, and the model's pick (chunk 12288, off the default list)
    is measured as picked."""
    from dataclasses import replace

    b = replace(base(), chunks=(4096, 12288))
    model_res = run_search(b, StudyOptions(trials=40, seed=3, storage=":memory:"))
    res = run_measured_search(
        MeasuredRequest(base=b, trials=4, seed=3, storage=":memory:", model_prefill_trials=20),
        ModelEvaluator(comp_of(b)),
        model_res,
    )
    assert res.space == model_res.space and set(res.space.chunks) <= {4096, 12288}
    assert res.model_pick.cfg == model_res.best.cfg and res.model_pick.state == "complete"
    for c in (res.best, *res.model_candidates, *res.baselines):
        assert c.state != "complete" or c.cfg.chunked_prefill_size in (4096, 12288), c


class SlowModelEvaluator(ModelEvaluator):
    """The model, with a pause per length, so that two processes overlap in time."""

    def measure(self, cfg, lengths):
        time.sleep(0.02)
        return super().measure(cfg, lengths)


def _worker(storage: str, trials: int) -> None:
    b = base()
    run_measured_search(
        MeasuredRequest(base=b, trials=trials, seed=3, storage=storage, model_prefill_trials=20),
        SlowModelEvaluator(comp_of(b)),
        model_search(b, storage),
    )


def run_two_workers_and_check(storage: str, store) -> None:
    """Two processes run the same measured search on one storage; the study is then complete, shared
    and without double measurements."""
    model_search(base(), storage)  # the model study exists before the two join (both would create it otherwise)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(storage, 10)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
        assert p.exitcode == 0
    (summary,) = [s for s in optuna.get_all_study_summaries(store) if s.study_name.startswith("kttune-measured-")]
    trials = optuna.load_study(study_name=summary.study_name, storage=store).trials
    measured = [t for t in trials if t.user_attrs.get("measured") and t.state.is_finished()]
    assert 10 <= len(measured) <= 12  # the study's total; each process may finish one trial under way
    assert len({t.user_attrs["worker"] for t in measured}) == 2  # both processes measured trials of the one study
    names = [t.user_attrs["name"] for t in measured if t.user_attrs.get("role")]
    assert len(names) == len(set(names))  # each enqueued candidate and baseline measured once
    # a third run of the same command finds the study done
    b = base()
    res = run_measured_search(
        MeasuredRequest(base=b, trials=10, seed=3, storage=storage, model_prefill_trials=20),
        ModelEvaluator(comp_of(b)),
        model_search(b, storage),
    )
    assert res.study_name == summary.study_name and res.trials_new == 0


def test_two_processes_share_one_study(tmp_path):
    """Through a journal file here; the same code path serves sqlite:// and a PostgreSQL server
    (tests/search/test_measured_postgres.py)."""
    storage = str(tmp_path / "s.journal")
    run_two_workers_and_check(
        storage, optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(storage))
    )


def test_pruner_falls_back_to_median_without_scipy(monkeypatch):
    import sys

    import optuna

    from kttune.search.measured import measured_pruner

    assert isinstance(measured_pruner(0.1), optuna.pruners.WilcoxonPruner)  # scipy is installed here
    monkeypatch.setitem(sys.modules, "scipy.stats", None)  # an import of it now raises ImportError
    assert isinstance(measured_pruner(0.1), optuna.pruners.MedianPruner)
