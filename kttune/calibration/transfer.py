"""Corrections of the cost model that must hold for models, shapes and thread counts they were not
fitted on, and the held-out errors that say whether they do. Pure (numpy).

The path runner's forwards (`kttune paths`) each give a measured decoder-layer time and the raw cost
model's parts of it (`TransferPoint`). Two corrections are compared with no correction at all:

- `per_method`: the profile's calibration (kttune.calibration.entries): a factor exp(a + b ln M) per
  (method, path) on the MoE-layer time. It says nothing about a method it has not seen.
- `terms`: one correction per path shared by every model and method, on the physical parts of the
  layer the cost model composes, in three feature sets (`VARIANTS`): `full`, a fixed cost per MoE
  layer (ms) and a factor on each timed part (hybrid: the overlapped CPU/GPU expert time and the
  copies; layerwise: the layer load and the GPU MoE); `factors`, the factors alone; `dominant`, one
  factor on the part that dominates each path (hybrid: the experts; layerwise: the load). Fitted by
  least squares on relative error with a ridge penalty that pulls every coefficient toward no
  correction; the penalty `shrinkage` is chosen by held-out error.

Errors are reported leave one model out (fit on the other models, predict the held-out one), leave
one thread count out, and leave one point out. The rule for shipping (`choose_shrinkage`): the
shrinkage with the least mean held-out error among those that make no held-out group worse than the
raw model; when none does, the infinite shrinkage, i.e. no correction is shipped.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from kttune.calibration.entries import Calibration

# The shrinkage grid, in units of the relative error's squared scale (see `fit_terms`); inf: none.
SHRINKAGES = (0.0, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, math.inf)
# The correctable parts of a layer, by path (the names TransferPoint.terms uses), and the feature
# sets a correction may use.
TERMS = {"hybrid": ("fixed_ms", "experts", "copies"), "layerwise": ("fixed_ms", "load", "gpu_moe")}
VARIANTS = {
    "full": TERMS,
    "factors": {"hybrid": ("experts", "copies"), "layerwise": ("load", "gpu_moe")},
    "dominant": {"hybrid": ("experts",), "layerwise": ("load",)},
}


@dataclass(frozen=True)
class MeasuredForward:
    """Which forward of a path-runner run a point is: the model and method run, the path it took,
    its tokens after `prefix` cached ones, the GPU experts per layer."""

    model: str
    method: str
    path: str
    tokens: int
    prefix: int
    gpu_experts: int


@dataclass(frozen=True)
class TransferPoint(MeasuredForward):
    """One measured forward, per decoder layer (ms): what groups it (model, method, threads) and the
    raw cost model's parts (`terms`: the correctable ones, `other_ms`: attention and dense work the
    corrections leave alone)."""

    threads: int
    measured_ms: float
    other_ms: float
    terms: dict[str, float]  # by TERMS[path]; "fixed_ms" is 1.0 (a count: one MoE layer)

    @property
    def raw_ms(self) -> float:
        return self.other_ms + sum(v for k, v in self.terms.items() if k != "fixed_ms")

    def calibration_point(self) -> dict:
        """The mapping `kttune.calibration.entries.Calibration.fit` reads."""
        return {
            "method": self.method,
            "path": self.path,
            "tokens": self.tokens,
            "measured_ms": self.measured_ms,
            "predicted_moe_ms": self.raw_ms - self.other_ms,
            "predicted_other_ms": self.other_ms,
        }

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TermCorrection:
    """Per path: coefficient deltas on TERMS[path] (fixed_ms in ms per MoE layer, the others as
    factor - 1), with the shrinkage they were fitted at. An infinite shrinkage is no correction."""

    deltas: dict[str, dict[str, float]] = field(default_factory=dict)
    shrinkage: float = math.inf
    variant: str = "full"

    def predict(self, p: TransferPoint) -> float:
        d = self.deltas.get(p.path, {})
        return max(0.05 * p.raw_ms, p.raw_ms + sum(d.get(k, 0.0) * v for k, v in p.terms.items()))

    def to_dict(self) -> dict:
        return {
            "variant": self.variant,
            "deltas": self.deltas,
            "shrinkage": None if math.isinf(self.shrinkage) else self.shrinkage,
        }


def fit_terms(points: Sequence[TransferPoint], shrinkage: float, variant: str = "full") -> TermCorrection:
    """Per path, the deltas d minimising sum_i ((raw_i + x_i . d - measured_i) / measured_i)^2 +
    shrinkage x n x sum_j (s_j d_j)^2, with x_i the point's TERMS and s_j the RMS of x_ij / measured_i
    (so the penalty weighs every term on the relative-error scale, and grows with the points)."""
    if math.isinf(shrinkage) or not points:
        return TermCorrection({}, shrinkage, variant)
    deltas = {}
    for path, names in VARIANTS[variant].items():
        pts = [p for p in points if p.path == path]
        if not pts:
            continue
        x = np.array([[p.terms.get(k, 0.0) / p.measured_ms for k in names] for p in pts])
        y = np.array([(p.measured_ms - p.raw_ms) / p.measured_ms for p in pts])
        scale = np.sqrt(np.mean(x**2, axis=0))
        keep = scale > 0
        d = np.zeros(len(names))
        if keep.any():
            xs = x[:, keep] / scale[keep]
            a = xs.T @ xs + shrinkage * len(pts) * np.eye(int(keep.sum()))
            d[keep] = np.linalg.lstsq(a, xs.T @ y, rcond=None)[0] / scale[keep]
        deltas[path] = {k: float(v) for k, v in zip(names, d)}
    return TermCorrection(deltas, shrinkage, variant)


def ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas


def mape(pairs: Iterable[tuple[float, float]]) -> float | None:
    xs = [ape(p, m) for p, m in pairs if m > 0]
    return sum(xs) / len(xs) if xs else None


Predictor = Callable[[Sequence[TransferPoint]], Callable[[TransferPoint], float]]


def terms_predictor(shrinkage: float, variant: str = "full") -> Predictor:
    def fit(train: Sequence[TransferPoint]) -> Callable[[TransferPoint], float]:
        return fit_terms(train, shrinkage, variant).predict

    return fit


def raw_predictor(train: Sequence[TransferPoint]) -> Callable[[TransferPoint], float]:
    return lambda p: p.raw_ms


def per_method_predictor(train: Sequence[TransferPoint]) -> Callable[[TransferPoint], float]:
    """The profile's calibration form (kttune.calibration.entries) fitted on `train`: a method or path it
    has not seen keeps the raw prediction."""
    cal = Calibration.fit([p.calibration_point() for p in train], held_out=False)

    def predict(p: TransferPoint) -> float:
        return p.other_ms + cal.apply(p.method, p.path, p.raw_ms - p.other_ms, p.tokens)

    return predict


def held_out(
    points: Sequence[TransferPoint], group: Callable[[TransferPoint], object], predictor: Predictor
) -> dict[object, dict[str, float | None]]:
    """Per group and path: MAPE of `predictor` fitted on every other group, and the raw MAPE."""
    out: dict = {}
    for g in sorted({group(p) for p in points}, key=str):
        train = [p for p in points if group(p) != g]
        test = [p for p in points if group(p) == g]
        f = predictor(train)
        for path in sorted({p.path for p in test}):
            t = [p for p in test if p.path == path]
            out[(g, path)] = {
                "points": len(t),
                "raw": mape((p.raw_ms, p.measured_ms) for p in t),
                "held_out": mape((f(p), p.measured_ms) for p in t),
            }
    return out


def leave_one_point_out(points: Sequence[TransferPoint], predictor: Predictor) -> dict[str, float | None]:
    """Per path: every point predicted by the predictor fitted on all the others."""
    idx = list(range(len(points)))
    out = {}
    for path in sorted({p.path for p in points}):
        pairs = []
        for i in [i for i in idx if points[i].path == path]:
            f = predictor([points[j] for j in idx if j != i])
            pairs.append((f(points[i]), points[i].measured_ms))
        out[path] = mape(pairs)
    return out


def by_model(p: TransferPoint) -> str:
    return p.model


def by_threads(p: TransferPoint) -> int:
    return p.threads


def no_group_worse(table: dict, slack: float = 0.0) -> bool:
    """Whether no held-out group's error exceeds its raw error (plus `slack`)."""
    return all(r["held_out"] is None or r["raw"] is None or r["held_out"] <= r["raw"] + slack for r in table.values())


def mean_held_out(table: dict) -> float:
    xs = [(r["held_out"], r["points"]) for r in table.values() if r["held_out"] is not None]
    return sum(e * n for e, n in xs) / max(1, sum(n for _, n in xs))


def choose_shrinkage(
    points: Sequence[TransferPoint],
    group: Callable[[TransferPoint], object] = by_model,
    grid: Sequence[float] = SHRINKAGES,
    variant: str = "full",
) -> tuple[float, dict[float, dict]]:
    """The shrinkage to ship (see the module docstring) and, per grid value, the leave-one-group-out
    table it gives. With fewer than two groups nothing is held out: no correction."""
    tables = {s: held_out(points, group, terms_predictor(s, variant)) for s in grid}
    if len({group(p) for p in points}) < 2:
        return math.inf, tables
    ok = [s for s in grid if no_group_worse(tables[s])]
    best = min(ok, key=lambda s: (mean_held_out(tables[s]), -s if not math.isinf(s) else -1e300)) if ok else math.inf
    return best, tables


def nested_held_out(
    points: Sequence[TransferPoint],
    group: Callable[[TransferPoint], object] = by_model,
    grid: Sequence[float] = SHRINKAGES,
    variant: str = "full",
) -> dict:
    """Each group predicted by the `terms` correction fitted on the other groups at the shrinkage
    `choose_shrinkage` picks on those other groups alone (the held-out group never chooses its own
    shrinkage). Per (group, path): raw and held-out MAPE and the shrinkage used."""
    out: dict = {}
    for g in sorted({group(p) for p in points}, key=str):
        train = [p for p in points if group(p) != g]
        test = [p for p in points if group(p) == g]
        s, _ = choose_shrinkage(train, group, grid, variant)
        f = fit_terms(train, s, variant).predict
        for path in sorted({p.path for p in test}):
            t = [p for p in test if p.path == path]
            out[(g, path)] = {
                "points": len(t),
                "raw": mape((p.raw_ms, p.measured_ms) for p in t),
                "held_out": mape((f(p), p.measured_ms) for p in t),
                "shrinkage": None if math.isinf(s) else s,
            }
    return out
