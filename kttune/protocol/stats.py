"""The statistics every measured number of kttune goes through: an estimate (median and interval)
of repeated samples with its outliers named, the comparison of two such estimates, and where two
measured curves cross. Pure (numpy/scipy), no torch: the core uses it.

Timing noise is multiplicative (a run disturbed by another process takes x% longer, not x ms), so
intervals are Student-t intervals of the mean of log(samples) (a geometric mean): they are exact
under the maps timings go through (ms -> tok/s = L / ms is a reflection in log space), and a ratio
of two estimates is a difference of two log means. The point reported is the median of the kept
samples. With one sample there is no interval (low = high = the sample, `method` "single").

Outliers: a sample is an outlier when it lies more than `mads` scaled median absolute deviations
(1.4826 x MAD, the normal-consistent scale) from the median of log(samples) AND more than
`min_rel` away from the median in relative terms (so deterministic or very tight samples are not
flagged for a rounding difference), or when the caller names a reason (`flags`). An outlier is left
out of the estimate and kept in it, with its reason (`Estimate.outliers`): never silently kept or
dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

OUTLIER_MADS = 3.5  # Iglewicz and Hoaglin's cut-off for the modified z-score
OUTLIER_MIN_REL = 0.10
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Outlier:
    index: int  # position in `Estimate.samples`
    value: float
    reason: str

    def to_dict(self) -> dict:
        return {"index": self.index, "value": self.value, "reason": self.reason}


@dataclass(frozen=True)
class Estimate:
    """Repeated samples of one quantity, summarised. `samples` are all samples in measurement order
    (outliers included), `rounds` the round each was taken in (pairs two estimates' samples)."""

    median: float
    low: float  # the interval of the (geometric) mean, at `confidence`
    high: float
    n: int  # samples kept (outliers left out)
    cv: float  # coefficient of variation of the kept samples (stdev / mean, 0 below 2 samples)
    confidence: float
    samples: tuple[float, ...]
    rounds: tuple[int, ...]
    outliers: tuple[Outlier, ...] = ()
    method: str = "t-log"  # "t-log" | "single"

    @property
    def kept(self) -> tuple[float, ...]:
        bad = {o.index for o in self.outliers}
        return tuple(x for i, x in enumerate(self.samples) if i not in bad)

    @property
    def half_width_rel(self) -> float:
        """Half the interval's width relative to the median (0 without an interval)."""
        return (self.high - self.low) / 2 / self.median if self.median else 0.0

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    def map(self, fn, decreasing: bool = False) -> "Estimate":
        """The same estimate of `fn(quantity)` for a monotone `fn` (ms -> tok/s is decreasing):
        the median and the bounds map exactly; the coefficient of variation is recomputed."""
        samples = tuple(fn(x) for x in self.samples)
        lo, hi = fn(self.low), fn(self.high)
        if decreasing:
            lo, hi = hi, lo
        kept = [fn(x) for x in self.kept]
        return Estimate(
            fn(self.median),
            lo,
            hi,
            self.n,
            _cv(kept),
            self.confidence,
            samples,
            self.rounds,
            tuple(Outlier(o.index, fn(o.value), o.reason) for o in self.outliers),
            self.method,
        )

    def to_dict(self) -> dict:
        return {
            "median": self.median,
            "low": self.low,
            "high": self.high,
            "n": self.n,
            "cv": self.cv,
            "confidence": self.confidence,
            "method": self.method,
            "samples": list(self.samples),
            "rounds": list(self.rounds),
            "outliers": [o.to_dict() for o in self.outliers],
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> "Estimate":
        return cls(
            d["median"],
            d["low"],
            d["high"],
            int(d["n"]),
            d["cv"],
            d["confidence"],
            tuple(d["samples"]),
            tuple(d.get("rounds") or range(len(d["samples"]))),
            tuple(Outlier(o["index"], o["value"], o["reason"]) for o in d.get("outliers", ())),
            d.get("method", "t-log"),
        )

    def short(self, fmt: str = "{:,.0f}") -> str:
        """'1,234 [1,200-1,260]' (the interval), or '1,234 (n=1)' without one."""
        if self.method == "single" or self.n < 2:
            return fmt.format(self.median) + f" (n={self.n})"
        return fmt.format(self.median) + " [" + fmt.format(self.low) + "-" + fmt.format(self.high) + "]"


def _cv(xs: Sequence[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = sum(xs) / len(xs)
    var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
    return math.sqrt(var) / abs(m) if m else 0.0


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    k = len(s)
    return s[k // 2] if k % 2 else 0.5 * (s[k // 2 - 1] + s[k // 2])


def _t_interval(logs: Sequence[float], confidence: float) -> tuple[float, float]:
    """Student-t interval of the mean of `logs` (zero width when they are all equal)."""
    from scipy import stats

    k = len(logs)
    m = sum(logs) / k
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / (k - 1))
    if sd == 0:
        return m, m
    h = float(stats.t.ppf(0.5 + confidence / 2, k - 1)) * sd / math.sqrt(k)
    return m - h, m + h


def outliers_of(
    samples: Sequence[float], mads: float = OUTLIER_MADS, min_rel: float = OUTLIER_MIN_REL
) -> list[Outlier]:
    """The samples far from the others (see the module's rule); needs at least 3 positive samples."""
    if len(samples) < 3 or min(samples) <= 0:
        return []
    logs = [math.log(x) for x in samples]
    med = _median(logs)
    mad = _median([abs(x - med) for x in logs])
    out = []
    # the bounds hold with a hair of slack: a sample exactly on one (min_rel from the median, or mads
    # scaled MADs) is not an outlier, and the logs of scaled samples differ in their last bits
    # (x 0.25: 0.55 against 0.5 read 1.1x and a hair more), so scaling would otherwise move it across
    eps = 1e-9
    for i, (x, lx) in enumerate(zip(samples, logs)):
        dev = abs(lx - med)
        if dev <= math.log1p(min_rel) + eps:
            continue
        if mad == 0 or dev / (1.4826 * mad) > mads + eps:
            side = "above" if lx > med else "below"
            scale = f"{dev / (1.4826 * mad):.1f} scaled MADs" if mad else "all other samples equal"
            out.append(Outlier(i, x, f"{math.exp(dev) - 1:.0%} {side} the median ({scale})"))
    return out


def estimate(
    samples: Sequence[float],
    confidence: float = CONFIDENCE,
    rounds: Sequence[int] | None = None,
    flags: Mapping[int, str] | None = None,
    mads: float = OUTLIER_MADS,
    min_rel: float = OUTLIER_MIN_REL,
) -> Estimate:
    """Summarise positive samples: median and the t-interval of their log mean, outliers (the
    caller's `flags` {index: reason} first, then the MAD rule over the rest) left out and named."""
    xs = tuple(float(x) for x in samples)
    if not xs:
        raise ValueError("no samples")
    if min(xs) <= 0 or not all(math.isfinite(x) for x in xs):
        raise ValueError(f"samples must be positive and finite: {xs}")
    rs = tuple(rounds) if rounds is not None else tuple(range(len(xs)))
    named = [Outlier(i, xs[i], r) for i, r in sorted((flags or {}).items()) if 0 <= i < len(xs)]
    rest = [i for i in range(len(xs)) if i not in {o.index for o in named}]
    found = [Outlier(rest[o.index], o.value, o.reason) for o in outliers_of([xs[i] for i in rest], mads, min_rel)]
    outs = tuple(sorted(named + found, key=lambda o: o.index))
    bad = {o.index for o in outs}
    kept = [x for i, x in enumerate(xs) if i not in bad]
    if not kept:  # every sample flagged: summarise them all rather than nothing, and say so through outliers
        kept = list(xs)
    med = _median(kept)
    if len(kept) < 2:
        return Estimate(med, med, med, len(kept), 0.0, confidence, xs, rs, outs, "single")
    lo, hi = _t_interval([math.log(x) for x in kept], confidence)
    return Estimate(med, math.exp(lo), math.exp(hi), len(kept), _cv(kept), confidence, xs, rs, outs, "t-log")


@dataclass(frozen=True)
class Comparison:
    """b relative to a: the ratio b/a (geometric mean over the paired rounds, or of the two log
    means unpaired) with its interval, and what it says."""

    ratio: float
    low: float
    high: float
    confidence: float
    paired: bool
    n: int  # pairs (paired) or the smaller sample count

    @property
    def verdict(self) -> str:
        """'higher' / 'lower' when the interval excludes 1, else 'tie' (within noise)."""
        if self.low > 1.0:
            return "higher"
        if self.high < 1.0:
            return "lower"
        return "tie"

    def to_dict(self) -> dict:
        return {
            "ratio": self.ratio,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "paired": self.paired,
            "n": self.n,
            "verdict": self.verdict,
        }

    def short(self) -> str:
        if self.low == self.high:
            return f"{self.ratio:.3f}"
        return f"{self.ratio:.3f} [{self.low:.3f}-{self.high:.3f}]"


def _kept_by_round(e: Estimate) -> dict[int, float]:
    bad = {o.index for o in e.outliers}
    out: dict[int, list[float]] = {}
    for i, (x, r) in enumerate(zip(e.samples, e.rounds)):
        if i not in bad:
            out.setdefault(r, []).append(x)
    return {r: math.exp(sum(math.log(v) for v in vs) / len(vs)) for r, vs in out.items()}


def compare(a: Estimate, b: Estimate, confidence: float | None = None) -> Comparison:
    """The ratio b/a. Paired by round when both have at least two rounds in common (interleaved
    rounds: a drift that hits a round hits both alike and cancels in the ratio); else Welch's
    t-interval of the difference of the log means."""
    from scipy import stats

    conf = confidence or min(a.confidence, b.confidence)
    ra, rb = _kept_by_round(a), _kept_by_round(b)
    common = sorted(set(ra) & set(rb))
    if len(common) >= 2:
        d = [math.log(rb[r]) - math.log(ra[r]) for r in common]
        lo, hi = _t_interval(d, conf)
        m = sum(d) / len(d)
        return Comparison(math.exp(m), math.exp(lo), math.exp(hi), conf, True, len(d))
    la, lb = [math.log(x) for x in a.kept], [math.log(x) for x in b.kept]
    ma, mb = sum(la) / len(la), sum(lb) / len(lb)
    m = mb - ma
    if len(la) < 2 or len(lb) < 2:
        return Comparison(math.exp(m), 0.0, math.inf, conf, False, min(len(la), len(lb)))
    va = sum((x - ma) ** 2 for x in la) / (len(la) - 1) / len(la)
    vb = sum((x - mb) ** 2 for x in lb) / (len(lb) - 1) / len(lb)
    se = math.sqrt(va + vb)
    if se == 0:
        return Comparison(math.exp(m), math.exp(m), math.exp(m), conf, False, min(len(la), len(lb)))
    df = (va + vb) ** 2 / ((va**2 / (len(la) - 1) if va else 0) + (vb**2 / (len(lb) - 1) if vb else 0) or 1e-300)
    h = float(stats.t.ppf(0.5 + conf / 2, max(1.0, df))) * se
    return Comparison(math.exp(m), math.exp(m - h), math.exp(m + h), conf, False, min(len(la), len(lb)))


@dataclass(frozen=True)
class Crossing:
    """Where a measured ratio curve y(x) crosses 1, interpolated linearly in log x: the point from
    the ratios' point estimates, the interval from their bounds. None where it does not cross in
    the measured range (`below` / `above`: all ratios on one side)."""

    x: float | None
    low: float | None
    high: float | None
    side: str = ""  # "" when it crosses; "above" (every ratio > 1) or "below"

    def to_dict(self) -> dict:
        return {"x": self.x, "low": self.low, "high": self.high, "side": self.side}


def _first_crossing(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The smallest x where y goes from >= 1 to < 1 (or < 1 at the first point: None)."""
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if y0 >= 1.0 > y1:
            l0, l1 = math.log(x0), math.log(x1)
            g0, g1 = math.log(y0), math.log(y1)
            t = g0 / (g0 - g1) if g0 != g1 else 0.0
            return math.exp(l0 + t * (l1 - l0))
    return None


def crossing(xs: Sequence[float], ratios: Sequence[Comparison]) -> Crossing:
    """`ratios[i]` compares two paths at size `xs[i]` as (slow path / fast path at large x): e.g. the
    layerwise/hybrid time ratio, > 1 at small sizes and < 1 past the crossover. Sorted by x."""
    pts = sorted(zip(xs, ratios), key=lambda p: p[0])
    if not pts:
        return Crossing(None, None, None, "none")
    x = [p[0] for p in pts]
    mid = [p[1].ratio for p in pts]
    c = _first_crossing(x, mid)
    if c is None:
        return Crossing(None, None, None, "below" if all(y < 1 for y in mid) else "above")
    # the low curve (every ratio at its lower bound) crosses first, the high curve last
    lo = _first_crossing(x, [p[1].low for p in pts])
    hi = _first_crossing(x, [p[1].high for p in pts])
    return Crossing(c, lo if lo is not None else x[0], hi if hi is not None else x[-1])


# A predicted crossover agrees with a measured one when it is inside the measured interval or within
# this share of the measured point (the judged tolerance: docs/cost-model.md#how-far-to-trust-it).
CROSSOVER_TOLERANCE = 0.20


@dataclass(frozen=True)
class CrossingCheck:
    """A predicted crossover against a measured sweep (`check_crossing`). `measured`: the crossing
    (of the repeats' ratios where there are repeats, else of single samples), or the sweep's edge
    it lies beyond (`edge` "below": layerwise already won at the first size; "above": it never won
    up to the last); `error` |predicted - measured| / measured where it crosses inside the sweep;
    `inside`: inside the interval, or on the edge's side; `agrees`: inside, or within the tolerance
    of a crossing inside the sweep (None where the sweep measured nothing to judge)."""

    measured: float | None  # tokens, whole
    error: float | None
    inside: bool
    agrees: bool | None
    edge: str = ""

    def to_dict(self) -> dict:
        return {
            "measured": self.measured,
            "error": self.error,
            "inside": self.inside,
            "agrees": self.agrees,
            "edge": self.edge,
        }


def check_crossing(
    predicted: float | None,
    sizes: Sequence[float],
    interval: Crossing | None,
    single: float | None = None,
    tolerance: float = CROSSOVER_TOLERANCE,
) -> CrossingCheck:
    """Judge `predicted` (None: the model never has layerwise win) against a sweep over `sizes`:
    its `interval` (`crossing` of the repeats' paired ratios; None without repeats) or, without
    one, `single` (the crossing of single samples: the first size when layerwise won there
    already, None when it never won). A crossing beyond the sweep is a bound, not a point: a
    prediction agrees with it only on its side."""
    sizes = sorted(sizes)
    if interval is not None and interval.x is not None:
        meas, edge = round(interval.x), ""  # a crossover is a whole number of tokens
    elif interval is not None and interval.side in ("below", "above"):
        meas, edge = (sizes[0], "below") if interval.side == "below" else (None, "above")
    elif single is not None:
        meas, edge = single, ("below" if sizes and single == sizes[0] else "")
    else:
        meas, edge = None, ("above" if sizes else "")
    if edge == "below":
        inside = predicted is not None and predicted <= sizes[0]
        return CrossingCheck(meas, None, inside, inside, edge)
    if edge == "above":
        inside = predicted is None or predicted > sizes[-1]
        return CrossingCheck(None, None, inside, inside, edge)
    if meas is None:
        return CrossingCheck(None, None, False, None)
    if predicted is None:
        return CrossingCheck(meas, None, False, False)
    error = abs(predicted - meas) / meas
    inside = interval is not None and interval.low <= predicted <= interval.high
    return CrossingCheck(meas, error, inside, inside or error <= tolerance)


@dataclass(frozen=True)
class Trend:
    """A robust per-step trend of a series (Theil-Sen: the median of the pairwise slopes), with its
    interval: resident memory after each configuration, say. Robust to a few odd steps (one large
    allocation returned later), unlike a least-squares slope."""

    slope: float  # per step
    low: float
    high: float
    rise: float  # max(values) - values[0]
    steps: int

    def to_dict(self) -> dict:
        return {"slope": self.slope, "low": self.low, "high": self.high, "rise": self.rise, "steps": self.steps}


def trend(values: Sequence[float], confidence: float = CONFIDENCE) -> Trend:
    from scipy import stats

    ys = [float(v) for v in values]
    if len(ys) < 2:
        return Trend(0.0, 0.0, 0.0, 0.0, len(ys))
    r = stats.theilslopes(ys, list(range(len(ys))), alpha=confidence)
    return Trend(float(r[0]), float(r[2]), float(r[3]), max(ys) - ys[0], len(ys))
