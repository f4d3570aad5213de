"""The expert-shape law's fit: kt-kernel's MoE time per token at several expert shapes, timed alike,
as a cost per flop plus a cost per output element (docs/cost-model.md#the-expert-shape-law). Pure.

Each routed (token, expert) pair of an expert of hidden H and intermediate I runs 6HI flops and
writes 2I + H output elements, so a forward's time per token at top-k is k (6HI a + (2I + H) b).
Fitted on shapes measured in one set of interleaved rounds (`kttune probe`'s `cpu_moe_shape` curves,
probes/cpu_moe_shape.py; `benchmarks/bench_cpu_moe_shapes.py --interleaved`), the ratio b / a is the
kernel's cost per output element in flop-equivalents of its own rate. A profile whose probe measured
it for a (build, class) carries its own (`output_flops_for`); else the constant
`kttune.spec.kt_classes.MATRIX_OUTPUT_FLOPS` measured by the benchmark holds, and a build or class in
neither is read by flops alone.
"""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from kttune.hw.cpu_generation import cpu_generation, cpu_id_text
from kttune.hw.fit import LinearFit, fit_nonneg
from kttune.hw.profile import load_profile
from kttune.spec.kt_classes import MATRIX_OUTPUT_FLOPS_CPUS, matrix_output_flops

# Fewest shapes a set must hold for its r to be judged: with two, a two-term fit passes through both
# and no shape is left to hold out.
MIN_SHAPES = 3
# A set's r is used only where its 10th percentile over resampled rounds is above 0: where one round in
# ten or more can be read without the term, it is not shown to be there. (A first gate, r within 2x
# between those percentiles, turned away BF16 sets of the H200 box whose every resampled r predicted
# held-out models far better than flops alone: benchmarks/results/2026-12-04-computed/shape-law-probe-*.)


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


def slopes_of_curves(curves: Sequence) -> list[ShapeSlope]:
    """Per `cpu_moe_shape` curve (`kttune.hw.profile.Curve`), its time per token over its sizes; a curve
    with fewer than two sizes is left out."""
    out = []
    for c in curves:
        pts = sorted((p.x, p.t_ms) for p in c.points)
        if len(pts) >= 2:
            s = c.shape
            out.append(ShapeSlope(s.hidden, s.inter, s.top_k, slope(pts)))
    return out


def run_slopes(path: str | Path, key: tuple[str, str]) -> list[ShapeSlope]:
    """One run of the constant of `key` (build variant, class), a path of
    `kttune.spec.kt_classes.MATRIX_OUTPUT_FLOPS_RUNS`: a `bench_cpu_moe_shapes.py` results document,
    or a profile whose probe measured the class's shape set (its `cpu_moe_shape` curves of that
    build and class)."""
    path = Path(path)
    if path.name.endswith(".profile.json"):
        want = (f"kt-kernel:{key[0]}", key[1])
        curves = load_profile(path).curves_of("cpu_moe_shape")
        return slopes_of_curves([c for c in curves if (c.backend, c.params.get("kernel")) == want])
    return slopes_of(json.loads(path.read_text()))


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


def held_out_errors(slopes: Sequence[ShapeSlope], with_outputs: bool = True) -> list[float]:
    """Each shape's time per token predicted by the law fitted on the other shapes (leave one shape
    out): predicted / measured - 1, in the order of `slopes`."""
    errs = []
    for j, s in enumerate(slopes):
        coef = fit_shape_law(list(slopes[:j]) + list(slopes[j + 1 :]), with_outputs).coef
        b = coef[1] if len(coef) > 1 else 0.0
        errs.append((coef[0] * s.flops + b * s.outputs) / s.ms_per_token - 1)
    return errs


@dataclass(frozen=True)
class ShapeLawFit:
    """The law judged on one set of shapes measured alike: the fitted cost per output element, the
    evidence that it transfers (mean |error| of each law, each shape held out) and how firmly the rounds
    hold it (`r_p10`, `r_p90`: its 10th and 90th percentiles over the rounds resampled, None where the
    points carry no per-round samples). It is `kept` only where it predicts held-out shapes better than
    flops alone and its 10th percentile over resampled rounds is above 0."""

    fitted_output_flops: float
    shapes: int
    held_out_flops: float
    held_out_law: float
    r_p10: float | None = None
    r_p90: float | None = None

    @property
    def transfers(self) -> bool:
        return self.held_out_law < self.held_out_flops

    @property
    def significant(self) -> bool:
        if self.r_p10 is None:
            return True  # no rounds to resample: the held-out test alone judges
        return self.r_p10 > 0

    @property
    def kept(self) -> bool:
        return self.transfers and self.significant

    @property
    def output_flops(self) -> float:
        """The cost per output element the set supports: the fitted one where kept, else 0."""
        return self.fitted_output_flops if self.kept else 0.0

    def describe(self) -> str:
        interval = f" [{self.r_p10:,.0f}-{self.r_p90:,.0f} over rounds resampled]" if self.r_p10 is not None else ""
        if self.kept:
            verdict = f"{self.fitted_output_flops:,.0f}{interval} flop-equivalents per output element"
        elif not self.transfers:
            verdict = f"flops alone (the law's {self.fitted_output_flops:,.0f} did not predict a held-out shape better)"
        else:
            verdict = f"flops alone (the law's {self.fitted_output_flops:,.0f}{interval} is not above 0 in 9 of 10 resampled draws)"
        return (
            f"{verdict}; {self.shapes} shapes, each held out: flops alone {self.held_out_flops:.0%}, "
            f"with outputs {self.held_out_law:.0%} mean error"
        )


def judge_shape_law(slopes: Sequence[ShapeSlope], r_interval: tuple[float, float] | None = None) -> ShapeLawFit:
    """`ShapeLawFit` of `slopes` (at least `MIN_SHAPES` distinct shapes; ValueError otherwise), with the
    (10th, 90th) percentiles of r over resampled rounds where known (`resampled_output_flops`). A term
    that does not transfer across shapes, or that the rounds do not show above 0, is not applied to a
    shape nobody measured."""
    if len({(s.hidden, s.inter) for s in slopes}) < MIN_SHAPES:
        raise ValueError(f"the expert-shape law needs {MIN_SHAPES} expert shapes or more, got {len(slopes)}")
    flops = [abs(e) for e in held_out_errors(slopes, with_outputs=False)]
    law = [abs(e) for e in held_out_errors(slopes, with_outputs=True)]
    lo, hi = r_interval if r_interval is not None else (None, None)
    return ShapeLawFit(output_flops(slopes), len(slopes), sum(flops) / len(flops), sum(law) / len(law), lo, hi)


def resampled_output_flops(curves: Sequence, draws: int = 200, seed: int = 0) -> tuple[float, float] | None:
    """The (10th, 90th) percentiles of r over the set's rounds resampled with replacement (every point's
    per-round samples, `Point.extra["samples_ms"]`, drawn at the same round indices, so a round's drift
    stays shared by its shapes); None where the points carry no equal-length samples."""
    samples = [[p.extra.get("samples_ms") for p in c.points] for c in curves]
    counts = {len(s) for per in samples for s in per if s}
    if any(not s for per in samples for s in per) or len(counts) != 1:
        return None
    rounds = counts.pop()
    rng = random.Random(seed)
    rs = []
    for _ in range(draws):
        idx = [rng.randrange(rounds) for _ in range(rounds)]
        slopes = []
        for c, per in zip(curves, samples):
            pts = [(p.x, statistics.median(s[i] for i in idx)) for p, s in zip(c.points, per)]
            slopes.append(ShapeSlope(c.shape.hidden, c.shape.inter, c.shape.top_k, slope(pts)))
        # a draw whose slope is not positive somewhere is noise there: no evidence of the term
        rs.append(output_flops(slopes) if all(sl.ms_per_token > 0 for sl in slopes) else 0.0)
    q = statistics.quantiles(rs, n=10, method="inclusive")
    return q[0], q[-1]


def shape_set_key(c) -> tuple:
    """The set a `cpu_moe_shape` curve belongs to: one kt-kernel build, class, method and thread count,
    timed in shared rounds (what `measured_shape_law` judges together, `kttune profile show` prints as
    one table and a re-probe replaces whole)."""
    return (c.backend, c.params.get("kernel"), c.params.get("method"), c.params.get("threads"))


def measured_shape_law(curves: Sequence, backend: str, kernel: str) -> ShapeLawFit | None:
    """The law judged on a profile's `cpu_moe_shape` curves of kt-kernel build `backend` and class
    `kernel` (the set, `shape_set_key`, that measured the most shapes; the larger thread count on a
    tie); None where fewer than `MIN_SHAPES` shapes were measured. Curves `kttune profile derive`
    carried to another ISA name no kt-kernel build and match none."""
    sets: dict[tuple, list] = {}
    for c in curves:
        if c.kind == "cpu_moe_shape" and c.backend == backend and c.params.get("kernel") == kernel:
            sets.setdefault(shape_set_key(c), []).append(c)
    best = max(sets.items(), key=lambda kv: (len(kv[1]), int(kv[0][3] or 0)), default=None)
    if best is None:
        return None
    # a shape whose time does not grow with its sizes was timed in the noise: not read
    read = [(c, sl) for c in best[1] for sl in slopes_of_curves([c]) if sl.ms_per_token > 0]
    slopes = [sl for _, sl in read]
    if len({(s.hidden, s.inter) for s in slopes}) < MIN_SHAPES:
        return None
    return judge_shape_law(slopes, resampled_output_flops([c for c, _ in read]))


def constants_measured_elsewhere(backend: str | None, cpu) -> tuple[str, str] | None:
    """Where the build `backend`'s ("kt-kernel:<variant>") shape-law constants were measured and what
    this CPU (`kttune.hw.profile.CpuInfo`) is, both as words, where the CPU is another generation than
    every one they were measured on (`MATRIX_OUTPUT_FLOPS_CPUS`; docs/probe.md#one-name-two-cpus);
    None where it is one of them, or either is unknown."""
    measured_on = MATRIX_OUTPUT_FLOPS_CPUS.get((backend or "").split(":", 1)[-1], ())
    if not measured_on or cpu.family is None or cpu.model_number is None:
        return None
    if (cpu.vendor, cpu.family, cpu.model_number) in measured_on:
        return None
    where = ", ".join(cpu_generation(*c) or f"family {c[1]} model {c[2]}" for c in measured_on)
    return where, cpu_id_text(cpu.vendor, cpu.family, cpu.model_number, None)


def shape_law_probe_advice(backend: str | None, cpu) -> str | None:
    """What a probe that did not measure the expert-shape law says on a CPU its build's constants were
    not measured on (`constants_measured_elsewhere`): the constant r may not hold here."""
    got = constants_measured_elsewhere(backend, cpu)
    if got is None:
        return None
    where, here = got
    return (
        f"expert-shape law: kt-kernel {backend.split(':', 1)[-1]}'s constants (r) were measured on {where}, this CPU "
        f"is {here}; `kttune probe --shape-law` measures r here (a few minutes more), `kttune probe --model X` a "
        "model's own layer (docs/probe.md#one-name-two-cpus)"
    )


# How `output_flops_for`'s source begins where the profile's own shape-law set gave r.
MEASURED_BY_PROBE = "measured by this profile's probe"


def output_flops_for(curves: Sequence, backend: str | None, kernel: str | None) -> tuple[float, str]:
    """kt-kernel's cost per output element (flop-equivalents) for the class `kernel` of the build named
    by `backend` ("kt-kernel:<variant>"), and where it comes from: the profile's own `cpu_moe_shape`
    curves where its probe measured the class (`measured_shape_law`), else the constant measured by
    `benchmarks/bench_cpu_moe_shapes.py` (`kttune.spec.kt_classes.MATRIX_OUTPUT_FLOPS`), else 0
    (flops alone)."""
    if not backend or not kernel or not backend.startswith("kt-kernel:"):
        return 0.0, "not a kt-kernel build this project measured: flops alone"
    fit = measured_shape_law(curves, backend, kernel)
    if fit is not None and fit.kept:
        return fit.output_flops, f"{MEASURED_BY_PROBE}: {fit.describe()}"
    probe = f"; this profile's probe: {fit.describe()}" if fit is not None else ""
    r = matrix_output_flops(backend, kernel)
    build = f"kt-kernel {backend.split(':', 1)[1]} {kernel}"
    if r:
        return r, f"{build}'s constant {r:,.0f} (benchmarks/bench_cpu_moe_shapes.py){probe}"
    return 0.0, f"{build}: flops alone{probe or ' (not measured)'}"
