"""`kttune validate`: parse, call kttune.app.validate, render (kttune.emit.validate_report).
Registered by kttune.cli."""

from __future__ import annotations

from typing import Annotated

import typer

from kttune import bounds
from kttune.app.names import DEFAULT_VRAM_MARGIN, DEFAULT_WORKLOAD
from kttune.cli.bounds import bounded
from kttune.cli.options import (
    Chunk,
    Cpuinfer,
    GpuExperts,
    TpGpus,
    HostRam,
    Json,
    KtMethod,
    KvTokens,
    Model,
    ModelPath,
    Profile,
    Threshold,
    Vram,
    VramMargin,
    WeightPath,
    Workload,
)


def validate(
    model: Model,
    vram: Vram,
    gpu_experts: GpuExperts,
    chunk: Chunk = 8192,
    threshold: Threshold = 0,
    max_total_tokens: KvTokens = 65536,
    cpuinfer: Cpuinfer = None,
    gpus: TpGpus = 1,
    profile: Profile = None,
    workload: Workload = DEFAULT_WORKLOAD,
    method: KtMethod = None,
    host_ram: HostRam = None,
    vram_margin: VramMargin = DEFAULT_VRAM_MARGIN,
    model_path: ModelPath = None,
    weight_path: WeightPath = None,
    repeats: Annotated[
        int, bounded("--repeats", rule=bounds.REPEATS, help="Prompts sent per length; the median TTFT is kept.")
    ] = 2,
    timeout: Annotated[
        float,
        bounded(
            "--timeout",
            rule=bounds.TIMEOUT_SECONDS,
            help="Seconds to wait for the server to be ready (default: 120 s + 1 s per GiB of weights).",
        ),
    ] = None,
    port: Annotated[int, bounded("--port", rule=bounds.PORT, help="Port on 127.0.0.1 (default: a free one).")] = None,
    python: Annotated[
        str, typer.Option("--python", help="Python of the environment with sglang-kt (default: this one).")
    ] = None,
    server_module: Annotated[
        str,
        typer.Option(
            "--server-module",
            help="Module run as `python -m MODULE <flags>`; kttune.validate.standin is a stand-in for tests.",
        ),
    ] = "sglang.launch_server",
    log: Annotated[str, typer.Option("--log", help="Server log file (default: in the kttune cache dir).")] = None,
    out: Annotated[
        str,
        typer.Option("--out", help="Profile file to write with the corrections (default: this profile's cached copy)."),
    ] = None,
    write: Annotated[bool, typer.Option("--write/--no-write", help="Write the corrections into the profile.")] = True,
    json_out: Json = False,
):
    """Launch sglang-kt with these flags, send the workload's prompt lengths and one of exactly the
    chunk size, and compare TTFT and KT's layerwise log lines with the prediction. The server runs
    in its own process group on 127.0.0.1 and is stopped at the end."""
    from pathlib import Path

    from kttune import app
    from kttune.app import resolve
    from kttune.cli.common import console as make_console, emit_json
    from kttune.emit import report
    from kttune.emit.validate_report import render_validation

    console = make_console(json_out)
    mp = model_path or (model if Path(model).is_dir() else None)
    inp = app.resolve_inputs(
        model,
        resolve.vram_bytes(vram),
        gpus,
        profile,
        workload,
        method,
        resolve.host_ram_bytes(host_ram),
        vram_margin,
        model_path=mp,
        weight_path=weight_path,
    )
    if out is not None and write:  # refused before the server is launched
        app.check_profile_out(inp, out, inputs=[(profile, "--profile"), (workload, "--workload")])
    report.header(console, inp.request)

    with console.status("starting the server") as status:

        def on_event(kind: str, d: dict) -> None:
            if kind == "waiting":
                status.update(f"waiting for the server to be ready ({d['s']:.0f} s)")
            elif kind == "prompt":
                status.update(f"prompt of {d['tokens']:,} tokens (repeat {d['repeat'] + 1})")

        outcome = app.validate(
            inp,
            gpu_experts,
            chunk,
            threshold,
            max_total_tokens,
            cpuinfer,
            repeats,
            timeout,
            port=port,
            python=python,
            server_module=server_module,
            log_path=log,
            write_profile=write,
            out=out,
            on_event=on_event,
        )
    render_validation(console, outcome)
    if json_out:
        emit_json(outcome.to_dict())
    if not outcome.result.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
