"""`kttune search --measure`: the measured branch of the search command (parse, call
kttune.api_measured, render). Kept beside kttune/cli.py so the search command stays short."""

from __future__ import annotations

import json

import typer

from kttune.errors import UserError


def measured_search(console, inp, evaluator: str, trials: int | None, budget: str | None, seed: int | None,
                    storage: str | None, json_out: bool, measure: bool) -> None:
    from kttune import api
    from kttune.api_measured import make_evaluator, measured_search as run
    from kttune.emit.launch import launch_command
    from kttune.emit.measured_report import measured_dict, render_measured
    from kttune.emit.progress import measure_progress
    from kttune.units import parse_duration_s

    from kttune.extras import require

    if not measure:
        raise UserError("--budget applies to a measured search", "add --measure, or drop --budget")
    require("scipy", "the measured search (--measure: Optuna's Wilcoxon pruner)")
    budget_s = parse_duration_s(budget, "--budget") if budget else None
    n = 20 if trials is None else trials
    ev = make_evaluator(inp, evaluator)
    with measure_progress(console, n) as on_trial:
        try:
            res = run(inp, ev, trials=n, budget_s=budget_s, seed=seed, storage=storage, on_trial=on_trial)
        except KeyboardInterrupt:
            console.print("[yellow]interrupted: measured trials are saved; rerun the same command to resume[/]")
            raise typer.Exit(130)
    render_measured(console, res)
    from kttune.search.evaluate import evaluate
    from kttune.cost.components import Components

    r = inp.request
    best_ev = evaluate(Components(r.profile, r.model, r.method, r.tp), res.best.cfg, r.workload, r.budget)
    argv = api.command_for(inp, best_ev)
    console.print("[bold]sglang-kt launch command (measured pick)[/]")
    console.print(launch_command(argv), soft_wrap=True, markup=False)
    if json_out:
        out = measured_dict(res, inp.notes)
        out["command"] = argv
        typer.echo(json.dumps(out, indent=1, default=str))
