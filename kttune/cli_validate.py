"""`kttune validate`: thin CLI over `kttune.validate.run.validate_flags`. Registered by kttune.cli."""

from __future__ import annotations

import typer

from kttune import bounds
from kttune.cli_bounds import bounded
from kttune.cli_common import MODEL_HELP, VRAM_HELP


def validate(
    model: str = typer.Option(..., "--model", "-m", help=MODEL_HELP),
    vram: str = typer.Option(..., "--vram", help=VRAM_HELP),
    gpu_experts: int = bounded(..., "--gpu-experts", rule=bounds.GPU_EXPERTS, help="--kt-num-gpu-experts (per MoE layer)."),
    chunk: int = bounded(8192, "--chunk", rule=bounds.FORWARD_TOKENS, help="--chunked-prefill-size (tokens); one prompt of exactly this size is sent first."),
    threshold: int = bounded(0, "--threshold", rule=bounds.THRESHOLD_TOKENS, help="--kt-gpu-prefill-token-threshold (tokens; 0 = layerwise off)."),
    max_total_tokens: int = bounded(65536, "--max-total-tokens", rule=bounds.KV_TOKENS, help="KV pool size in tokens."),
    cpuinfer: int = bounded(None, "--cpuinfer", rule=bounds.THREADS, help="--kt-cpuinfer threads (default: the most measured below the core count)."),
    gpus: int = bounded(1, "--gpus", rule=bounds.GPUS, help="GPUs (tensor-parallel size)."),
    profile: str = typer.Option(None, "--profile", help="Hardware profile whose predictions are checked (and corrected)."),
    workload: str = typer.Option("rag", "--workload", "-w", help="Workload preset or JSON file: its prompt lengths are sent."),
    method: str = typer.Option(None, "--kt-method", help="Override the detected KT method."),
    host_ram: str = typer.Option(None, "--host-ram", help="Host RAM of the machine (default: the profile's)."),
    model_path: str = typer.Option(None, "--model-path", help="Model directory (required to launch the real server)."),
    weight_path: str = typer.Option(None, "--kt-weight-path", help="CPU weight directory (converted weights for AMX methods)."),
    repeats: int = bounded(2, "--repeats", rule=bounds.REPEATS, help="Prompts sent per length; the median TTFT is kept."),
    timeout: float = bounded(None, "--timeout", rule=bounds.TIMEOUT_SECONDS, help="Seconds to wait for the server to be ready (default: 120 s + 1 s per GiB of weights)."),
    port: int = bounded(None, "--port", rule=bounds.PORT, help="Port on 127.0.0.1 (default: a free one)."),
    python: str = typer.Option(None, "--python", help="Python of the environment with sglang-kt (default: this one)."),
    server_module: str = typer.Option("sglang.launch_server", "--server-module",
                                      help="Module run as `python -m MODULE <flags>`; kttune.validate.standin is a stand-in for tests."),
    log: str = typer.Option(None, "--log", help="Server log file (default: in the kttune cache dir)."),
    out: str = typer.Option(None, "--out", help="Profile file to write with the corrections (default: this profile's cached copy)."),
    write: bool = typer.Option(True, "--write/--no-write", help="Write the corrections into the profile."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
):
    """Launch sglang-kt with these flags, send the workload's prompt lengths and one of exactly the
    chunk size, and compare TTFT and KT's layerwise log lines with the prediction. The server runs
    in its own process group on 127.0.0.1 and is stopped at the end."""
    import os

    from rich.console import Console

    from kttune import api
    from kttune.emit import report
    from kttune.emit.validate_report import render_validation, validation_dict
    from kttune.validate.run import validate_flags

    console = Console(stderr=json_out)
    mp = model_path or (model if os.path.isdir(model) else None)
    inp = api.resolve_inputs(model, vram, gpus, profile, workload, method, host_ram, model_path=mp, weight_path=weight_path)
    if out is not None and write:  # refused before the server is launched
        from kttune.documents import check_output_file, profile_output_from

        check_output_file(out, profile_output_from("kttune validate", inp.request.profile),
                          inputs=[(profile, "--profile"), (workload, "--workload")])
    report.header(console, inp.request)

    with console.status("starting the server") as status:
        def on_event(kind: str, d: dict) -> None:
            if kind == "waiting":
                status.update(f"waiting for the server to be ready ({d['s']:.0f} s)")
            elif kind == "prompt":
                status.update(f"prompt of {d['tokens']:,} tokens (repeat {d['repeat'] + 1})")

        outcome = validate_flags(inp, gpu_experts, chunk, threshold, max_total_tokens, cpuinfer, repeats, timeout,
                                 port=port, python=python, server_module=server_module, log_path=log,
                                 write_profile=write, out=out, on_event=on_event)
    render_validation(console, outcome)
    if json_out:
        import json

        typer.echo(json.dumps(validation_dict(outcome), indent=1, default=str))
    if not outcome.result.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
