"""kttune's application facade: one function per command, the same for `kttune` (kttune.cli
parses, calls one of these, renders with kttune.emit) and for Python users. Each takes typed values
(bytes, seconds, counts, names; kttune.app.resolve turns the command line's words into them) and
returns a result object with `to_dict()`, its JSON document in the one envelope (kttune.schema).
Errors name the parameters (`vram_bytes`, `gpus`); the CLI spells them as flags
(kttune.cli.flags).

    from kttune import app
    inp = app.resolve_inputs("qwen3-30b-a3b", vram_bytes=32 * 2**30)
    out = app.search(inp, trials=300)
    print(out.argv, out.to_dict()["pick"])

command                 function                       result
search                  search(inputs, ...)            SearchOutcome
search --measure        measured_search(inputs, ...)   MeasuredOutcome
explain (flags)         explain_flags(inputs, ...)     ExplainOutcome
explain -- COMMAND      explain_command(command, ...)  LaunchExplainOutcome
simulate                simulate(...)                  kttune.sim.simulate.SimulationReport
paths                   run_paths(paths_request(...))  kttune.runner.api.PathsResult
calibrate               calibrate(results, ...)        CalibrateOutcome
validate                validate(inputs, ...)          ValidateOutcome
probe                   probe(probe_options(...))      ProbeOutcome
profile merge           merge_probes(files, out)       ProbeOutcome
profile derive          derive(source, out, ...)       DeriveOutcome
profile show            show_profile(name)             ProfileDocument
report                  report(files, out)             kttune.emit.markdown_report.WrittenReport
tune                    tune(TuneRequest(...))         kttune.app.tuning.TuneResult
models/profiles/workloads  list_models() ...           ModelList, ProfileListing, WorkloadList

Names resolve on first use (PEP 562), so `import kttune.app` costs nothing until a command runs.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "kttune.app.catalog": (
        "ModelList",
        "ProfileDocument",
        "ProfileListing",
        "ShippedProfile",
        "WorkloadList",
        "gpu_table",
        "list_models",
        "list_profiles",
        "list_workloads",
        "model_spec",
        "show_profile",
    ),
    "kttune.app.derivation": ("DeriveOutcome", "derive"),
    "kttune.app.inputs": ("Inputs", "resolve_inputs", "this_machine_inventory"),
    "kttune.app.launch_explain": ("COMPARE_TRIALS", "LaunchExplainOutcome", "explain_command"),
    "kttune.app.measured": ("EVALUATORS", "MeasuredOutcome", "make_evaluator", "measured_search"),
    "kttune.app.paths": ("CalibrateOutcome", "calibrate", "paths_request", "run_paths"),
    "kttune.app.probing": ("ProbeOutcome", "merge_probes", "probe", "probe_options"),
    "kttune.app.reporting": ("check_report_extras", "report", "write_command_report"),
    "kttune.app.search_explain": (
        "ExplainOutcome",
        "SearchOutcome",
        "command_for",
        "explain_flags",
        "launch_config",
        "search",
        "slo_target",
    ),
    "kttune.app.simulation": ("simulate", "simulation_inputs"),
    "kttune.app.tuning": ("TuneRequest", "TuneResult", "tune"),
    "kttune.app.validation": ("ValidateOutcome", "check_profile_out", "validate"),
    "kttune.app.names": ("DEFAULT_MEASURED_TRIALS", "DEFAULT_TRIALS", "DEFAULT_VRAM_MARGIN", "DEFAULT_WORKLOAD"),
}
_MODULE_OF = {name: mod for mod, names in _WHERE.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    mod = _MODULE_OF.get(name)
    if mod is None:
        raise AttributeError(f"module 'kttune.app' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
