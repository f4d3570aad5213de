"""The expert-shape law's fit: kt-kernel's MoE time per token at several expert shapes, timed alike,
as a cost per flop plus a cost per output element (docs/cost-model.md#the-expert-shape-law). Pure.

Each routed (token, expert) pair of an expert of hidden H and intermediate I runs 6HI flops and
writes 2I + H output elements, so a forward's time per token at top-k is k (6HI a + (2I + H) b).
Fitted on shapes measured in one set of interleaved rounds (`benchmarks/bench_cpu_moe_shapes.py
--interleaved`), the ratio b / a is the kernel's cost per output element in flop-equivalents of its
own rate, the constant `kttune.spec.kt_classes.MATRIX_OUTPUT_FLOPS` holds per build and class.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

from kttune.hw.fit import LinearFit, fit_nonneg


@dataclass(frozen=True)
class ShapeSlope:
    """One expert shape's time per token (ms), the least-squares slope over its forward sizes."""

    hidden: int
    inter: int
    top_k: int
    ms_per_token: float

    @property
    def flops(self) -> float:
        return self.top_k * 6.0 * self.hidden * self.inter

    @property
    def outputs(self) -> float:
        return self.top_k * (2.0 * self.inter + self.hidden)


def slope(points: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope of (tokens, ms) points (`statistics.linear_regression`): the time per
    token past the fixed cost."""
    if len(points) < 2:
        raise ValueError("a slope needs two sizes or more")
    return statistics.linear_regression([x for x, _ in points], [y for _, y in points]).slope


def slopes_of(doc: Mapping) -> list[ShapeSlope]:
    """Per shape of a `benchmarks/bench_cpu_moe_shapes.py` results document, its time per token over
    the document's sizes; a shape with fewer than two sizes is left out."""
    out = []
    for c in doc["curves"]:
        pts = sorted((p["x"], p["t_ms"]) for p in c["points"] if p["x"] >= min(doc["tokens"]))
        if len(pts) >= 2:
            out.append(ShapeSlope(c["hidden"], c["inter"], doc["top_k"], slope(pts)))
    return out


def fit_shape_law(slopes: Sequence[ShapeSlope], with_outputs: bool = True) -> LinearFit:
    """ms per token = a x flops + b x output elements (`with_outputs`; else a x flops alone), on
    relative error with a, b >= 0 (`kttune.hw.fit.fit_nonneg`); names ("ms_per_flop",
    "ms_per_output")."""
    if with_outputs:
        return fit_nonneg(
            ("ms_per_flop", "ms_per_output"), [(s.flops, s.outputs) for s in slopes], [s.ms_per_token for s in slopes]
        )
    return fit_nonneg(("ms_per_flop",), [(s.flops,) for s in slopes], [s.ms_per_token for s in slopes])


def output_flops(slopes: Sequence[ShapeSlope]) -> float:
    """The cost per output element in flop-equivalents (b / a of `fit_shape_law`); 0 where the fit
    keeps no output term, or no flop term to measure it in."""
    a, b = fit_shape_law(slopes).coef
    return b / a if a > 0 else 0.0
