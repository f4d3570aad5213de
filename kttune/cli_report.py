"""`kttune report`: a Markdown report with PNG figures from saved kttune results. Thin: reads the
documents, calls kttune.emit.markdown_report.write_report, prints what it wrote. Registered by
`kttune.cli` when this module is present."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

DEFAULT_DIR = "kttune-report"
REPORT_HELP = ("Also write DIR/report.md with PNG figures, and the JSON documents they come from "
               "(`kttune report DIR` rebuilds it). No display needed.")


def _report_dir(value: Optional[Path]) -> Optional[Path]:
    from kttune.documents import check_report_dir

    return None if value is None else check_report_dir(value)  # refused before the command's work


def report_option():
    """The `--report DIR` option, for any command whose result has figures: a directory that is
    not a kttune report (kttune.documents) is refused when the option is read."""
    return typer.Option(None, "--report", help=REPORT_HELP, callback=_report_dir)


def check_report_extras(report_dir: Optional[Path]) -> None:
    """`--report DIR` draws with matplotlib: checked before the command does its work, so a missing
    plot extra is one line (exit 2) and no half-written report."""
    if report_dir is not None:
        from kttune.extras import require

        require("matplotlib", "--report (its figures)")


def write_command_report(report_dir: Path, json_out: bool = False, *, results=(), profiles=(), runs=(), sims=()):
    """What `--report DIR` does after a command: write the report of its documents (search/explain
    results, profiles, path-runner rows, simulation results) and say where it went (on stderr
    when stdout carries JSON)."""
    from kttune.documents import check_report_dir
    from kttune.emit.markdown_report import ReportInputs, write_report

    written = write_report(check_report_dir(report_dir), ReportInputs(results=list(results), profiles=list(profiles), runs=list(runs),
                                                    sims=list(sims)), save_documents=True)
    print_written(written, stderr=json_out)
    return written


def report(
    files: list[Path] = typer.Argument(..., help="JSON documents: `kttune search --json`, `kttune explain --json`, "
                                             "`kttune probe --json` (or a profile file), path-runner and simulation "
                                             "results; a directory stands for the *.json files in it."),
    out: Path = typer.Option(Path(DEFAULT_DIR), "--out", "-o", help="Directory for report.md and its PNG figures (created if needed)."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title (default: 'kttune report')."),
    json_out: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Write a Markdown report with figures (prefill against prompt length, VRAM, Pareto front, probe
    curves, path-runner calibration, schedule simulation) from saved results. No display needed."""
    from kttune.documents import check_report_dir
    from kttune.emit.markdown_report import read_inputs, write_report
    from kttune.extras import require

    require("matplotlib", "`kttune report` (its figures)")
    check_report_dir(out, "--out", inputs=[(f, "input") for f in files])  # its documents are not rewritten
    written = write_report(out, read_inputs([str(f) for f in files]), title or "kttune report")
    print_written(written, json_out)


def print_written(written, json_out: bool = False, stderr: bool = False) -> None:
    """Say where a report went: its Markdown file and figures (JSON with --json)."""
    if json_out:
        typer.echo(json.dumps({"markdown": str(written.markdown),
                               "figures": [{"path": str(f.path), "title": f.title, "provenance": f.provenance}
                                           for f in written.figures]}, indent=1))
        return
    from rich.console import Console

    c = Console(stderr=stderr)
    c.print(f"report: {written.markdown} ({len(written.figures)} figures)", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("report")(report)
