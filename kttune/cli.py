"""The `kttune` command line. Thin: each command parses, calls one library function, renders."""

from __future__ import annotations

import sys

from pathlib import Path
from typing import List, Optional

import typer

from kttune import bounds
from kttune.cli_bounds import bounded
from kttune.cli_common import MARGIN_HELP, MODEL_HELP, PROFILE_HELP, VRAM_HELP, WORKLOAD_HELP
from kttune.cli_report import report_option
from kttune.errors import UserError
from kttune.memory.vram import DEFAULT_VRAM_MARGIN
from kttune.spec.launch_args import names_of

app = typer.Typer(
    name="kttune",
    help="Measure a KTransformers + SGLang hybrid MoE host and pick its prefill launch flags.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from kttune.emit.result import kttune_version

        typer.echo(f"kttune {kttune_version()}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print kttune's version (from the installed package) and exit.")) -> None:
    pass


def _register_optional(module: str) -> None:
    """Command groups that live beside the spine (probes) register themselves here."""
    import importlib

    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            return
        raise
    mod.register(app)


def _console(json_out: bool):
    from kttune.cli_common import console

    return console(json_out)


def _emit_json(obj) -> None:
    from kttune.cli_common import emit_json

    emit_json(obj)


@app.command()
def search(
    model: str = typer.Option(..., "--model", "-m", help=MODEL_HELP),
    vram: str = typer.Option(..., "--vram", help=VRAM_HELP),
    gpus: int = bounded(1, "--gpus", rule=bounds.GPUS, help="GPUs (tensor-parallel size); --vram is per GPU."),
    profile: str = typer.Option(None, "--profile", help=PROFILE_HELP),
    workload: str = typer.Option("rag", "--workload", "-w", help=WORKLOAD_HELP),
    method: str = typer.Option(None, "--kt-method", help="Override the KT method detected from quantization_config."),
    trials: int = bounded(None, "--trials", rule=bounds.TRIALS, help="Optuna trials: default 300 model-evaluated (5-8 ms each on a 2-core VM), or 20 measured with --measure (in the study, across every process sharing it)."),
    measure: bool = typer.Option(False, "--measure", help="Score trials by measurement (the path runner on this machine) instead of the model; the model's candidates and the kt run / KT doc defaults are measured first."),
    budget: str = typer.Option(None, "--budget", help="Time budget of a measured search, e.g. 10m, 90s, 1h (this process; rerun to resume)."),
    evaluator: str = typer.Option("runner", "--evaluator", help="What measures with --measure: runner (GPU), runner-cpu (its CPU variant), model (a dry run on the cost model)."),
    storage: str = typer.Option(None, "--storage", help="Optuna storage: a journal file path or an RDB URL (sqlite:///x.db). Default: a journal in the user cache dir; :memory: for a throwaway study. Rerunning the same search resumes it."),
    storage_password_file: str = typer.Option(None, "--storage-password-file", help="File whose first line is the password of the --storage database URL, kept out of shell history (or set $KTTUNE_STORAGE_PASSWORD / $KTTUNE_STORAGE_PASSWORD_FILE). kttune shows the URL with the password as ***."),
    seed: int = bounded(None, "--seed", rule=bounds.SEED, help="Sampler seed, for a reproducible search."),
    host_ram: str = typer.Option(None, "--host-ram", help="Host RAM of the target machine (default: the profile's)."),
    vram_margin: float = bounded(DEFAULT_VRAM_MARGIN, "--vram-margin", rule=bounds.VRAM_MARGIN, help=MARGIN_HELP),
    chunks: str = typer.Option(None, "--chunks", help="Chunk sizes to search instead of the defaults (1024..131072), e.g. 8192,65536; multiples of 64."),
    model_path: str = typer.Option(None, "--model-path", help="Model directory to put in the launch command."),
    weight_path: str = typer.Option(None, "--kt-weight-path", help="CPU weight directory (converted weights for AMX methods)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout (the report goes to stderr)."),
    report_dir: Path = report_option(),
    rate: float = bounded(None, "--rate", rule=bounds.RATE_PER_S, help="With --ttft-slo/--tbt-slo: the load (requests/s) the SLO must hold at, checked in simulation (`kttune simulate`)."),
    ttft_slo: str = typer.Option(None, "--ttft-slo", help="Time-to-first-token limit for 90% of requests at --rate, e.g. 10s."),
    tbt_slo: str = typer.Option(None, "--tbt-slo", help="Limit on every gap between tokens for 90% of requests at --rate, e.g. 150ms."),
):
    """Search the launch flags under a VRAM budget and print the sglang-kt launch command."""
    from kttune import api
    from kttune.cli_report import check_report_extras
    from kttune.emit import report
    from kttune.emit.progress import search_progress

    check_report_extras(report_dir)
    console = _console(json_out)
    if storage or storage_password_file is not None:
        from kttune.search.storage_url import with_password

        storage = with_password(storage or "", storage_password_file) or None
    mp = model_path or (model if _is_dir(model) else None)
    from kttune.units import parse_duration_s

    slo = api.slo_target(rate, parse_duration_s(ttft_slo, "--ttft-slo") if ttft_slo else None,
                         parse_duration_s(tbt_slo, "--tbt-slo", bare_unit="ms") * 1e3 if tbt_slo else None)
    inp = api.resolve_inputs(model, vram, gpus, profile, workload, method, host_ram, vram_margin, mp, weight_path, chunks)
    report.header(console, inp.request, inp.notes)
    if (measure or budget) and slo is not None:
        from kttune.errors import UserError

        raise UserError("--rate/--ttft-slo/--tbt-slo apply to the model-evaluated search", "drop --measure/--budget, or the SLO options")
    if measure or budget:
        from kttune.cli_measured import measured_search

        measured_search(console, inp, evaluator, trials, budget, seed, storage, json_out, measure)
        return
    trials = 300 if trials is None else trials
    with search_progress(console, trials) as on_trial:
        try:
            outcome = api.search(inp, trials=trials, seed=seed, storage=storage, on_trial=on_trial, slo=slo)
        except KeyboardInterrupt:
            raise  # kttune.cli_common: "interrupted ... rerun to resume", exit 130
    report.render_search(console, outcome)
    doc = outcome.to_dict()
    if json_out:
        _emit_json(doc)
    if report_dir:
        _write_report(report_dir, json_out, doc, inp.request.profile)


def _write_report(report_dir: Path, json_out: bool, doc: dict, profile) -> None:
    """--report DIR: the result's figures and those of the profile it rests on."""
    from kttune.cli_report import write_command_report
    from kttune.hw.profile import profile_to_dict

    write_command_report(report_dir, json_out, results=[doc], profiles=[profile_to_dict(profile)])


def _is_dir(p: str) -> bool:
    import os

    return os.path.isdir(p)


@app.command()
def explain(
    launch: Optional[List[str]] = typer.Argument(None, metavar="[-- COMMAND...]", help="A sglang-kt launch command after `--`, e.g. `-- python -m sglang.launch_server --model ... --kt-num-gpu-experts 32`: kttune reads its flags (sglang's own names), fills what it leaves unset as sglang-kt 0.7.2 does, and compares it with the search's pick."),
    command: str = typer.Option(None, "--command", help="The same launch command as one string (as pasted from a shell; backslash line breaks are fine)."),
    model: str = typer.Option(None, "--model", "-m", help=MODEL_HELP),
    vram: str = typer.Option(None, "--vram", help=VRAM_HELP),
    gpu_experts: int = bounded(None, "--gpu-experts", *names_of("num_gpu_experts"), rule=bounds.GPU_EXPERTS, help="GPU experts per MoE layer."),
    chunk: int = bounded(None, "--chunk", *names_of("chunked_prefill_size"), rule=bounds.FORWARD_TOKENS, help="Tokens per prefill forward (default 8192)."),
    threshold: int = bounded(None, "--threshold", *names_of("gpu_prefill_token_threshold"), rule=bounds.THRESHOLD_TOKENS, help="Forwards of at least this many tokens go layerwise (tokens; default 0 = layerwise off)."),
    max_total_tokens: int = bounded(None, *names_of("max_total_tokens"), rule=bounds.KV_TOKENS, help="KV pool size in tokens (default 65536)."),
    cpuinfer: int = bounded(None, "--cpuinfer", *names_of("cpuinfer_threads"), rule=bounds.THREADS, help="kt-kernel threads (default: the most measured below the core count)."),
    gpus: int = bounded(None, "--gpus", *names_of("tp"), rule=bounds.GPUS, help="GPUs (tensor-parallel size; default 1)."),
    profile: str = typer.Option(None, "--profile", help=PROFILE_HELP),
    workload: str = typer.Option("rag", "--workload", "-w", help=WORKLOAD_HELP),
    method: str = typer.Option(None, *names_of("method"), help="Override the detected KT method."),
    host_ram: str = typer.Option(None, "--host-ram", help="Host RAM of the target machine (default: the profile's)."),
    vram_margin: float = bounded(DEFAULT_VRAM_MARGIN, "--vram-margin", rule=bounds.VRAM_MARGIN, help=MARGIN_HELP),
    compare: bool = typer.Option(True, "--compare/--no-compare", help="With a launch command: run the search on the same inputs and show what it would change."),
    json_out: bool = typer.Option(False, "--json", help="Print the explanation as JSON on stdout."),
    report_dir: Path = report_option(),
):
    """Explain a flag set or a whole sglang-kt launch command: does it fit (VRAM by phase, host RAM),
    which path each forward takes, prefill per prompt length, decode per request and for the batch.

    With a launch command, --model defaults to its --model directory (or the catalog model that directory is named after) and --vram to the profile's GPU memory."""  # noqa: E501 (one line: typer keeps line breaks)
    from kttune import api
    from kttune.cli_report import check_report_extras
    from kttune.emit import report

    check_report_extras(report_dir)
    console = _console(json_out)
    if launch or command:
        given = {"--gpu-experts": gpu_experts, "--chunk": chunk, "--threshold": threshold,
                 "--max-total-tokens": max_total_tokens, "--cpuinfer": cpuinfer, "--gpus": gpus, "--kt-method": method}
        clash = [k for k, v in given.items() if v is not None]
        if launch and command:
            raise UserError("a launch command after -- and --command", "pass the command once")
        if clash:
            raise UserError(f"{', '.join(clash)} given beside a launch command", "put those flags in the command itself")
        from kttune.api_launch import explain_command
        from kttune.emit.launch_report import render_launch_explain

        outcome = explain_command(command if command else launch, model, vram, profile, workload, host_ram, vram_margin,
                                  compare=compare)
        report.header(console, outcome.explained.inputs.request, outcome.explained.inputs.notes)
        render_launch_explain(console, outcome)
        inp = outcome.explained.inputs
    else:
        missing = [k for k, v in (("--model", model), ("--vram", vram), ("--gpu-experts", gpu_experts)) if v is None]
        if missing:
            raise UserError(f"explain needs {', '.join(missing)} (or a launch command after --)",
                            "pass them, e.g. --model qwen3-30b-a3b --vram 32G --gpu-experts 8, or "
                            "kttune explain -- python -m sglang.launch_server ...")
        inp = api.resolve_inputs(model, vram, 1 if gpus is None else gpus, profile, workload, method, host_ram, vram_margin,
                                 model_path=model if _is_dir(model) else None)
        report.header(console, inp.request, inp.notes)
        outcome = api.explain_flags(inp, gpu_experts, 8192 if chunk is None else chunk, threshold or 0,
                                    65536 if max_total_tokens is None else max_total_tokens, cpuinfer)
        report.render_explain(console, outcome)
    doc = outcome.to_dict()
    if json_out:
        _emit_json(doc)
    if report_dir:
        _write_report(report_dir, json_out, doc, inp.request.profile)
    if not outcome.feasible:
        raise typer.Exit(1)


@app.command()
def models(json_out: bool = typer.Option(False, "--json", help="Print the catalog as JSON.")):
    """List the built-in model catalog."""
    from kttune import api
    from kttune.emit import report, result

    entries = api.list_models()
    if json_out:
        _emit_json(result.models_list(entries))
        return
    c = _console(False)
    c.print(report.models_table(entries, c.width))


@app.command()
def profiles(json_out: bool = typer.Option(False, "--json", help="Print as JSON.")):
    """List the shipped hardware profiles (and whether this machine has a probed one)."""
    from kttune import api
    from kttune.emit import report

    listing = api.list_profiles()
    if json_out:
        _emit_json(listing.to_dict())
        return
    report.render_profiles(_console(False), listing)


@app.command()
def workloads(json_out: bool = typer.Option(False, "--json", help="Print as JSON.")):
    """List the workload presets."""
    from kttune import api
    from kttune.emit import report, result

    wls = api.list_workloads()
    if json_out:
        _emit_json(result.workloads_list(wls))
        return
    report.render_workloads(_console(False), wls)


_register_optional("kttune.cli_probe")
_register_optional("kttune.cli_report")
_register_optional("kttune.cli_validate")
_register_optional("kttune.cli_simulate")
_register_optional("kttune.cli_paths")
_register_optional("kttune.cli_derive")
_register_optional("kttune.cli_tune")


def main(argv: list[str] | None = None) -> int:
    """The console script. Exit codes, one-line errors, --json stdout hygiene and safe output
    encoding for every command: kttune.cli_common."""
    from kttune.cli_common import run_app

    return run_app(app, argv)


if __name__ == "__main__":
    sys.exit(main())
