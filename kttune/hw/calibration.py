"""Calibration entries from a running server, in the profile's `calibration` list.

The list holds the path runner's corrections of the cost model (kttune.cost.calibration), as dicts:
`method`, `path`, `a`, `b`, `points`, `raw_mape`, `held_out_mape`, `source`, where the factor
exp(a + b ln M) multiplies the predicted MoE-layer time of `path` for a forward of M tokens.
`kttune validate` writes entries of the same form with `source` "server" and `b` = 0 (a constant
factor per path and method), plus keys that reader ignores: `model`, `created`, `detail`.

- `path` "hybrid" / "layerwise": MoE-layer corrections the cost model applies.
- `path` "layerwise:load" / "layerwise:compute": KT's logged `prepare weight` and `compute` per MoE
  layer against the predicted load and GPU compute; recorded to show where a layerwise error comes
  from, not applied.

Pure dict helpers (the profile stays plain JSON)."""

from __future__ import annotations

import math
from typing import Any, Iterable

SERVER = "server"
APPLIED_PATHS = ("hybrid", "layerwise")
PART_PATHS = ("layerwise:load", "layerwise:compute")


def server_entry(method: str, path: str, factor: float, points: int, raw_mape: float | None = None,
                 model: str = "", created: str = "", detail: dict[str, Any] | None = None) -> dict[str, Any]:
    if path not in APPLIED_PATHS + PART_PATHS:
        raise ValueError(f"calibration path {path!r} is not one of {APPLIED_PATHS + PART_PATHS}")
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"calibration factor {factor} must be a positive number")
    return {"method": method.upper(), "path": path, "a": math.log(factor), "b": 0.0, "points": int(points),
            "raw_mape": raw_mape, "held_out_mape": None, "source": SERVER, "model": model, "created": created,
            "detail": dict(detail or {})}


def entry_factor(entry: dict[str, Any], tokens: float = 1.0) -> float:
    return math.exp(entry["a"] + entry.get("b", 0.0) * math.log(max(1.0, tokens)))


def merge_server_entries(existing: Iterable[dict[str, Any]], new: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """`existing` without the server entries that `new` replaces (same method, path and model), then
    `new` at the end: a reader that takes the first entry of a method and path prefers the path
    runner's, whose error is checked on held-out points."""
    new = tuple(new)
    keys = {(e["method"], e["path"], e.get("model", "")) for e in new}
    kept = tuple(e for e in existing
                 if not (e.get("source") == SERVER and (e["method"], e["path"], e.get("model", "")) in keys))
    return kept + new


def server_entries(entries: Iterable[dict[str, Any]], method: str | None = None) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("source") == SERVER and (method is None or e["method"] == method.upper())]
