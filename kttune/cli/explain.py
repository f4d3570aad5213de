"""`kttune explain`: a flag set, or a whole sglang-kt launch command, explained. Parse, call
kttune.app.explain_flags or kttune.app.explain_command, render (kttune.emit.report,
kttune.emit.launch_report)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from kttune.app.names import DEFAULT_VRAM_MARGIN, DEFAULT_WORKLOAD
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
    Profile,
    Report,
    Threshold,
    Vram,
    VramMargin,
    Workload,
)
from kttune.errors import UserError


def explain(
    launch: Annotated[
        Optional[List[str]],
        typer.Argument(
            metavar="[-- COMMAND...]",
            help="A sglang-kt launch command after `--`, e.g. `-- python -m sglang.launch_server "
            "--model ... --kt-num-gpu-experts 32`: kttune reads its flags (sglang's own names), "
            "fills what it leaves unset as sglang-kt 0.7.2 does, and compares it with the "
            "search's pick.",
        ),
    ] = None,
    command: Annotated[
        str,
        typer.Option(
            "--command",
            help="The same launch command as one string (as pasted from a shell; backslash line breaks are fine).",
        ),
    ] = None,
    model: Model = None,
    vram: Vram = None,
    gpu_experts: GpuExperts = None,
    chunk: Chunk = None,
    threshold: Threshold = None,
    max_total_tokens: KvTokens = None,
    cpuinfer: Cpuinfer = None,
    attention_backend: Annotated[
        str,
        typer.Option(
            "--attention-backend",
            help="SGLang's attention backend (default triton, as kttune launches MLA models): for MLA models "
            "it sets the prefill form over a cached prefix, and nsa runs sparse attention.",
        ),
    ] = None,
    gpus: TpGpus = None,
    profile: Profile = None,
    workload: Workload = DEFAULT_WORKLOAD,
    method: KtMethod = None,
    host_ram: HostRam = None,
    vram_margin: VramMargin = DEFAULT_VRAM_MARGIN,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare/--no-compare",
            help="With a launch command: run the search on the same inputs and show what it would change.",
        ),
    ] = True,
    json_out: Json = False,
    report_dir: Report = None,
):
    """Explain a flag set or a whole sglang-kt launch command: does it fit (VRAM by phase, host RAM),
    which path each forward takes, prefill per prompt length, decode per request and for the batch.

    With a launch command, --model defaults to its --model directory (or the catalog model that
    directory is named after) and --vram to the profile's GPU memory."""
    from kttune import app
    from kttune.app import resolve
    from kttune.cli.common import console as make_console, emit_json
    from kttune.cli.flags import spelled
    from kttune.emit import report

    app.check_report_extras(report_dir)
    console = make_console(json_out)
    if launch or command:
        given = {
            "--gpu-experts": gpu_experts,
            "--chunk": chunk,
            "--threshold": threshold,
            "--max-total-tokens": max_total_tokens,
            "--cpuinfer": cpuinfer,
            "--attention-backend": attention_backend,
            "--gpus": gpus,
            "--kt-method": method,
        }
        clash = [k for k, v in given.items() if v is not None]
        if launch and command:
            raise UserError("a launch command after -- and --command", "pass the command once")
        if clash:
            raise UserError(
                f"{', '.join(clash)} given beside a launch command", "put those flags in the command itself"
            )
        from kttune.emit.launch_report import render_launch_explain

        outcome = spelled(
            app.explain_command(
                command if command else launch,
                model,
                resolve.vram_bytes(vram) if vram else None,
                profile,
                workload,
                resolve.host_ram_bytes(host_ram),
                vram_margin,
                compare=compare,
            )
        )
        inp = outcome.explained.inputs
        report.header(console, inp.request, inp.notes)
        render_launch_explain(console, outcome)
    else:
        missing = [k for k, v in (("--model", model), ("--vram", vram), ("--gpu-experts", gpu_experts)) if v is None]
        if missing:
            raise UserError(
                f"explain needs {', '.join(missing)} (or a launch command after --)",
                "pass them, e.g. --model qwen3-30b-a3b --vram 32G --gpu-experts 8, or "
                "kttune explain -- python -m sglang.launch_server ...",
            )
        inp = app.resolve_inputs(
            model,
            resolve.vram_bytes(vram),
            1 if gpus is None else gpus,
            profile,
            workload,
            method,
            resolve.host_ram_bytes(host_ram),
            vram_margin,
            model_path=model if Path(model).is_dir() else None,
        )
        report.header(console, inp.request, inp.notes)
        outcome = app.explain_flags(
            inp,
            gpu_experts,
            **{
                k: v
                for k, v in (("chunk", chunk), ("threshold", threshold), ("max_total_tokens", max_total_tokens))
                if v is not None
            },
            cpuinfer=cpuinfer,
            attention_backend=attention_backend,
        )
        report.render_explain(console, outcome)
    doc = outcome.to_dict()
    if json_out:
        emit_json(doc)
    if report_dir:
        from kttune.cli.report import print_written

        print_written(
            app.write_command_report(
                report_dir, results=[doc], profiles=[app.ProfileDocument(inp.request.profile).to_dict()]
            ),
            stderr=json_out,
        )
    if not outcome.feasible:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("explain")(explain)
