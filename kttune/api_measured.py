"""The library call behind `kttune search --measure`: choose the evaluator, run the model search
for its candidates, then the measured study. The search core (kttune.search.measured) receives the
evaluator; only this module knows where measurements come from."""

from __future__ import annotations

from typing import Callable

from kttune.errors import UserError
from kttune.search.measured import Evaluator, MeasuredRequest, MeasuredSearchResult, ModelEvaluator, run_measured_search
from kttune.search.study import StudyOptions, run_search

EVALUATORS = ("runner", "runner-cpu", "model")


def make_evaluator(inp, name: str) -> Evaluator:
    """`runner`: the path runner on this machine's GPU; `runner-cpu`: its CPU variant (small shapes,
    for checking the machinery without a GPU); `model`: the cost model (a dry run)."""
    from kttune.cost.components import Components

    if name == "model":
        r = inp.request
        return ModelEvaluator(Components(r.profile, r.model, r.method, r.tp))
    if name in ("runner", "runner-cpu"):
        from kttune.runner_evaluator import path_runner_evaluator

        return path_runner_evaluator(inp, device="cpu" if name == "runner-cpu" else "cuda")
    raise UserError(f"unknown evaluator {name!r}", f"use one of {', '.join(EVALUATORS)}")


def measured_search(inp, evaluator: Evaluator, trials: int = 20, budget_s: float | None = None, seed: int | None = None,
                    storage: str | None = None, model_trials: int = 300,
                    on_trial: Callable[[int, int, float | None], None] | None = None) -> MeasuredSearchResult:
    model_result = run_search(inp.request, StudyOptions(trials=model_trials, seed=seed, storage=storage))
    return run_measured_search(MeasuredRequest(base=inp.request, trials=trials, seed=seed, storage=storage, budget_s=budget_s),
                               evaluator, model_result, on_trial)
