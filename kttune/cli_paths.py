"""`kttune paths` (run the real prefill paths on K layers) and `kttune calibrate` (fit the cost
model's per-path corrections from their results into a profile)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from kttune.cli_report import check_report_extras, report_option, write_command_report
from kttune import bounds
from kttune.cli_bounds import bounded, range_help
from kttune.errors import UserError


def _ints(values: Optional[list[str]], flag: str, rule: bounds.Bound) -> tuple[int, ...]:
    """A comma-separated list option, each item a whole number under `rule`."""
    out = []
    for v in values or []:
        for part in str(v).split(","):
            if part.strip():
                try:
                    n = int(part)
                except ValueError:
                    raise UserError(f"{flag} {part!r} is not a whole number", f"pass e.g. {flag} 4096,16384") from None
                out.append(rule.check(n, flag))
    return tuple(out)


def paths(
    model: str = typer.Argument(..., help="Catalog name or HF model directory."),
    method: Optional[str] = typer.Option(None, "--method", help="KT method (default: the checkpoint's)."),
    layers: int = bounded(2, "--layers", rule=bounds.LAYER_COUNT, help="Consecutive MoE decoder layers to build and run (K)."),
    gpu_experts: Optional[list[str]] = typer.Option(None, "--gpu-experts", help=range_help("GPU experts per layer, comma-separated (default 0).", bounds.GPU_EXPERTS)),
    chunks: Optional[list[str]] = typer.Option(None, "--chunks", help=range_help("--chunked-prefill-size values (default 4096).", bounds.FORWARD_TOKENS)),
    prompts: Optional[list[str]] = typer.Option(None, "--prompts", help=range_help("Prompt lengths in tokens (default 1024,8192).", bounds.FORWARD_TOKENS)),
    threshold: Optional[int] = bounded(None, "--threshold", rule=bounds.THRESHOLD_TOKENS, help="--kt-gpu-prefill-token-threshold (default: the chunk)."),
    force: Optional[list[str]] = typer.Option(None, "--force", help="Also run each prompt forced onto these paths (hybrid, layerwise)."),
    sweep: Optional[list[str]] = typer.Option(None, "--sweep", help=range_help("Forward sizes timed on both paths alone (measures the crossover).", bounds.FORWARD_TOKENS)),
    cpuinfer: int = bounded(0, "--cpuinfer", rule=bounds.THREADS_OR_DEFAULT, help="--kt-cpuinfer threads (0: cores-3)."),
    small: bool = typer.Option(False, "--small", help="The model's architecture at small shapes (the CPU variant)."),
    device: str = typer.Option("", "--device", help="cuda or cpu (default: cuda when present)."),
    max_run_s: float = bounded(60.0, "--max-run-s", rule=bounds.RUN_SECONDS, help="Skip runs the cost model predicts to take longer (x1.5)."),
    repeats: int = bounded(3, "--repeats", rule=bounds.REPEATS, help="Timed samples per run, in interleaved rounds after a warm-up; the median and its interval are reported."),
    profile: Optional[str] = typer.Option(None, "--profile", help="Profile for the predictions (default: as `kttune search`)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write the JSON result to this file."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON result on stdout instead of tables."),
    report_dir: Optional[Path] = report_option(),
) -> None:
    """Run the hybrid and layerwise prefill paths end to end on K layers at the model's real shapes,
    time them (per layer, per prompt, extrapolated to the whole model), record peak GPU memory, and
    compare with the cost and memory models."""
    from kttune.extras import require

    require("torch", "`kttune paths`")
    check_report_extras(report_dir)
    from rich.console import Console

    from kttune.emit.paths import render
    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.runner.api import PathsRequest, run_paths

    if out is not None:  # refused before anything runs
        from kttune.documents import PATHS_OUTPUT, check_output_file

        out = check_output_file(out, PATHS_OUTPUT, inputs=[(profile, "--profile"), (model, "model")])
    req = PathsRequest(
        model=model, method=method, layers=layers, gpu_experts=_ints(gpu_experts, "--gpu-experts", bounds.GPU_EXPERTS) or (0,),
        chunks=_ints(chunks, "--chunks", bounds.FORWARD_TOKENS) or (4096,), prompts=_ints(prompts, "--prompts", bounds.FORWARD_TOKENS) or (1024, 8192),
        threshold=threshold, force=tuple(x for f in force or [] for x in f.split(",") if x),
        sweep=_ints(sweep, "--sweep", bounds.FORWARD_TOKENS), cpuinfer=cpuinfer, small=small, device=device, max_run_s=max_run_s, profile=profile,
        repeats=repeats)
    err = Console(stderr=True)
    with quiet_stdout(to_stderr=True):
        result = run_paths(req, progress=lambda s: err.print(s, highlight=False)).to_dict()
    if out:
        from kttune.hw.profile import write_json_atomic

        write_json_atomic(out, result)
    if as_json:
        typer.echo(json.dumps(result, indent=1))
    else:
        render(result, Console())
    if report_dir:
        from kttune.emit.markdown_report import runner_rows

        write_command_report(report_dir, as_json, runs=runner_rows(result) or ())
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
    results: list[Path] = typer.Argument(..., help="JSON results written by `kttune paths --out` (or benchmarks/bench_paths.py)."),
    profile: Optional[str] = typer.Option(None, "--profile", help="Profile to calibrate (default: as `kttune search`)."),
    out: Path = typer.Option(..., "--out", help="Where to write the calibrated profile."),
) -> None:
    """Fit per-path, per-method corrections of the cost model from path-runner results and write them
    into a profile; `search` and `explain` then use them and report their held-out error."""
    from kttune.calibration.entries import Calibration
    from kttune.hw.profile import save_profile
    from kttune.hw.registry import resolve_profile

    from kttune.api import this_machine_inventory
    from kttune.runner.api import calibration_points

    from kttune.bounds import read_json_file
    from kttune.documents import check_output_file, describe, document_of, is_paths_result, profile_output_from

    prof = resolve_profile(profile, None if profile else this_machine_inventory())
    fix = "pass files written by `kttune paths --out`"
    out = check_output_file(out, profile_output_from("kttune calibrate", prof),
                            inputs=[*((p, "results file") for p in results), (profile, "--profile")])
    points = []
    for p in results:
        if not p.is_file():
            raise UserError(f"results file {str(p)!r} does not exist", fix)
        d = read_json_file(p, repr(str(p)), fix)
        if not is_paths_result(d):
            raise UserError(f"{str(p)!r} holds {describe(d)}, not a path-runner result", fix)
        with document_of(repr(str(p)), "path-runner"):
            points += calibration_points(d, prof)
    if not points:
        raise UserError("the results hold no predicted forwards to fit", "run `kttune paths` without --small, on the machine the profile describes")
    cal = Calibration.fit(points, source=", ".join(str(p) for p in results))
    from dataclasses import replace

    save_profile(replace(prof, calibration=tuple(cal.to_dicts())), out)
    for e in cal.entries:
        typer.echo(f"{e.method} {e.path}: factor {e.factor(1024):.2f} at 1024 tokens, {e.points} points, "
                   f"held-out error {e.held_out_mape if e.held_out_mape is None else round(100 * e.held_out_mape, 1)}%")
    typer.echo(f"wrote {out}")


def register(app: typer.Typer) -> None:
    app.command("paths")(paths)
    app.command("calibrate")(calibrate)
