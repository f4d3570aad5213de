"""The measurement protocol: every measured number of kttune goes through it (the path runner,
the measured search, the crossover sweep, the calibration, `kttune tune`, the benchmarks).

The public API, small on purpose (docs/measured-search.md#the-measurement-protocol):

- `Protocol(repeats=3, confidence=0.95, seed=0)`: how items are measured.
- `measure_rounds(items, sample, protocol, warm=..., flag=...)` -> `RoundsResult` with one
  `Estimate` per item: warm-up before an item's first timed sample, repeats in interleaved rounds
  (shuffled per round), outliers re-measured and recorded with their reason.
- `race(items, sample, protocol, cost=...)` -> `RaceResult`: finalists re-measured round by round,
  the slower beyond noise eliminated, a tie within noise won by the cheaper item.
- `estimate(samples)` -> `Estimate` (median, interval, CV, outliers); `compare(a, b)` ->
  `Comparison` (ratio b/a with its interval, paired by round); `crossing(xs, ratios)` -> `Crossing`;
  `check_crossing(predicted, sizes, interval)` -> `CrossingCheck` (a predicted crossover judged
  against the measured one: inside its interval or within `CROSSOVER_TOLERANCE`);
  `trend(values)` -> `Trend` (a robust per-step slope: memory across configurations).

Pure (numpy/scipy, no torch): the model core may use it; what measures is always the caller's
`sample` callable.
"""

from kttune.protocol.race import RaceEntry, RaceResult, race
from kttune.protocol.rounds import Protocol, RoundsResult, Samples, measure_rounds, prompt_seed
from kttune.protocol.stats import (
    Comparison,
    Crossing,
    CrossingCheck,
    Estimate,
    Outlier,
    Trend,
    check_crossing,
    compare,
    crossing,
    estimate,
    outliers_of,
    trend,
)

__all__ = [
    "Comparison",
    "Crossing",
    "CrossingCheck",
    "Estimate",
    "Outlier",
    "Protocol",
    "RaceEntry",
    "RaceResult",
    "RoundsResult",
    "Samples",
    "Trend",
    "check_crossing",
    "compare",
    "crossing",
    "estimate",
    "measure_rounds",
    "outliers_of",
    "prompt_seed",
    "race",
    "trend",
]
