"""Fitting measured curves: non-negative least squares on relative error, and log-log
interpolation. Small and pure (numpy only).

A cost term is a linear combination of physical features (a constant, bytes moved, flops), each
with a non-negative coefficient: fitted that way, a curve measured at one shape transfers to
another shape through its features, and the coefficients read as overhead, inverse bandwidth and
inverse compute rate.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class LinearFit:
    """t_ms = sum(coef[i] * feature[i]); `rel_rmse` over the points it was fitted on."""

    names: tuple[str, ...]
    coef: tuple[float, ...]
    rel_rmse: float
    n_points: int

    def __call__(self, features: Sequence[float]) -> float:
        return float(sum(c * f for c, f in zip(self.coef, features)))

    def as_dict(self) -> dict:
        return {"features": dict(zip(self.names, self.coef)), "rel_rmse": self.rel_rmse, "n_points": self.n_points}


def fit_nonneg(names: Sequence[str], rows: Sequence[Sequence[float]], ys: Sequence[float]) -> LinearFit:
    """Least squares on relative error (rows weighted by 1/y) with every coefficient >= 0: the best
    of the exact fits over all subsets of features whose solution is non-negative (a handful of
    features, so enumerating subsets is exact and cheap)."""
    a = np.asarray(rows, dtype=float)
    y = np.asarray(ys, dtype=float)
    if a.ndim != 2 or len(y) == 0:
        raise ValueError("nothing to fit")
    w = 1.0 / np.maximum(y, 1e-9)
    aw = a * w[:, None]
    yw = y * w
    # scale columns so lstsq is well conditioned
    scale = np.maximum(np.abs(aw).max(axis=0), 1e-300)
    best: tuple[float, np.ndarray] | None = None
    k = a.shape[1]
    for r in range(1, k + 1):
        for cols in itertools.combinations(range(k), r):
            sub = aw[:, cols] / scale[list(cols)]
            sol, *_ = np.linalg.lstsq(sub, yw, rcond=None)
            if np.any(sol < 0):
                continue
            full = np.zeros(k)
            full[list(cols)] = sol / scale[list(cols)]
            err = float(np.sqrt(np.mean((aw @ full - yw) ** 2)))
            if best is None or err < best[0] - 1e-12:
                best = (err, full)
    assert best is not None  # a single non-negative column always exists when y > 0
    return LinearFit(tuple(names), tuple(float(c) for c in best[1]), best[0], len(y))


def interp_loglog(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Piecewise-linear interpolation in log-log space; flat below the first point, linear in x past
    the last (time grows in proportion to size at scale)."""
    pts = sorted(zip(xs, ys))
    if x <= pts[0][0]:
        return pts[0][1]
    if x >= pts[-1][0]:
        return pts[-1][1] * x / pts[-1][0]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= x <= x1:
            if x1 == x0:
                return y1
            u = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return math.exp(math.log(y0) + u * (math.log(y1) - math.log(y0)))
    return pts[-1][1]
