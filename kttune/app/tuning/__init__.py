"""`kttune tune`: the one command a user runs on the box that will serve (docs/tune.md). The
library call is `tune(TuneRequest(...), on_event=...) -> TuneResult` (`run_tune`, and the report
written: tune.json and tune.md, kttune.emit.tune_report); the CLI (kttune/cli/tune.py) parses,
calls and renders."""

from __future__ import annotations

from typing import Callable

from kttune.app.tuning.result import EVALUATORS, PROBE_MODES, Gain, TuneEvent, TuneRequest, TuneResult, VerifyRow
from kttune.app.tuning.run import run_tune

__all__ = [
    "EVALUATORS",
    "PROBE_MODES",
    "Gain",
    "TuneEvent",
    "TuneRequest",
    "TuneResult",
    "VerifyRow",
    "run_tune",
    "tune",
]


def tune(req: TuneRequest, on_event: Callable[[TuneEvent], None] | None = None) -> TuneResult:
    """`run_tune`, then its report (tune.json and tune.md) in `result.report_dir`; the files
    written are in `result.report_files`."""
    from kttune.emit import tune_report

    result = run_tune(req, on_event)
    result.report_files = (
        tuple(tune_report.write_report(result.to_dict(), result.report_dir)) if result.report_dir else ()
    )
    return result
