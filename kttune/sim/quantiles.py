"""Streaming statistics for the simulator and the workload loader, in bounded memory.

`Distribution` (float values, optionally weighted: TTFT, gaps between tokens) keeps every value
until `exact_limit` of them have been added, so every quantile of a small run is what numpy gives on
the full list. Past the limit the values are folded into a fixed-size histogram of logarithmic
buckets, the mapping of DDSketch (Masson, Rim & Lee, "DDSketch: a fast and fully-mergeable quantile
sketch with relative-error guarantees", VLDB 2019): bucket i holds the values in
(gamma^(i-1), gamma^i], gamma = (1 + a) / (1 - a), and stands for 2 gamma^i / (gamma + 1), which is
within a relative error `a` of every value in it. Counts stay exact, so a quantile read from the
histogram is within a relative `a` (RELATIVE_ACCURACY, 0.1%) of the exact one; a percentile by
linear interpolation is within `a` of the interpolated value. Counts, weights, sums, means, minimum
and maximum are exact in both modes (sums up to float rounding). Buckets span 1e-9 .. 1e15 in the
caller's unit (values outside fall in the end buckets; the minimum and maximum stay exact); zeros and
+inf are counted apart.

Why not a library sketch: ddsketch (pure Python) and datasketches' KLL take one value per call, and
the gap stream is every iteration of a run weighted by its decode batch, 10^8 and more values in a
long run: the histogram takes numpy arrays of them at once (np.bincount).

`LengthCounts` holds integer lengths (prompt and output tokens) exactly, as sorted distinct values
with counts: memory grows with the distinct lengths, not the requests, so a trace or a sample list
of any size gives exact statistics and exact quantile bins (`quantile_bins`).

`Reservoir` keeps a uniform random sample of at most k items of a stream (Vitter's algorithm R),
all of them when the stream is shorter.
"""

from __future__ import annotations

import math
import random

import numpy as np

RELATIVE_ACCURACY = 1e-3
EXACT_LIMIT = 1 << 20  # values kept exactly before the histogram takes over (per-request metrics)
GAP_EXACT_LIMIT = 1 << 21  # the same for the gaps between tokens (held as runs, 32 bytes per run)
_LO, _HI = 1e-9, 1e15
_FOLD = 1 << 16  # values held past the exact limit before they are folded into the histogram
_COMPACT = 1 << 12  # runs buffered as Python floats before they become arrays


class Distribution:
    """Positive finite values (each with a weight when `weighted`), plus counts of zeros and +inf.
    Values come one at a time (`add`) or as arithmetic runs (`add_run`: a, a + step, ...), the
    form a stretch of decode-only iterations takes; both are kept in arrival order."""

    def __init__(
        self, weighted: bool = False, exact_limit: int = EXACT_LIMIT, accuracy: float = RELATIVE_ACCURACY
    ) -> None:
        if not 0 < accuracy < 1:
            raise ValueError(f"accuracy {accuracy} outside (0, 1)")
        self.weighted, self.exact_limit, self.accuracy = weighted, exact_limit, accuracy
        self.gamma = (1 + accuracy) / (1 - accuracy)
        self._log_gamma = math.log(self.gamma)
        self._offset = math.ceil(math.log(_LO) / self._log_gamma)
        self._size = math.ceil(math.log(_HI) / self._log_gamma) - self._offset + 1
        self._buf: list[tuple[float, float, int, float]] = []  # runs not yet in arrays: first, step, count, weight
        self._values: tuple | None = None  # the held values, materialised for the queries (exact mode)
        self._runs: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # compacted runs
        self._held = 0  # values in runs (compacted or not)
        self._hist: np.ndarray | None = None  # bucket weights once past exact_limit
        self._n = 0  # values folded into the histogram
        self._weight = self._sum = 0.0
        self._min, self._max = math.inf, -math.inf
        self.zeros = 0
        self.infs = 0

    # ---- adding ---------------------------------------------------------------------------------
    def add(self, x: float, w: float = 1.0) -> None:
        self.add_run(x, 0.0, 1, w)

    def add_run(self, first: float, step: float, count: int, w: float = 1.0) -> None:
        """`count` values first + step x j (j = 0, 1, ...), each of weight w."""
        self._values = None
        self._buf.append((first, step, count, w))
        self._held += count
        if len(self._buf) >= _COMPACT or self._held > (self.exact_limit if self._hist is None else _FOLD):
            self._compact()
            if self._hist is not None or self._held > self.exact_limit:
                self._fold()

    def _compact(self) -> None:
        if self._buf:
            b = np.array(self._buf, dtype=float)
            self._runs.append((b[:, 0].copy(), b[:, 1].copy(), b[:, 2].astype(np.int64), b[:, 3].copy()))
            self._buf = []

    def _fold(self) -> None:
        """Move every held value into the histogram (the switch to bounded memory), a slice of at
        most _FOLD values at a time."""
        self._compact()
        self._values = None
        runs, self._runs, self._held = self._runs, [], 0
        if self._hist is None:
            self._hist = np.zeros(self._size)
        for xs, ws in _materialise(runs, self.weighted, limit=_FOLD):
            self._n += xs.size
            self._weight += float(ws.sum()) if ws is not None else float(xs.size)
            self._sum += float((xs * ws).sum()) if ws is not None else float(xs.sum())
            self._min, self._max = min(self._min, float(xs.min())), max(self._max, float(xs.max()))
            idx = np.clip(
                np.ceil(np.log(np.maximum(xs, _LO)) / self._log_gamma).astype(np.int64) - self._offset,
                0,
                self._size - 1,
            )
            self._hist += np.bincount(idx, weights=ws, minlength=self._size)

    def _held_values(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Every held value (and weight), in the order added (exact mode)."""
        if self._values is None:
            self._values = self._materialise_held()
        return self._values

    def _materialise_held(self) -> tuple[np.ndarray, np.ndarray | None]:
        self._compact()
        if len(self._runs) > 1:
            self._runs = [tuple(np.concatenate([r[i] for r in self._runs]) for i in range(4))]
        parts = list(_materialise(self._runs, self.weighted, limit=None))
        if not parts:
            return np.zeros(0), (np.zeros(0) if self.weighted else None)
        return parts[0]

    # ---- reading --------------------------------------------------------------------------------
    @property
    def exact(self) -> bool:
        """True while every value is kept (the quantiles are numpy's on the full list)."""
        return self._hist is None

    def _sketch(self) -> None:
        if self._hist is not None and self._held:
            self._fold()

    def count(self) -> int:
        """Positive finite values added."""
        return self._n + self._held

    def _stats(self) -> tuple[float, float, float, float]:
        """(total weight, weighted sum, min, max) of the positive finite values."""
        if self.exact:
            xs, ws = self._held_values()
            if xs.size == 0:
                return 0.0, 0.0, math.inf, -math.inf
            if ws is None:
                return float(xs.size), float(xs.sum()), float(xs.min()), float(xs.max())
            return float(ws.sum()), float((xs * ws).sum()), float(xs.min()), float(xs.max())
        self._sketch()
        return self._weight, self._sum, self._min, self._max

    def mean(self) -> float:
        """The (weighted) mean; exact mode sums a weighted one in increasing order of value."""
        if self.exact:
            xs, ws = self._held_values()
            if xs.size == 0:
                return math.nan
            if ws is None:
                return float(xs.mean())
            order = np.argsort(xs)
            return float((xs[order] * ws[order]).sum() / np.cumsum(ws[order])[-1])
        w, s, _, _ = self._stats()
        return s / w if w > 0 else math.nan

    def max(self) -> float:
        _, _, _, hi = self._stats()
        return hi if hi > -math.inf else math.nan

    def min(self) -> float:
        _, _, lo, _ = self._stats()
        return lo if lo < math.inf else math.nan

    def _buckets(self) -> tuple[np.ndarray, np.ndarray]:
        """(representative values, weights) of the non-empty buckets, in increasing order, the
        representatives clamped to the exact minimum and maximum."""
        self._sketch()
        nz = np.nonzero(self._hist)[0]
        reps = 2.0 * np.exp((nz + self._offset) * self._log_gamma) / (self.gamma + 1.0)
        return np.clip(reps, self._min, self._max), self._hist[nz]

    def percentiles(self, qs) -> list[float]:
        """Percentiles (0..100) of the positive finite values by linear interpolation between order
        statistics (numpy's default); unweighted distributions only."""
        if self.weighted:
            raise ValueError("linear percentiles of a weighted distribution")
        n = self.count()
        if n == 0:
            return [math.nan for _ in qs]
        if self.exact:
            xs, _ = self._held_values()
            return [float(v) for v in np.percentile(xs, list(qs))]
        reps, counts = self._buckets()
        cum = np.cumsum(counts)

        def order_stat(k: int) -> float:  # the k-th smallest (0-based)
            return float(reps[int(np.searchsorted(cum, k + 1, side="left"))])

        out = []
        for q in qs:
            r = q / 100.0 * (n - 1)
            lo, hi = math.floor(r), math.ceil(r)
            a, b = order_stat(lo), order_stat(hi)
            out.append(a + (r - lo) * (b - a))
        return out

    def weighted_quantiles(self, qs) -> list[float]:
        """For each percentile q (0..100) the smallest value whose cumulative weight reaches q% of
        the total (for gaps weighted by the requests that wait them: the gap q% of all gaps are at most)."""
        if self.count() == 0:
            return [math.nan for _ in qs]
        if self.exact:
            xs, ws = self._held_values()
            order = np.argsort(xs)
            xs = xs[order]
            ws = ws[order] if ws is not None else np.ones(xs.size)
            cum = np.cumsum(ws)
        else:
            xs, ws = self._buckets()
            cum = np.cumsum(ws)
        total = cum[-1]
        return [float(xs[min(len(xs) - 1, int(np.searchsorted(cum, q / 100 * total)))]) for q in qs]

    def higher(self, q: float) -> float:
        """numpy's percentile(q, method="higher") over every value added, zeros and +inf included:
        the limit that q% of them are within."""
        n_pos = self.count()
        n = self.zeros + n_pos + self.infs
        if n == 0:
            return math.nan
        k = math.ceil(q / 100.0 * (n - 1))
        if self.exact:
            xs, _ = self._held_values()
            full = np.concatenate([np.zeros(self.zeros), xs, np.full(self.infs, np.inf)])
            return float(np.percentile(full, q, method="higher"))
        if k < self.zeros:
            return 0.0
        if k >= self.zeros + n_pos:
            return math.inf
        reps, counts = self._buckets()
        return float(reps[int(np.searchsorted(np.cumsum(counts), k - self.zeros + 1, side="left"))])

    def histogram(self, bins: int = 60) -> dict:
        """Every value's weight on `bins` log-spaced bins from the minimum to the maximum:
        {edges: [bins + 1], counts: [bins]} (from the buckets' representatives once past the exact limit)."""
        if self.count() == 0:
            return {"edges": [], "counts": []}
        if self.exact:
            xs, ws = self._held_values()
        else:
            xs, ws = self._buckets()
        lo, hi = float(xs.min()), float(xs.max())
        edges = np.geomspace(lo, hi * (1 + 1e-9), bins + 1) if hi > lo else np.array([lo, lo + 1e-9])
        counts, _ = np.histogram(xs, bins=edges, weights=ws)
        return {"edges": edges, "counts": counts}


def _materialise(runs, weighted: bool, limit: int | None):
    """The values (and weights) of compacted runs, as arrays of at most `limit` values (None: one)."""
    for a, st, n, w in runs:
        if a.size == 0:
            continue
        total = int(n.sum())
        if limit is None or total <= limit:
            yield _expand(a, st, n, w, weighted)
            continue
        # long runs: cut into slices of whole runs, or of one long run
        i = 0
        while i < a.size:
            j, acc = i, 0
            while j < a.size and (acc + n[j] <= limit or j == i):
                acc += int(n[j])
                j += 1
            if j == i + 1 and n[i] > limit:
                for off in range(0, int(n[i]), limit):
                    k = np.arange(off, min(int(n[i]), off + limit), dtype=float)
                    xs = a[i] + st[i] * k
                    yield xs, (np.full(xs.size, w[i]) if weighted else None)
            else:
                yield _expand(a[i:j], st[i:j], n[i:j], w[i:j], weighted)
            i = j


def _expand(a, st, n, w, weighted: bool):
    starts = np.cumsum(n) - n
    j = (np.arange(int(n.sum())) - np.repeat(starts, n)).astype(float)
    xs = np.repeat(a, n) + np.repeat(st, n) * j
    return xs, (np.repeat(w, n) if weighted else None)


class LengthCounts:
    """Exact counts of whole-number lengths: sorted distinct values and their counts (or weights)."""

    def __init__(self) -> None:
        self.values = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=float)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []  # (distinct values, their counts) per add
        self._cum: np.ndarray | None = None

    def add(self, xs: np.ndarray, weights: np.ndarray | None = None) -> None:
        xs = np.asarray(xs, dtype=np.int64)
        if xs.size == 0:
            return
        if weights is None:
            v, c = np.unique(xs, return_counts=True)
            c = c.astype(float)
        else:
            v, inv = np.unique(xs, return_inverse=True)
            c = np.bincount(inv.ravel(), weights=np.asarray(weights, dtype=float), minlength=v.size)
        self._pending.append((v, c))
        self._cum = None
        if len(self._pending) >= 64:
            self._merge()

    def _merge(self) -> None:
        if not self._pending:
            return
        v = np.concatenate([self.values, *(p[0] for p in self._pending)])
        w = np.concatenate([self.counts, *(p[1] for p in self._pending)])
        self._pending = []
        uv, inv = np.unique(v, return_inverse=True)
        self.values, self.counts = uv, np.bincount(inv.ravel(), weights=w, minlength=uv.size)
        self._cum = None

    def total(self) -> float:
        self._merge()
        return float(self.counts.sum())

    def mean(self) -> float:
        self._merge()
        return float((self.values * self.counts).sum() / self.counts.sum())

    def max(self) -> int:
        self._merge()
        return int(self.values[-1])

    def min(self) -> int:
        self._merge()
        return int(self.values[0])

    def at(self, position: float) -> int:
        """The length at a position of the sorted list (0-based; a whole count of copies occupies
        positions c .. c + count): the one whose range holds `position`."""
        self._merge()
        if self._cum is None:
            self._cum = np.cumsum(self.counts)
        return int(self.values[min(self.values.size - 1, int(np.searchsorted(self._cum, position, side="right")))])

    def share(self, q: float) -> int:
        """The length at share q (0..1) of the sorted list: element int(q n) of n whole counts
        (the last one at most), the one holding position q W of a total weight W otherwise."""
        n = self.total()
        if self.whole():
            return self.at(min(n - 1, math.floor(q * n)))
        return self.at(q * n)

    def whole(self) -> bool:
        self._merge()
        return bool(np.all(self.counts == np.round(self.counts)))

    def statistics(self) -> dict:
        """{mean, p50, p90, max}: p50 and p90 at shares 0.5 and 0.9 (`share`)."""
        return {"mean": self.mean(), "p50": self.share(0.5), "p90": self.share(0.9), "max": self.max()}


def quantile_bins(counts: LengthCounts, bins: int = 12) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """At most `bins` representative lengths with their shares: with `bins` or fewer distinct
    lengths, each length and its share; otherwise the sorted list (total weight W) cut into `bins`
    equal ranges of position [b W / bins, (b + 1) W / bins) (whole positions when W is a whole count,
    the element index ranges of a sorted list), each range standing for its middle element with the
    range's share. Equal representatives are merged. For a log-normal distribution the same rule
    gives its quantiles at (b + 1/2) / bins."""
    total = counts.total()
    if total <= 0:
        raise ValueError("no lengths")
    if counts.values.size <= bins:
        return tuple(int(v) for v in counts.values), tuple(float(c / total) for c in counts.counts)
    whole = counts.whole()
    reps: dict[int, float] = {}
    for b in range(bins):
        if whole:
            lo, hi = b * int(total) // bins, (b + 1) * int(total) // bins
        else:
            lo, hi = b * total / bins, (b + 1) * total / bins
        if hi <= lo:
            continue
        mid = lo + (hi - lo) // 2 if whole else lo + (hi - lo) / 2
        v = counts.at(mid)
        reps[v] = reps.get(v, 0.0) + (hi - lo) / total
    return tuple(reps), tuple(reps.values())


class Reservoir:
    """A uniform sample of at most `k` items of a stream (algorithm R, seeded): every item while
    the stream is no longer than k."""

    def __init__(self, k: int, seed: int = 0) -> None:
        self.k, self.seen, self.items = k, 0, []
        self._rng = random.Random(seed)

    def add(self, item) -> None:
        if self.seen < self.k:
            self.items.append(item)
        else:
            j = self._rng.randrange(self.seen + 1)
            if j < self.k:
                self.items[j] = item
        self.seen += 1
