"""The calibration: per-path, per-method corrections of the cost model's MoE-layer time, typed, and
their fit from path-runner measurements. The one source of the profile's `calibration` list (stored
there as plain JSON dicts, `CalibrationEntry.to_dict`).

The cost model composes a MoE layer's time from micro-measurements; the path runner
(`kttune paths`) times the real paths end to end. For each (method, path) the correction is a
factor on the predicted MoE-layer time that may vary with the forward size:

    r(M) = exp(a + b ln M),   fitted by least squares on ln(observed / predicted), once more
                              without outliers beyond 3 median absolute deviations

where observed = measured layer time - predicted attention/dense time (floored at 10% of the
measurement). With fewer than three distinct forward sizes, b = 0 (a constant factor). Each entry
keeps its raw and leave-one-out error (`held_out_mape`: every point predicted by the fit on the
others), so `search` and `explain` can say how far the calibrated model is from what it has not
seen.

`kttune validate` writes entries of the same form with `source` "server" and `b` = 0 (a constant
factor per path and method, `server_entry`), plus `model`, `created` and `detail`:

- `path` "hybrid" / "layerwise": MoE-layer corrections the cost model applies.
- `path` "layerwise:load" / "layerwise:compute": KT's logged `prepare weight` and `compute` per MoE
  layer against the predicted load and GPU compute; recorded to show where a layerwise error comes
  from, not applied.

Pure Python; imports no other kttune package (the cost model and the profile read it).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterable, Mapping

SERVER = "server"  # the source of `kttune validate`'s entries
APPLIED_PATHS = ("hybrid", "layerwise")
PART_PATHS = ("layerwise:load", "layerwise:compute")
# What only a server entry records (the model and launch it came from), left out of other entries' dicts.
SERVER_KEYS = ("model", "created", "detail")


@dataclass(frozen=True)
class CalibrationEntry:
    method: str
    path: str  # one of APPLIED_PATHS + PART_PATHS
    a: float  # ln of the factor at one token
    b: float  # its slope in ln(tokens); 0 = a constant factor
    points: int  # measurements it was fitted on
    raw_mape: float | None = None  # the raw model's mean relative error on them
    held_out_mape: float | None = None  # leave-one-out error of the calibrated model
    source: str = ""  # results files it was fitted from, or SERVER
    model: str = ""  # server entries: the model served
    created: str = ""  # server entries: when
    detail: dict[str, Any] = field(default_factory=dict)  # server entries: the launch config and evidence

    def factor(self, tokens: float = 1.0) -> float:
        """exp(a + b ln M): the factor on the predicted MoE-layer time of a forward of M tokens."""
        return math.exp(self.a + self.b * math.log(max(1.0, tokens)))

    def to_dict(self) -> dict[str, Any]:
        """The profile's JSON form (a server entry's model, created and detail only where it is one)."""
        d = asdict(self)
        if self.source != SERVER:
            for k in SERVER_KEYS:
                del d[k]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CalibrationEntry":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def _fit_ab(xs: list[float], ys: list[float]) -> tuple[float, float]:
    n = len(xs)
    if n == 0:
        return 0.0, 0.0
    if len(set(round(x, 6) for x in xs)) < 3:
        return sum(ys) / n, 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def _observed_moe(p: Mapping) -> float:
    return max(p["measured_ms"] - p["predicted_other_ms"], 0.1 * p["measured_ms"])


def _fit_one(points: list[Mapping]) -> tuple[float, float]:
    """Least squares, then once more without the points whose residual exceeds 3 median absolute
    deviations (a run disturbed by something else must not move the correction of all the others)."""
    xs = [math.log(max(1, p["tokens"])) for p in points]
    ys = [math.log(_observed_moe(p) / max(p["predicted_moe_ms"], 1e-9)) for p in points]
    a, b = _fit_ab(xs, ys)
    if len(xs) >= 5:
        res = [abs(y - a - b * x) for x, y in zip(xs, ys)]
        mad = sorted(res)[len(res) // 2]
        keep = [i for i, r in enumerate(res) if r <= 3 * mad + 1e-12]
        if len(keep) < len(xs):
            a, b = _fit_ab([xs[i] for i in keep], [ys[i] for i in keep])
    return a, b


def _layer_ms(p: Mapping, a: float, b: float) -> float:
    return p["predicted_other_ms"] + p["predicted_moe_ms"] * math.exp(a + b * math.log(max(1, p["tokens"])))


def _mape(pairs: list[tuple[float, float]]) -> float | None:
    xs = [abs(p - m) / m for p, m in pairs if m > 0]
    return sum(xs) / len(xs) if xs else None


@dataclass(frozen=True)
class Calibration:
    entries: tuple[CalibrationEntry, ...] = ()

    @classmethod
    def fit(cls, points: Iterable[Mapping], source: str = "", held_out: bool = True) -> "Calibration":
        """Points: mappings with method, path, tokens, measured_ms (one decoder layer), predicted_moe_ms
        and predicted_other_ms (the raw cost model's parts of that layer). `held_out` False leaves the
        leave-one-out error out (a fit inside another held-out loop needs none)."""
        groups: dict[tuple[str, str], list[Mapping]] = {}
        for p in points:
            groups.setdefault((str(p["method"]).upper(), str(p["path"])), []).append(p)
        out = []
        for (method, path), pts in sorted(groups.items()):
            a, b = _fit_one(pts)
            raw = _mape([(p["predicted_moe_ms"] + p["predicted_other_ms"], p["measured_ms"]) for p in pts])
            loo = None
            if held_out and len(pts) >= 2:
                pairs = []
                for i, p in enumerate(pts):
                    ai, bi = _fit_one(pts[:i] + pts[i + 1 :])
                    pairs.append((_layer_ms(p, ai, bi), p["measured_ms"]))
                loo = _mape(pairs)
            out.append(CalibrationEntry(method, path, a, b, len(pts), raw, loo, source))
        return cls(tuple(out))

    @classmethod
    def from_dicts(cls, entries: Iterable[Mapping]) -> "Calibration":
        return cls(tuple(CalibrationEntry.from_dict(e) for e in entries))

    def to_dicts(self) -> list[dict]:
        return [e.to_dict() for e in self.entries]

    def entry(self, method: str, path: str) -> CalibrationEntry | None:
        for e in self.entries:
            if e.method == method.upper() and e.path == path:
                return e
        return None

    def apply(self, method: str, path: str, moe_ms: float, tokens: float) -> float:
        """The calibrated MoE-layer time (unchanged where no entry exists)."""
        e = self.entry(method, path)
        return moe_ms * e.factor(tokens) if e else moe_ms

    def summary(self, method: str) -> list[str]:
        out = []
        for e in self.entries:
            if e.method == method.upper():
                held = f"{100 * e.held_out_mape:.0f}%" if e.held_out_mape is not None else "n/a (one point)"
                raw = f"{100 * e.raw_mape:.0f}%" if e.raw_mape is not None else "n/a"
                out.append(f"{e.path} calibrated from {e.points} path-runner points: error {raw} raw, {held} held out")
        return out

    def server_entries(self, method: str | None = None) -> tuple[CalibrationEntry, ...]:
        return tuple(e for e in self.entries if e.source == SERVER and (method is None or e.method == method.upper()))

    def with_server_entries(self, new: Iterable[CalibrationEntry]) -> "Calibration":
        """Without the server entries that `new` replaces (same method, path and model), then `new`
        at the end: `entry`, which takes the first of a method and path, prefers the path runner's,
        whose error is checked on held-out points."""
        new = tuple(new)
        keys = {(e.method, e.path, e.model) for e in new}
        kept = tuple(e for e in self.entries if not (e.source == SERVER and (e.method, e.path, e.model) in keys))
        return Calibration(kept + new)


def server_entry(
    method: str,
    path: str,
    factor: float,
    points: int,
    raw_mape: float | None = None,
    model: str = "",
    created: str = "",
    detail: dict[str, Any] | None = None,
) -> CalibrationEntry:
    """A `kttune validate` entry: a constant `factor` on `path` of `method`, from `points` measurements."""
    if path not in APPLIED_PATHS + PART_PATHS:
        raise ValueError(f"calibration path {path!r} is not one of {APPLIED_PATHS + PART_PATHS}")
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"calibration factor {factor} must be a positive number")
    return CalibrationEntry(
        method.upper(),
        path,
        math.log(factor),
        0.0,
        int(points),
        raw_mape,
        None,
        SERVER,
        model,
        created,
        dict(detail or {}),
    )


def entry_factor(entry: Mapping[str, Any], tokens: float = 1.0) -> float:
    """The factor of an entry in the profile's JSON form (`CalibrationEntry.factor`)."""
    return CalibrationEntry.from_dict(entry).factor(tokens)
