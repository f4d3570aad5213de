"""`kttune tune`: parse, call kttune.app.tune, render (kttune.emit.tune_report)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kttune import bounds
from kttune.app.names import DEFAULT_VRAM_MARGIN, DEFAULT_WORKLOAD
from kttune.cli.bounds import bounded
from kttune.cli.options import (
    Budget,
    Chunks,
    Gpus,
    HostRam,
    Json,
    KtMethod,
    Layers,
    Model,
    ModelPath,
    Profile,
    Seed,
    Vram,
    VramMargin,
    WeightPath,
    Workload,
)


def tune(
    model: Model,
    vram: Vram,
    workload: Workload = DEFAULT_WORKLOAD,
    gpus: Gpus = 1,
    budget: Budget = None,
    evaluator: Annotated[
        str,
        typer.Option(
            "--evaluator",
            help="auto (the path runner on this GPU; the cost model without "
            "one), runner, runner-cpu (the CPU variant: small shapes, a "
            "check of the flow), model.",
        ),
    ] = "auto",
    method: KtMethod = None,
    profile: Profile = None,
    probe: Annotated[
        str,
        typer.Option(
            "--probe", help="auto: probe the model's CPU MoE here unless this machine's profile holds; always; never."
        ),
    ] = "auto",
    host_ram: HostRam = None,
    chunks: Chunks = None,
    layers: Layers = 2,
    repeats: Annotated[
        int,
        bounded(
            "--repeats",
            rule=bounds.REPEATS,
            help="Rounds before the race may decide (its minimum); every measured number is a "
            "median of at least this many.",
        ),
    ] = 3,
    max_rounds: Annotated[
        int, bounded("--max-rounds", rule=bounds.REPEATS, help="Rounds after which the race decides in any case.")
    ] = 5,
    lengths: Annotated[
        int,
        bounded("--lengths", rule=bounds.CANDIDATES, help="Representative prompt lengths of the workload to measure."),
    ] = 3,
    candidates: Annotated[
        int,
        bounded(
            "--candidates", rule=bounds.CANDIDATES, help="The model's fastest configurations measured besides its pick."
        ),
    ] = 4,
    finalists: Annotated[
        int, bounded("--finalists", rule=bounds.CANDIDATES, help="Screened candidates raced against the baselines.")
    ] = 3,
    state: Annotated[
        Optional[Path], typer.Option("--state", help="Resume file (default: in the kttune cache dir, one per request).")
    ] = None,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Start over: ignore what a previous run of this request measured.")
    ] = False,
    report_dir: Annotated[
        Optional[Path],
        typer.Option("--report", help="Folder for tune.json and tune.md (default: beside the resume file)."),
    ] = None,
    seed: Seed = 0,
    model_path: ModelPath = None,
    weight_path: WeightPath = None,
    vram_margin: VramMargin = DEFAULT_VRAM_MARGIN,
    json_out: Json = False,
) -> None:
    """Measure this machine and pick the launch flags: probe what the model needs, measure the two
    prefill paths' crossover with the path runner and calibrate, search, race the pick against its
    runners-up and the baselines, check that hybrid and layerwise agree at the chosen threshold, and
    print the launch command with its measured gain. With --profile, nothing is probed. Ctrl-C keeps
    what was measured; rerun to resume."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from kttune import app
    from kttune.app import resolve
    from kttune.cli.common import console as make_console, emit_json
    from kttune.emit import tune_report

    req = app.TuneRequest(
        model=model,
        vram_bytes=resolve.vram_bytes(vram),
        gpus=gpus,
        workload=workload,
        method=method,
        host_ram_bytes=resolve.host_ram_bytes(host_ram),
        profile=profile,
        evaluator=evaluator,
        budget_s=resolve.seconds(budget, "--budget"),
        layers=layers,
        repeats=repeats,
        max_rounds=max_rounds,
        lengths=lengths,
        candidates=candidates,
        finalists=finalists,
        probe=probe,
        chunks=resolve.chunks(chunks or None),
        state_path=str(state) if state else None,
        fresh=fresh,
        out_dir=str(report_dir) if report_dir else None,
        seed=seed,
        model_path=model_path or (model if Path(model).is_dir() else None),
        weight_path=weight_path,
        vram_margin=vram_margin,
    )
    console = make_console(json_out)
    with Progress(
        TextColumn("{task.fields[phase]:<9}"),
        BarColumn(bar_width=16),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as prog:
        task = prog.add_task("tune", total=None, phase="start")

        def on_event(e) -> None:
            prog.update(task, completed=e.done, total=e.total or None, phase=e.phase[:9])
            if e.message and e.phase in ("probe", "runner", "search", "check"):
                prog.console.print(f"{e.phase}: {e.message}", markup=False, highlight=False)

        result = app.tune(req, on_event)
    doc = result.to_dict()
    tune_report.render(console, doc)
    if result.report_files:
        console.print(f"report: {result.report_files[0].parent}", markup=False, highlight=False)
    if json_out:
        emit_json(doc)


def register(app: typer.Typer) -> None:
    app.command("tune")(tune)
