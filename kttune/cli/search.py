"""`kttune search`, model-evaluated or measured (`--measure`): parse, call kttune.app.search or
kttune.app.measured_search, render (kttune.emit.report, kttune.emit.measured_report)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kttune import bounds
from kttune.app.names import DEFAULT_MEASURED_TRIALS, DEFAULT_TRIALS, DEFAULT_VRAM_MARGIN, DEFAULT_WORKLOAD
from kttune.cli.bounds import bounded
from kttune.cli.options import (
    Budget,
    Chunks,
    Gpus,
    HostRam,
    Json,
    KtMethod,
    Model,
    ModelPath,
    Profile,
    Report,
    Seed,
    Vram,
    VramMargin,
    WeightPath,
    Workload,
)
from kttune.errors import UserError

Trials = Annotated[
    int,
    bounded(
        "--trials",
        rule=bounds.TRIALS,
        help=f"Optuna trials: default {DEFAULT_TRIALS} model-evaluated (5-8 ms each on a 2-core VM), or "
        f"{DEFAULT_MEASURED_TRIALS} measured with --measure (in the study, across every process "
        "sharing it).",
    ),
]
Storage = Annotated[
    str,
    typer.Option(
        "--storage",
        help="Optuna storage: a journal file path or an RDB URL (sqlite:///x.db). "
        "Default: a journal in the user cache dir; :memory: for a throwaway "
        "study. Rerunning the same search resumes it.",
    ),
]
StoragePasswordFile = Annotated[
    str,
    typer.Option(
        "--storage-password-file",
        help="File whose first line is the password of the --storage database URL, kept out of shell "
        "history (or set $KTTUNE_STORAGE_PASSWORD / $KTTUNE_STORAGE_PASSWORD_FILE). kttune shows "
        "the URL with the password as ***.",
    ),
]
SloRate = Annotated[
    float,
    bounded(
        "--rate",
        rule=bounds.RATE_PER_S,
        help="With --ttft-slo/--tbt-slo: the load (requests/s) the SLO must hold at, checked in "
        "simulation (`kttune simulate`).",
    ),
]


def search(
    model: Model,
    vram: Vram,
    gpus: Gpus = 1,
    profile: Profile = None,
    workload: Workload = DEFAULT_WORKLOAD,
    method: KtMethod = None,
    trials: Trials = None,
    measure: Annotated[
        bool,
        typer.Option(
            "--measure",
            help="Score trials by measurement (the path runner on this machine) "
            "instead of the model; the model's candidates and the kt run / "
            "KT doc defaults are measured first.",
        ),
    ] = False,
    budget: Budget = None,
    evaluator: Annotated[
        str,
        typer.Option(
            "--evaluator",
            help="What measures with --measure: runner (GPU), runner-cpu (its "
            "CPU variant), model (a dry run on the cost model).",
        ),
    ] = "runner",
    storage: Storage = None,
    storage_password_file: StoragePasswordFile = None,
    seed: Seed = None,
    host_ram: HostRam = None,
    vram_margin: VramMargin = DEFAULT_VRAM_MARGIN,
    chunks: Chunks = None,
    attention_backend: Annotated[
        str,
        typer.Option(
            "--attention-backend",
            help="Pin SGLang's attention backend instead of searching it (MLA models: triton or flashinfer, "
            "nsa for sparse attention).",
        ),
    ] = None,
    model_path: ModelPath = None,
    weight_path: WeightPath = None,
    json_out: Json = False,
    report_dir: Report = None,
    rate: SloRate = None,
    ttft_slo: Annotated[
        str, typer.Option("--ttft-slo", help="Time-to-first-token limit for 90% of requests at --rate, e.g. 10s.")
    ] = None,
    tbt_slo: Annotated[
        str,
        typer.Option("--tbt-slo", help="Limit on every gap between tokens for 90% of requests at --rate, e.g. 150ms."),
    ] = None,
):
    """Search the launch flags under a VRAM budget and print the sglang-kt launch command."""
    from kttune import app
    from kttune.app import resolve
    from kttune.cli.common import console as make_console, emit_json
    from kttune.emit import report
    from kttune.emit.progress import search_progress

    app.check_report_extras(report_dir)
    console = make_console(json_out)
    storage = resolve.storage_url(storage, storage_password_file)
    slo = app.slo_target(rate, resolve.seconds(ttft_slo, "--ttft-slo"), resolve.milliseconds(tbt_slo, "--tbt-slo"))
    inp = app.resolve_inputs(
        model,
        resolve.vram_bytes(vram),
        gpus,
        profile,
        workload,
        method,
        resolve.host_ram_bytes(host_ram),
        vram_margin,
        model_path or (model if Path(model).is_dir() else None),
        weight_path,
        resolve.chunks(chunks or None),
        attention_backend,
    )
    report.header(console, inp.request, inp.notes)
    if (measure or budget) and slo is not None:
        raise UserError(
            "--rate/--ttft-slo/--tbt-slo apply to the model-evaluated search",
            "drop --measure/--budget, or the SLO options",
        )
    if budget and not measure:
        raise UserError("--budget applies to a measured search", "add --measure, or drop --budget")
    if measure:
        doc, profile_doc = _measured(console, inp, evaluator, trials, budget, seed, storage)
    else:
        trials = DEFAULT_TRIALS if trials is None else trials
        with search_progress(console, trials) as on_trial:
            outcome = app.search(inp, trials=trials, seed=seed, storage=storage, on_trial=on_trial, slo=slo)
        report.render_search(console, outcome)
        doc, profile_doc = outcome.to_dict(), app.ProfileDocument(inp.request.profile).to_dict()
    if json_out:
        emit_json(doc)
    if report_dir:
        from kttune.cli.report import print_written

        measured = doc.get("schema", "").startswith("kttune.search-measured/")
        print_written(
            app.write_command_report(
                report_dir,
                results=() if measured else [doc],
                measured=[doc] if measured else (),
                profiles=[profile_doc],
            ),
            stderr=json_out,
        )


def _measured(
    console, inp, evaluator: str, trials: int | None, budget: str | None, seed: int | None, storage: str | None
) -> tuple[dict, dict]:
    """The measured branch: (its document, the profile's)."""
    from kttune import app
    from kttune.app import resolve
    from kttune.emit.launch import launch_command
    from kttune.emit.measured_report import render_measured
    from kttune.emit.progress import measure_progress

    budget_s = resolve.seconds(budget, "--budget")
    n = DEFAULT_MEASURED_TRIALS if trials is None else trials
    ev = app.make_evaluator(inp, evaluator)  # a bad name or a missing runner: one line before the progress bar
    with measure_progress(console, n) as on_trial:
        try:
            out = app.measured_search(
                inp, ev, trials=n, budget_s=budget_s, seed=seed, storage=storage, on_trial=on_trial
            )
        except KeyboardInterrupt:
            console.print("[yellow]interrupted: measured trials are saved; rerun the same command to resume[/]")
            raise typer.Exit(130)
    render_measured(console, out.result)
    console.print("[bold]sglang-kt launch command (measured pick)[/]")
    console.print(launch_command(list(out.argv)), soft_wrap=True, markup=False)
    return out.to_dict(), app.ProfileDocument(inp.request.profile).to_dict()


def register(app: typer.Typer) -> None:
    app.command("search")(search)
