"""`kttune tune`: parse, call kttune.tune.run_tune, render (kttune.emit.tune_report)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kttune import bounds
from kttune.cli_bounds import bounded
from kttune.cli_common import MARGIN_HELP, MODEL_HELP, PROFILE_HELP, VRAM_HELP, WORKLOAD_HELP
from kttune.memory.vram import DEFAULT_VRAM_MARGIN


def tune(
    model: str = typer.Option(..., "--model", "-m", help=MODEL_HELP),
    vram: str = typer.Option(..., "--vram", help=VRAM_HELP),
    workload: str = typer.Option("rag", "--workload", "-w", help=WORKLOAD_HELP),
    gpus: int = bounded(1, "--gpus", rule=bounds.GPUS, help="GPUs (tensor-parallel size); --vram is per GPU. The runner measures one GPU."),
    budget: Optional[str] = typer.Option(None, "--budget", help="Wall-clock budget, e.g. 3m: each step stops at its share and the pick is decided on what was measured (default: the whole plan)."),
    evaluator: str = typer.Option("auto", "--evaluator", help="auto (the path runner on this GPU; the cost model without one), runner, runner-cpu (the CPU variant: small shapes, a check of the flow), model."),
    method: Optional[str] = typer.Option(None, "--kt-method", help="Override the KT method detected from the checkpoint."),
    profile: Optional[str] = typer.Option(None, "--profile", help=PROFILE_HELP + " Given, nothing is probed."),
    probe: str = typer.Option("auto", "--probe", help="auto: probe the model's CPU MoE here unless this machine's profile holds; always; never."),
    host_ram: Optional[str] = typer.Option(None, "--host-ram", help="Host RAM of this machine (default: the profile's)."),
    chunks: Optional[str] = typer.Option(None, "--chunks", help="Chunk sizes to choose from, e.g. 8192,16384 (multiples of 64)."),
    layers: int = bounded(2, "--layers", rule=bounds.LAYER_COUNT, help="Decoder layers the runner builds at the model's shapes (K)."),
    repeats: int = bounded(3, "--repeats", rule=bounds.REPEATS, help="Rounds before the race may decide (its minimum); every measured number is a median of at least this many."),
    max_rounds: int = bounded(5, "--max-rounds", rule=bounds.REPEATS, help="Rounds after which the race decides in any case."),
    lengths: int = bounded(3, "--lengths", rule=bounds.CANDIDATES, help="Representative prompt lengths of the workload to measure."),
    candidates: int = bounded(4, "--candidates", rule=bounds.CANDIDATES, help="The model's fastest configurations measured besides its pick."),
    finalists: int = bounded(3, "--finalists", rule=bounds.CANDIDATES, help="Screened candidates raced against the baselines."),
    state: Optional[Path] = typer.Option(None, "--state", help="Resume file (default: in the kttune cache dir, one per request)."),
    fresh: bool = typer.Option(False, "--fresh", help="Start over: ignore what a previous run of this request measured."),
    report_dir: Optional[Path] = typer.Option(None, "--report", help="Folder for tune.json and tune.md (default: beside the resume file)."),
    seed: int = bounded(0, "--seed", rule=bounds.SEED, help="Seed of the searches and of the rounds' order."),
    model_path: Optional[str] = typer.Option(None, "--model-path", help="Model directory to put in the launch command."),
    weight_path: Optional[str] = typer.Option(None, "--kt-weight-path", help="CPU weight directory for the launch command."),
    vram_margin: float = bounded(DEFAULT_VRAM_MARGIN, "--vram-margin", rule=bounds.VRAM_MARGIN, help=MARGIN_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout (the report goes to stderr)."),
) -> None:
    """Measure this machine and pick the launch flags: probe what the model needs, measure the two
    prefill paths' crossover with the path runner and calibrate, search, race the pick against its
    runners-up and the baselines, check that hybrid and layerwise agree at the chosen threshold, and
    print the launch command with its measured gain. Ctrl-C keeps what was measured; rerun to resume."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from kttune.cli_common import console as make_console, emit_json
    from kttune.emit import tune_report
    from kttune.search.space import parse_chunks
    from kttune.tune import TuneRequest, run_tune
    from kttune.units import parse_duration_s, parse_size_bytes

    req = TuneRequest(
        model=model, vram_bytes=parse_size_bytes(vram, "--vram"), gpus=gpus, workload=workload, method=method,
        host_ram_bytes=parse_size_bytes(host_ram, "--host-ram") if host_ram else None, profile=profile, evaluator=evaluator,
        budget_s=parse_duration_s(budget, "--budget") if budget else None, layers=layers, repeats=repeats, max_rounds=max_rounds,
        lengths=lengths, candidates=candidates, finalists=finalists, probe=probe,
        chunks=parse_chunks(chunks) if chunks else (), state_path=str(state) if state else None, fresh=fresh,
        out_dir=str(report_dir) if report_dir else None, seed=seed, model_path=model_path or (model if Path(model).is_dir() else None),
        weight_path=weight_path, vram_margin=vram_margin)
    console = make_console(json_out)
    with Progress(TextColumn("{task.fields[phase]:<9}"), BarColumn(bar_width=16), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("eta"), TimeRemainingColumn(), console=console, transient=True) as prog:
        task = prog.add_task("tune", total=None, phase="start")

        def on_event(e) -> None:
            prog.update(task, completed=e.done, total=e.total or None, phase=e.phase[:9])
            if e.message and e.phase in ("probe", "runner", "search", "check"):
                prog.console.print(f"{e.phase}: {e.message}", markup=False, highlight=False)

        result = run_tune(req, on_event)
    doc = result.to_dict()
    paths = tune_report.write_report(doc, result.report_dir) if result.report_dir else []
    tune_report.render(console, doc)
    if paths:
        console.print(f"report: {paths[0].parent}", markup=False, highlight=False)
    if json_out:
        emit_json(doc)


def register(app: typer.Typer) -> None:
    app.command("tune")(tune)
