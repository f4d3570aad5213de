"""`kttune paths` (run the real prefill paths on K layers) and `kttune calibrate` (fit the cost
model's per-path corrections from their results into a profile): parse, call kttune.app.run_paths
/ kttune.app.calibrate, render (kttune.emit.paths)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kttune import bounds
from kttune.cli.bounds import bounded, range_help
from kttune.cli.options import Json, Layers, Profile, Report

TokenList = Optional[list[str]]


def paths(
    model: Annotated[str, typer.Argument(help="Catalog name or HF model directory.")],
    method: Annotated[
        Optional[str], typer.Option("--kt-method", "--method", help="KT method (default: the checkpoint's).")
    ] = None,
    layers: Layers = 2,
    gpu_experts: Annotated[
        TokenList,
        typer.Option(
            "--gpu-experts", help=range_help("GPU experts per layer, comma-separated (default 0).", bounds.GPU_EXPERTS)
        ),
    ] = None,
    chunks: Annotated[
        TokenList,
        typer.Option(
            "--chunks", help=range_help("--chunked-prefill-size values (default 4096).", bounds.FORWARD_TOKENS)
        ),
    ] = None,
    prompts: Annotated[
        TokenList,
        typer.Option(
            "--prompts", help=range_help("Prompt lengths in tokens (default 1024,8192).", bounds.FORWARD_TOKENS)
        ),
    ] = None,
    threshold: Annotated[
        Optional[int],
        bounded(
            "--threshold", rule=bounds.THRESHOLD_TOKENS, help="--kt-gpu-prefill-token-threshold (default: the chunk)."
        ),
    ] = None,
    force: Annotated[
        Optional[list[str]],
        typer.Option("--force", help="Also run each prompt forced onto these paths (hybrid, layerwise)."),
    ] = None,
    sweep: Annotated[
        TokenList,
        typer.Option(
            "--sweep",
            help=range_help("Forward sizes timed on both paths alone (measures the crossover).", bounds.FORWARD_TOKENS),
        ),
    ] = None,
    cpuinfer: Annotated[
        int, bounded("--cpuinfer", rule=bounds.THREADS_OR_DEFAULT, help="--kt-cpuinfer threads (0: cores-3).")
    ] = 0,
    small: Annotated[
        bool, typer.Option("--small", help="The model's architecture at small shapes (the CPU variant).")
    ] = False,
    device: Annotated[str, typer.Option("--device", help="cuda or cpu (default: cuda when present).")] = "",
    cpu_max_tokens: Annotated[
        int,
        bounded(
            "--cpu-max-tokens",
            rule=bounds.FORWARD_TOKENS,
            help="kt-kernel's max_len (rounded up to a multiple of 64): the largest hybrid forward the runner "
            "times (its host scratch grows with it); a larger one is skipped with the reason.",
        ),
    ] = 4096,
    max_run_s: Annotated[
        float,
        bounded(
            "--max-run-s", rule=bounds.RUN_SECONDS, help="Skip runs the cost model predicts to take longer (x1.5)."
        ),
    ] = 60.0,
    repeats: Annotated[
        int,
        bounded(
            "--repeats",
            rule=bounds.REPEATS,
            help="Timed samples per run, in interleaved rounds after a warm-up; the median and its "
            "interval are reported.",
        ),
    ] = 3,
    profile: Profile = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Also write the JSON result to this file.")] = None,
    as_json: Json = False,
    report_dir: Report = None,
) -> None:
    """Run the hybrid and layerwise prefill paths end to end on K layers at the model's real shapes,
    time them (per layer, per prompt, extrapolated to the whole model), record peak GPU memory, and
    compare with the cost and memory models."""
    from rich.console import Console

    from kttune import app
    from kttune.app.resolve import token_list, words
    from kttune.cli.common import emit_json
    from kttune.emit.paths import render
    from kttune.extras import require

    require("torch", "`kttune paths`")
    app.check_report_extras(report_dir)
    req = app.paths_request(
        model=model,
        method=method,
        layers=layers,
        gpu_experts=token_list(gpu_experts, "--gpu-experts", bounds.GPU_EXPERTS) or (0,),
        chunks=token_list(chunks, "--chunks", bounds.FORWARD_TOKENS) or (4096,),
        prompts=token_list(prompts, "--prompts", bounds.FORWARD_TOKENS) or (1024, 8192),
        threshold=threshold,
        force=words(force),
        sweep=token_list(sweep, "--sweep", bounds.FORWARD_TOKENS),
        cpuinfer=cpuinfer,
        small=small,
        device=device,
        cpu_max_tokens=cpu_max_tokens,
        max_run_s=max_run_s,
        profile=profile,
        repeats=repeats,
    )
    err = Console(stderr=True)
    result = app.run_paths(req, out=out, progress=lambda s: err.print(s, highlight=False)).to_dict()
    if as_json:
        emit_json(result)
    else:
        render(result, Console())
    if report_dir:
        from kttune.cli.report import print_written
        from kttune.emit.markdown_report import runner_rows

        print_written(app.write_command_report(report_dir, runs=runner_rows(result) or ()), stderr=as_json)
    _stdout_to_stderr()


def _stdout_to_stderr() -> None:
    """kt-kernel's worker pools print a farewell with printf when the process exits: at exit, send
    file descriptor 1 to stderr so stdout holds the result alone."""
    import atexit
    import os
    import sys

    def redirect() -> None:
        sys.stdout.flush()
        os.dup2(2, 1)

    atexit.register(redirect)


def calibrate(
    results: Annotated[
        list[Path], typer.Argument(help="JSON results written by `kttune paths --out` (or benchmarks/bench_paths.py).")
    ],
    profile: Profile = None,
    out: Annotated[Path, typer.Option("--out", help="Where to write the calibrated profile.")] = ...,
) -> None:
    """Fit per-path, per-method corrections of the cost model from path-runner results and write them
    into a profile; `search` and `explain` then use them and report their held-out error."""
    from kttune import app

    done = app.calibrate(results, profile, out)
    for e in done.calibration.entries:
        typer.echo(
            f"{e.method} {e.path}: factor {e.factor(1024):.2f} at 1024 tokens, {e.points} points, "
            f"held-out error {e.held_out_mape if e.held_out_mape is None else round(100 * e.held_out_mape, 1)}%"
        )
    typer.echo(f"wrote {done.out}")


def register(app: typer.Typer) -> None:
    app.command("paths")(paths)
    app.command("calibrate")(calibrate)
