"""`kttune report` (a Markdown report with PNG figures from saved kttune documents) and what
`--report DIR` does after a command (kttune.emit.markdown_report draws and writes)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

from kttune.documents import check_report_dir


def check_report_extras(report_dir: str | Path | None) -> None:
    """`--report DIR` draws with matplotlib: checked before the command does its work, so a missing
    plot extra is one line (exit 2) and no half-written report."""
    if report_dir is not None:
        from kttune.extras import require

        require("matplotlib", "--report (its figures)")


def write_command_report(
    report_dir: str | Path,
    *,
    results: Iterable[dict] = (),
    profiles: Iterable[dict] = (),
    runs: Iterable[dict] = (),
    sims: Iterable[dict] = (),
    measured: Iterable[dict] = (),
):
    """The report of a command's documents (search/explain results, profiles, path-runner rows,
    simulation results, measured searches) in `report_dir`, with the documents beside it so that
    `kttune report DIR` rebuilds it. Returns the WrittenReport."""
    from kttune.emit.markdown_report import ReportInputs, write_report

    return write_report(
        check_report_dir(report_dir),
        ReportInputs(
            results=list(results), profiles=list(profiles), runs=list(runs), sims=list(sims), measured=list(measured)
        ),
        save_documents=True,
    )


def report(files: Sequence[str | Path], out: str | Path = "kttune-report", title: str | None = None):
    """A report in `out` from saved documents (a directory stands for the *.json files in it):
    each is read by its schema, or by its keys when it has none. Returns the WrittenReport."""
    from kttune.emit.markdown_report import read_inputs, write_report
    from kttune.extras import require

    require("matplotlib", "`kttune report` (its figures)")
    check_report_dir(out, "--out", inputs=[(f, "input") for f in files])  # its documents are not rewritten
    return write_report(Path(out), read_inputs([str(f) for f in files]), title or "kttune report")
