"""Calibration entries: multiplicative corrections of the cost model's predictions, measured against
the real thing and kept in the hardware profile (`HardwareProfile.calibrations`).

One entry corrects one part of one prefill path for one KT method: `factor` = measured / predicted,
so a calibrated prediction is `factor x prediction`. `source` says what measured it: "server"
(`kttune validate`, TTFT and KT's log lines of a running sglang-kt server) or "runner" (the path
runner on this machine). Pure data and lookups."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

PATHS = ("hybrid", "layerwise")
# prefill: a whole forward on that path; load / compute: layerwise's two logged parts per MoE layer
PARTS = ("prefill", "load", "compute")
SOURCES = ("server", "runner")


@dataclass(frozen=True)
class Calibration:
    path: str  # "hybrid" | "layerwise"
    method: str  # KT method, e.g. "RAWINT4"
    factor: float  # measured / predicted
    source: str  # "server" | "runner"
    part: str = "prefill"  # "prefill" | "load" | "compute"
    n: int = 1  # measurements behind the factor
    model: str = ""  # the model it was measured with ("" = any)
    created: str = ""  # ISO timestamp
    detail: dict[str, Any] = field(default_factory=dict)  # config, lengths, per-sample ratios

    def __post_init__(self) -> None:
        if self.path not in PATHS or self.part not in PARTS:
            raise ValueError(f"calibration path/part {self.path}/{self.part} is not one of {PATHS} x {PARTS}")
        if not (math.isfinite(self.factor) and self.factor > 0):
            raise ValueError(f"calibration factor {self.factor} must be a positive number")

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.path, self.method, self.part, self.source, self.model)


def calibration_from_dict(d: dict[str, Any]) -> Calibration:
    return Calibration(**{**d, "detail": dict(d.get("detail", {}))})


def merge_calibrations(old: Iterable[Calibration], new: Iterable[Calibration]) -> tuple[Calibration, ...]:
    """`old` with every entry of the same (path, method, part, source, model) replaced by `new`."""
    new = tuple(new)
    keys = {c.key for c in new}
    return tuple(c for c in old if c.key not in keys) + new


def calibration_factor(calibrations: Iterable[Calibration], path: str, method: str, part: str = "prefill",
                       model: str = "", source: str | None = None) -> float:
    """The correction for this path, part and method: the entry of this model if there is one, else
    one for any model; "runner" before "server" unless `source` picks one. 1.0 when none applies."""
    cands = [c for c in calibrations if c.path == path and c.method == method and c.part == part
             and (source is None or c.source == source) and c.model in (model, "")]
    if not cands:
        return 1.0
    cands.sort(key=lambda c: (c.model != model, SOURCES.index(c.source) if c.source in SOURCES else 9))
    return cands[0].factor


def with_calibrations(profile, new: Iterable[Calibration]):
    """A copy of the profile with these entries merged in (see merge_calibrations)."""
    return replace(profile, calibrations=merge_calibrations(profile.calibrations, new))
