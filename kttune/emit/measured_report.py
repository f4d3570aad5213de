"""The report of `kttune search --measure`: the measured pick, the model's pick and candidates, and the
baselines, each with its measured prefill throughput. Rich table and a JSON-able dict."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kttune.emit.report import render_notes


def _tok(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def rows(res) -> list:
    return [res.best, *res.model_candidates, *res.baselines]


def render_measured(console: Console, res) -> None:
    t = Table(title=f"measured prefill throughput (evaluator: {res.evaluator}; request-weighted over "
                    f"{len(res.lengths)} prompt lengths)", show_edge=False)
    for col in ("configuration", "chunk", "threshold", "GPU exp.", "cpuinfer", "measured tok/s", "vs measured pick",
                "predicted tok/s", "state"):
        t.add_column(col, justify="right" if col not in ("configuration", "state") else "left")
    top = res.best.measured_tok_s or 0.0
    for r in rows(res):
        c = r.cfg
        rel = f"{r.measured_tok_s / top:.1%}" if r.measured_tok_s and top else "-"
        if r.vs_best is not None and r.vs_best.low != r.vs_best.high:
            rel = f"{r.vs_best.ratio:.1%} [{r.vs_best.low:.0%}-{r.vs_best.high:.0%}]"
        state = (r.race_status or r.state) if r.fits else "does not fit the budget"
        t.add_row(r.name, f"{c.chunked_prefill_size}", f"{c.gpu_prefill_token_threshold}", f"{c.num_gpu_experts}",
                  f"{c.cpuinfer_threads}", r.estimate.short() if r.estimate is not None else _tok(r.measured_tok_s), rel,
                  _tok(r.predicted_tok_s), state)
    console.print(t)
    if res.decision:
        console.print(f"decision ({res.race_rounds} interleaved rounds): {res.decision}")
    for r in res.baselines:
        if r.notes:
            console.print(f"{r.name}: " + "; ".join(r.notes))
    console.print(f"study {res.study_name} in {res.storage}: {res.trials_measured} measured trials "
                  f"({res.trials_pruned} stopped early by the signed-rank test, {res.trials_new} run now), "
                  f"{res.trials_infeasible} configurations skipped as over budget; {res.wall_s:.0f} s")
    render_notes(console, res.notes)


def measured_dict(res, input_notes: tuple[str, ...] = ()) -> dict:
    """`kttune search --measure --json`; `notes`: the inputs' (`input_notes`), then the search's
    (storage repairs, the profile's fits), once each, as `kttune search --json` has them."""
    def one(r) -> dict:
        return {"name": r.name, "config": r.cfg.to_dict(), "fits": r.fits, "measured_tok_s": r.measured_tok_s,
                "predicted_tok_s": r.predicted_tok_s, "ms_by_prompt_tokens": {str(k): v for k, v in sorted(r.ms_by_length.items())},
                "state": r.state, "source": r.source, "notes": list(r.notes), "trial": r.trial,
                "estimate": r.estimate.to_dict() if r.estimate is not None else None,
                "vs_measured_pick": r.vs_best.to_dict() if r.vs_best is not None else None, "race_status": r.race_status}

    return {"evaluator": res.evaluator, "prompt_tokens": list(res.lengths), "weights": list(res.weights),
            "measured_pick": one(res.best), "model_pick": one(res.model_pick),
            "model_candidates": [one(r) for r in res.model_candidates], "baselines": [one(r) for r in res.baselines],
            "decision": res.decision, "race_rounds": res.race_rounds,
            "study": {"name": res.study_name, "storage": res.storage, "measured_trials": res.trials_measured,
                      "pruned": res.trials_pruned, "infeasible": res.trials_infeasible, "new_trials": res.trials_new,
                      "wall_s": res.wall_s},
            "notes": list(dict.fromkeys((*input_notes, *res.notes)))}
