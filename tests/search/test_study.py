"""The search end to end on the model-evaluated objective, with real Optuna storage."""

from __future__ import annotations

import optuna
import pytest

from kttune.cli.flags import spelled
from kttune.errors import InfeasibleError, UserError
from kttune.search.evaluate import Budget, evaluate
from kttune.search.study import StudyOptions, run_search
from kttune.search.request import SearchRequest
from kttune.search.workload import load_workload
from kttune.spec.methods import get_method
from kttune.units import GIB
from tests.helpers import model, profile


def request(name="qwen3-30b-a3b", method=None, vram=32, ram=128, tp=1, wl="rag"):
    m = model(name)
    return SearchRequest(
        model=m,
        method=method or m.default_method,
        profile=profile(),
        workload=load_workload(wl).clipped(m.max_position_embeddings),
        budget=Budget(vram * GIB, ram * GIB),
        tp=tp,
    )


def options(tmp_path, trials=120, seed=7, storage=None):
    return StudyOptions(trials=trials, seed=seed, storage=storage or str(tmp_path / "study.journal"))


def check_rules(res, req):
    method = get_method(req.method)
    for ev in [res.best, *res.pareto]:
        c = ev.cfg
        assert ev.feasible
        assert ev.vram.runtime_peak_bytes <= req.budget.usable_vram_bytes
        assert c.max_total_tokens >= req.workload.max_prompt_tokens + req.workload.output_tokens
        if c.gpu_prefill_token_threshold:
            assert method.layerwise and c.gpu_prefill_token_threshold <= c.chunked_prefill_size
        assert 0 <= c.num_gpu_experts <= req.model.num_experts


def test_search_obeys_the_rules_and_beats_kt_defaults(tmp_path):
    req = request()
    res = run_search(req, options(tmp_path))
    check_rules(res, req)
    assert res.trials_total == 120 and res.trials_new == 120
    assert res.best.mean_ttft_ms <= res.baseline.mean_ttft_ms


def test_amx_methods_keep_threshold_zero(tmp_path):
    res = run_search(request("deepseek-v3", "AMXINT4", vram=48, ram=1024), options(tmp_path, trials=60))
    assert res.space.thresholds == (0,)
    assert all(e.cfg.gpu_prefill_token_threshold == 0 for e in res.pareto)


def test_search_resumes_from_its_storage(tmp_path):
    store = str(tmp_path / "resume.journal")
    first = run_search(request(), options(tmp_path, trials=40, storage=store))
    assert first.trials_new == 40
    again = run_search(request(), options(tmp_path, trials=70, storage=store))
    assert again.study_name == first.study_name
    assert again.trials_total == 70 and again.trials_new == 30
    done = run_search(request(), options(tmp_path, trials=70, storage=store))
    assert done.trials_new == 0


def test_same_seed_same_pick(tmp_path):
    a = run_search(request(), options(tmp_path, trials=80, storage=str(tmp_path / "a.journal")))
    b = run_search(request(), options(tmp_path, trials=80, storage=str(tmp_path / "b.journal")))
    assert a.best.cfg == b.best.cfg


def _complete(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]


def test_sqlite_storage_resumes_to_the_requested_total(tmp_path):
    """--trials is the study's total: a rerun keeps the stored trials unchanged and adds only the
    missing ones. Read back through Optuna's own API on the sqlite file."""
    url = f"sqlite:///{tmp_path}/s.db"
    first = run_search(request(), options(tmp_path, trials=25, storage=url))
    stored = _complete(optuna.load_study(study_name=first.study_name, storage=url))
    assert len(stored) == 25
    before = [(t.params, t.values) for t in stored]

    again = run_search(request(), options(tmp_path, trials=40, storage=url))
    assert again.study_name == first.study_name and again.trials_new == 15
    after = _complete(optuna.load_study(study_name=first.study_name, storage=url))
    assert len(after) == 40
    assert [(t.params, t.values) for t in after[:25]] == before  # the first run's trials, untouched
    # each new trial's values are the objective of its own params
    space, comp = again.space, again.components
    for t in after[25:]:
        p = {"threshold": 0, "threads": space.threads[0], **t.params}
        ev = evaluate(
            comp,
            space.config(p["chunk"], p["threshold"], p["gpu_experts"], p["kv_k"], p["threads"]),
            request().workload,
            request().budget,
        )
        assert t.values == pytest.approx([ev.mean_ttft_ms / 1e3, ev.decode_tok_s])
    # asking for no more than is stored runs nothing and changes nothing
    same = run_search(request(), options(tmp_path, trials=40, storage=url))
    assert same.trials_new == 0
    assert len(_complete(optuna.load_study(study_name=first.study_name, storage=url))) == 40


def test_each_configuration_is_evaluated_once(tmp_path, monkeypatch):
    """The trials' evaluations serve the front, the pick and the baseline: no configuration is
    evaluated twice in one search."""
    import kttune.search.study as study_mod

    seen: list = []
    real = study_mod.evaluate

    def counting(comp, cfg, workload, budget):
        seen.append(cfg)
        return real(comp, cfg, workload, budget)

    monkeypatch.setattr(study_mod, "evaluate", counting)
    res = run_search(request(), options(tmp_path, trials=60))
    assert len(seen) == len(set(seen))
    assert res.best.cfg in seen and res.baseline.cfg in seen


def test_budget_too_small_names_the_minimum_and_its_breakdown(tmp_path):
    with pytest.raises(InfeasibleError, match=r"needs at least [0-9.]+ GiB per GPU.*non expert weights"):
        run_search(request("qwen3-235b-a22b", vram=8, ram=1024), options(tmp_path))


def test_host_ram_too_small_is_reported(tmp_path):
    with pytest.raises(InfeasibleError, match="host RAM"):
        run_search(request("kimi-k2-thinking", vram=80, ram=128), options(tmp_path))


def test_fp8_tp_divisibility(tmp_path):
    # MiniMax-M2 I=1536: FP8 block weights need (I/tp) % 128 == 0 -> at most TP 4
    with pytest.raises(UserError) as e:
        run_search(request("minimax-m2.1", vram=80, ram=512, tp=8), options(tmp_path))
    assert "use gpus 1, 2 or 4" in str(e.value)  # the parameter; the CLI spells it --gpus
    assert "use --gpus 1, 2 or 4" in spelled(e.value).line()


def test_zero_trials_is_refused(tmp_path):
    with pytest.raises(UserError) as e:
        run_search(request(), options(tmp_path, trials=0))
    assert spelled(e.value).line().startswith("--trials 0")


def test_more_vram_never_predicts_slower(tmp_path):
    small = run_search(request(vram=24), options(tmp_path, trials=150, storage=str(tmp_path / "s.journal")))
    big = run_search(request(vram=80), options(tmp_path, trials=150, storage=str(tmp_path / "b.journal")))
    assert min(e.mean_ttft_ms for e in big.pareto) <= min(e.mean_ttft_ms for e in small.pareto) * 1.05


@pytest.mark.parametrize("name,gib", [("glm-5", 80), ("deepseek-v3", 141)])
def test_no_other_attention_backend_dominates_the_pick(name, gib):
    """On a tight budget few trials land in the feasible region, fewer on each backend: the pick is
    tried on every backend the space offers, and none of them fits with a prefill no slower and a
    decode no slower, one of them faster (docs/cost-model.md#mla-prefill-forms)."""
    from dataclasses import replace

    from kttune.cost.components import Components
    from kttune.search.space import attention_backends

    m = model(name)
    req = SearchRequest(
        m,
        m.default_method,
        profile("h200-pcie5-xeon-amx-16c"),
        load_workload("long-context"),
        Budget(gib * GIB, 2048 * GIB),
    )
    best = run_search(req, StudyOptions(trials=120, seed=1, storage=":memory:")).best
    comp = Components(req.profile, m, m.default_method)
    assert len(attention_backends(comp)) >= 2
    for b in attention_backends(comp):
        alt = evaluate(comp, replace(best.cfg, attention_backend=b), req.workload, req.budget)
        dominates = alt.mean_ttft_ms <= best.mean_ttft_ms and alt.decode_tok_s >= best.decode_tok_s
        strictly = alt.mean_ttft_ms < best.mean_ttft_ms * 0.9995 or alt.decode_tok_s > best.decode_tok_s * 1.0005
        assert not (alt.feasible and dominates and strictly), b
