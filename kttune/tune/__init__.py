"""`kttune tune`: the one command a user runs on the box that will serve (docs/tune.md). The
library call is `run_tune(TuneRequest(...), on_event=...) -> TuneResult`; the CLI
(kttune/cli_tune.py) parses, calls and renders (kttune/emit/tune_report.py)."""

from kttune.tune.result import EVALUATORS, PROBE_MODES, Gain, TuneEvent, TuneRequest, TuneResult, VerifyRow
from kttune.tune.run import run_tune

__all__ = ["EVALUATORS", "PROBE_MODES", "Gain", "TuneEvent", "TuneRequest", "TuneResult", "VerifyRow", "run_tune"]
