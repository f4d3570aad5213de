"""`kttune paths` (run the real prefill paths on K layers, kttune.runner) and `kttune
calibrate` (fit the cost model's per-path corrections from their results into a profile)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

from kttune.errors import UserError


def paths_request(**fields):
    """A kttune.runner.api.PathsRequest (model, method, layers, gpu_experts, chunks, prompts,
    threshold, force, sweep, cpuinfer, small, device, cpu_max_tokens, max_run_s, repeats, profile)."""
    from kttune.runner.api import PathsRequest

    return PathsRequest(**fields)


def run_paths(request, out: str | Path | None = None, progress: Callable[[str], None] | None = None):
    """Run the request's prefill paths (kttune.runner.api.run_paths) with native output kept
    off stdout; `out`: also write the result there (refused before anything runs when it holds
    anything but a path-runner result, kttune.documents). Returns the PathsResult."""
    from kttune.extras import require

    require("torch", "`kttune paths`")
    if out is not None:
        from kttune.documents import PATHS_OUTPUT, check_output_file

        out = check_output_file(out, PATHS_OUTPUT, inputs=[(request.profile, "--profile"), (request.model, "model")])
    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.runner.api import run_paths as run

    with quiet_stdout(to_stderr=True):
        result = run(request, progress=progress)
    if out is not None:
        from kttune.hw.profile import write_json_atomic

        write_json_atomic(out, result.to_dict())
    return result


@dataclass(frozen=True)
class CalibrateOutcome:
    """The fitted calibration and where the calibrated profile went."""

    calibration: object  # kttune.calibration.entries.Calibration
    out: Path

    def to_dict(self) -> dict:
        return {"out": str(self.out), "calibration": list(self.calibration.to_dicts())}


def calibrate(results: Sequence[str | Path], profile: str | None, out: str | Path) -> CalibrateOutcome:
    """Fit per-path, per-method corrections of the cost model from path-runner results (files
    written by `kttune paths --out`) and write them into `profile` (default: as `kttune search`
    resolves it) at `out`."""
    from kttune.app.inputs import this_machine_inventory
    from kttune.bounds import read_json_file
    from kttune.calibration.entries import Calibration
    from kttune.documents import check_output_file, describe, document_of, is_paths_result, profile_output_from
    from kttune.hw.profile import save_profile
    from kttune.hw.registry import resolve_profile
    from kttune.runner.api import calibration_points

    results = [Path(p) for p in results]
    prof = resolve_profile(profile, None if profile else this_machine_inventory())
    fix = "pass files written by `kttune paths --out`"
    out = check_output_file(
        out,
        profile_output_from("kttune calibrate", prof),
        inputs=[*((p, "results file") for p in results), (profile, "--profile")],
    )
    points = []
    for p in results:
        if not p.is_file():
            raise UserError(f"results file {str(p)!r} does not exist", fix)
        d = read_json_file(p, repr(str(p)), fix)
        if not is_paths_result(d):
            raise UserError(f"{str(p)!r} holds {describe(d)}, not a path-runner result", fix)
        with document_of(repr(str(p)), "path-runner"):
            points += calibration_points(d, prof)
    if not points:
        raise UserError(
            "the results hold no predicted forwards to fit",
            "run `kttune paths` without --small, on the machine the profile describes",
        )
    cal = Calibration.fit(points, source=", ".join(str(p) for p in results))
    save_profile(replace(prof, calibration=tuple(cal.to_dicts())), out)
    return CalibrateOutcome(cal, out)
