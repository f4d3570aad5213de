"""`kttune search --measure`: choose the evaluator, run the model search for its candidates, then
the measured study, and the launch command of the measured pick. The search core
(kttune.search.measured) receives the evaluator; only this module knows where measurements come
from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kttune.app import serialize
from kttune.app.inputs import Inputs
from kttune.app.names import DEFAULT_MEASURED_TRIALS
from kttune.app.search_explain import command_for
from kttune.errors import UserError
from kttune.search.measured import Evaluator, MeasuredRequest, MeasuredSearchResult, ModelEvaluator, run_measured_search
from kttune.search.study import StudyOptions, run_search

EVALUATORS = ("runner", "runner-cpu", "model")


@dataclass(frozen=True)
class MeasuredOutcome:
    """The measured study's result and the measured pick's launch argv."""

    inputs: Inputs
    result: MeasuredSearchResult
    argv: tuple[str, ...]

    def to_dict(self) -> dict:
        return serialize.measured_dict(
            self.result, list(self.argv), serialize.request_context(self.inputs.request), self.inputs.notes
        )


def make_evaluator(inp: Inputs, name: str) -> Evaluator:
    """`runner`: the path runner on this machine's GPU; `runner-cpu`: its CPU variant (small shapes,
    for checking the machinery without a GPU); `model`: the cost model (a dry run)."""
    from kttune.cost.components import Components
    from kttune.extras import require

    require("scipy", "the measured search (--measure: Optuna's Wilcoxon pruner)")
    if name == "model":
        r = inp.request
        return ModelEvaluator(Components(r.profile, r.model, r.method, r.tp))
    if name in ("runner", "runner-cpu"):
        from kttune.app.runner_evaluator import path_runner_evaluator

        return path_runner_evaluator(inp, device="cpu" if name == "runner-cpu" else "cuda")
    raise UserError(f"unknown evaluator {name!r}", f"use one of {', '.join(EVALUATORS)}")


def measured_result(
    inp: Inputs,
    evaluator: Evaluator,
    trials: int = DEFAULT_MEASURED_TRIALS,
    budget_s: float | None = None,
    seed: int | None = None,
    storage: str | None = None,
    model_trials: int = 300,
    on_trial: Callable[[int, int, float | None], None] | None = None,
) -> MeasuredSearchResult:
    """The measured study on `evaluator`, seeded with the model search's candidates."""
    model_result = run_search(inp.request, StudyOptions(trials=model_trials, seed=seed, storage=storage))
    return run_measured_search(
        MeasuredRequest(base=inp.request, trials=trials, seed=seed, storage=storage, budget_s=budget_s),
        evaluator,
        model_result,
        on_trial,
    )


def measured_search(
    inp: Inputs,
    evaluator: str | Evaluator = "runner",
    trials: int = DEFAULT_MEASURED_TRIALS,
    budget_s: float | None = None,
    seed: int | None = None,
    storage: str | None = None,
    on_trial: Callable[[int, int, float | None], None] | None = None,
) -> MeasuredOutcome:
    """`kttune search --measure`: the measured study (`evaluator` a name of EVALUATORS or an
    Evaluator) and the launch command of its pick, evaluated on the cost model for its memory."""
    from kttune.cost.components import Components
    from kttune.search.evaluate import evaluate

    ev = make_evaluator(inp, evaluator) if isinstance(evaluator, str) else evaluator
    res = measured_result(inp, ev, trials=trials, budget_s=budget_s, seed=seed, storage=storage, on_trial=on_trial)
    r = inp.request
    best_ev = evaluate(Components(r.profile, r.model, r.method, r.tp), res.best.cfg, r.workload, r.budget)
    return MeasuredOutcome(inp, res, tuple(command_for(inp, best_ev)))
