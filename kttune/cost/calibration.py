"""Per-path, per-method corrections of the MoE-layer time, fitted from path-runner measurements.

The cost model composes a MoE layer's time from micro-measurements; the path runner
(`kttune paths`) times the real paths end to end. For each (method, path) the correction is a
factor on the predicted MoE-layer time that may vary with the forward size:

    r(M) = exp(a + b ln M),   fitted by least squares on ln(observed / predicted), once more
                              without outliers beyond 3 median absolute deviations

where observed = measured layer time - predicted attention/dense time (floored at 10% of the
measurement). With fewer than three distinct forward sizes, b = 0 (a constant factor). Each entry
keeps its raw and leave-one-out error (`held_out_mape`: every point predicted by the fit on the
others), so `search` and `explain` can say how far the calibrated model is from what it has not
seen. Pure Python.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping


@dataclass(frozen=True)
class CalibrationEntry:
    method: str
    path: str  # hybrid | layerwise
    a: float
    b: float
    points: int
    raw_mape: float | None = None
    held_out_mape: float | None = None
    source: str = ""

    def factor(self, tokens: float) -> float:
        return math.exp(self.a + self.b * math.log(max(1.0, tokens)))

    def to_dict(self) -> dict:
        return asdict(self)


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
                    ai, bi = _fit_one(pts[:i] + pts[i + 1:])
                    pairs.append((_layer_ms(p, ai, bi), p["measured_ms"]))
                loo = _mape(pairs)
            out.append(CalibrationEntry(method, path, a, b, len(pts), raw, loo, source))
        return cls(tuple(out))

    @classmethod
    def from_dicts(cls, entries: Iterable[Mapping]) -> "Calibration":
        fields = CalibrationEntry.__dataclass_fields__
        return cls(tuple(CalibrationEntry(**{k: v for k, v in e.items() if k in fields}) for e in entries))

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
