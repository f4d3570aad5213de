"""`kttune report`: a Markdown report with PNG figures from saved kttune documents. Parse, call
kttune.app.report, say what it wrote. Registered by `kttune.cli` when this module is present."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kttune.cli.options import Json

DEFAULT_DIR = "kttune-report"


def report(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="JSON documents: `kttune search --json`, `kttune explain --json`, "
            "`kttune probe --json` (or a profile file), path-runner, measured-search "
            "and simulation results; a directory stands for the *.json files in "
            "it."
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Directory for report.md and its PNG figures (created if needed).")
    ] = Path(DEFAULT_DIR),
    title: Annotated[Optional[str], typer.Option("--title", help="Report title (default: 'kttune report').")] = None,
    json_out: Json = False,
) -> None:
    """Write a Markdown report with figures (prefill against prompt length, VRAM, Pareto front, probe
    curves, path-runner calibration, schedule simulation) from saved results. No display needed."""
    from kttune import app

    print_written(app.report(files, out, title), json_out)


def print_written(written, json_out: bool = False, stderr: bool = False) -> None:
    """Say where a report went: its Markdown file and figures (JSON with --json; on stderr with
    `stderr`, when stdout carries a command's JSON)."""
    if json_out:
        from kttune.cli.common import emit_json

        emit_json(written.to_dict())
        return
    from rich.console import Console

    c = Console(stderr=stderr)
    c.print(f"report: {written.markdown} ({len(written.figures)} figures)", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("report")(report)
