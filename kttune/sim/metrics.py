"""Results of a simulation: frozen dataclasses with `to_dict()` (schema in kttune.sim), computed
online by `Summary`, the engine's bounded-memory sink.

Exact at any size: request and rejection counts, SLO attainment (the limits are known before the
run, so each request is counted as it finishes), means, maxima, traffic, busy time, iterations.
Percentiles of TTFT, of every gap between tokens and of each request's longest gap come from
kttune.sim.quantiles.Distribution: numpy's on the full list up to EXACT_LIMIT values, within
RELATIVE_ACCURACY (0.1%) beyond. `--samples` keeps a uniform reservoir of SAMPLE_LIMIT requests
(every request of a shorter run).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from kttune.sim.engine import RunTotals
from kttune.sim.quantiles import EXACT_LIMIT, GAP_EXACT_LIMIT, Distribution, Reservoir

QUANTILES = (50, 90, 99)
SAMPLE_LIMIT = 10_000  # requests kept for --samples


@dataclass(frozen=True)
class Slo:
    ttft_s: float
    tbt_ms: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Percentiles:
    p50: float
    p90: float
    p99: float
    mean: float
    max: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Traffic:
    """Expert-weight bytes: over PCIe (host memory -> GPU, layerwise loads), read from HBM by the
    GPU experts, read from host memory by the CPU experts and stage A."""

    pcie_bytes: float
    hbm_bytes: float
    host_read_bytes: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ScheduleResult:
    schedule: str
    requests: int
    rejected: int
    duration_s: float  # first arrival to last finish
    ttft_s: Percentiles
    tbt_ms: Percentiles  # every inter-token gap, each weighted once
    max_tbt_ms: Percentiles  # per request, its longest gap
    slo: Slo
    attainment: float  # share of requests with TTFT <= SLO and every gap <= SLO
    ttft_attainment: float
    tbt_attainment: float
    traffic_total: Traffic  # prefill and decode together
    traffic_prefill_per_prompt: Traffic
    layer_loads_per_prompt: float  # layerwise MoE-layer loads per prompt (0 without layerwise)
    gpu_busy_s: float
    cpu_busy_s: float
    iterations: int
    mean_decode_batch: float
    longest_prefill_iteration_ms: float
    groups_used: dict[str, int]  # layered: G -> stages
    samples: dict | None = None  # per request: ttft_s, max_tbt_ms, prompt_tokens (for plots)
    quantiles_exact: bool = True  # False: percentiles within `quantile_relative_error` of the exact ones
    quantile_relative_error: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def _percentiles(d: Distribution) -> Percentiles:
    if d.count() == 0:
        return Percentiles(math.nan, math.nan, math.nan, math.nan, math.nan)
    q = d.percentiles(QUANTILES)
    return Percentiles(q[0], q[1], q[2], d.mean(), d.max())


def _weighted_percentiles(d: Distribution) -> Percentiles:
    if d.count() == 0:
        return Percentiles(math.nan, math.nan, math.nan, math.nan, math.nan)
    q = d.weighted_quantiles(QUANTILES)
    return Percentiles(q[0], q[1], q[2], d.mean(), d.max())


class Summary:
    """The engine's sink (kttune.sim.engine.Sink) that keeps bounded state and gives the
    ScheduleResult; `ttft` and `max_gap` also answer "the limit q% of requests meet"
    (Distribution.higher: rejected requests count as never served)."""

    def __init__(
        self,
        slo: Slo,
        samples: bool = False,
        exact_limit: int = EXACT_LIMIT,
        sample_limit: int = SAMPLE_LIMIT,
        gap_exact_limit: int = GAP_EXACT_LIMIT,
    ) -> None:
        self.slo = slo
        self.ttft = Distribution(exact_limit=exact_limit)  # served requests, s; rejected as +inf
        self.max_gap = Distribution(
            exact_limit=exact_limit
        )  # requests of 2+ tokens, ms; 1 token as 0, rejected as +inf
        self.gaps = Distribution(
            weighted=True, exact_limit=gap_exact_limit
        )  # every iteration with decode, weighted by it
        self.requests = self.rejected_count = 0
        self.ok_both = self.ok_ttft = self.ok_tbt = 0
        self.layer_loads = 0.0
        self.iterations = 0
        self.decode_tokens = 0
        self.reservoir = Reservoir(sample_limit) if samples else None
        self.totals: RunTotals | None = None

    # ---- Sink --------------------------------------------------------------------------------------
    def request(self, rid, arrival_s, prompt, output, first_token_s, finish_s, max_gap_ms, layer_loads) -> None:
        ttft = first_token_s - arrival_s
        self.requests += 1
        self.ttft.add_run(ttft, 0.0, 1)
        if output > 1:
            self.max_gap.add_run(max_gap_ms, 0.0, 1)
        else:
            self.max_gap.zeros += 1
        a = ttft <= self.slo.ttft_s
        b = max_gap_ms <= self.slo.tbt_ms
        self.ok_ttft += a
        self.ok_tbt += b
        self.ok_both += a and b
        self.layer_loads += layer_loads
        if self.reservoir is not None:
            self.reservoir.add((rid, prompt, ttft, max_gap_ms))

    def rejected(self, rid, arrival_s, prompt, output) -> None:
        self.requests += 1
        self.rejected_count += 1
        self.ttft.infs += 1
        self.max_gap.infs += 1
        if self.reservoir is not None:
            self.reservoir.add((rid, prompt, math.nan, math.nan))

    def iteration(self, ms, decode, prefill) -> None:
        self.iterations += 1
        if decode > 0:
            self.decode_tokens += decode
            self.gaps.add_run(ms, 0.0, 1, decode)

    def decode_run(self, first_ms, step_ms, count, decode) -> None:
        self.iterations += count
        self.decode_tokens += decode * count
        self.gaps.add_run(first_ms, step_ms, count, decode)

    def close(self, totals: RunTotals) -> None:
        self.totals = totals

    # ---- results -----------------------------------------------------------------------------------
    @property
    def attainment(self) -> float:
        return self.ok_both / self.requests if self.requests else math.nan

    def result(self, name: str) -> ScheduleResult:
        tr, n = self.totals, self.requests
        served = n - self.rejected_count
        pp = max(1, served)
        exact = self.ttft.exact and self.max_gap.exact and self.gaps.exact
        return ScheduleResult(
            schedule=name,
            requests=n,
            rejected=self.rejected_count,
            duration_s=float(tr.end_s - tr.first_arrival_s) if n else 0.0,
            ttft_s=_percentiles(self.ttft),
            tbt_ms=_weighted_percentiles(self.gaps),
            max_tbt_ms=_percentiles(self.max_gap),
            slo=self.slo,
            attainment=self.attainment,
            ttft_attainment=self.ok_ttft / n if n else math.nan,
            tbt_attainment=self.ok_tbt / n if n else math.nan,
            traffic_total=Traffic(*(a + b for a, b in zip(tr.traffic_prefill, tr.traffic_decode))),
            traffic_prefill_per_prompt=Traffic(*(a / pp for a in tr.traffic_prefill)),
            layer_loads_per_prompt=self.layer_loads / pp,
            gpu_busy_s=tr.gpu_busy_ms / 1e3,
            cpu_busy_s=tr.cpu_busy_ms / 1e3,
            iterations=tr.iterations,
            mean_decode_batch=self.decode_tokens / self.iterations if self.iterations else 0.0,
            longest_prefill_iteration_ms=tr.prefill_gap_max_ms,
            groups_used={str(k): v for k, v in sorted(tr.groups_used.items())},
            samples=self._samples() if self.reservoir is not None else None,
            quantiles_exact=exact,
            quantile_relative_error=0.0 if exact else self.ttft.accuracy,
        )

    def _samples(self) -> dict:
        items = sorted(self.reservoir.items)
        h = self.gaps.histogram()
        hist = (
            {"edges_ms": np.round(h["edges"], 3).tolist(), "counts": h["counts"].astype(int).tolist()}
            if len(h["edges"])
            else {"edges_ms": [], "counts": []}
        )
        cols = list(zip(*items)) if items else [(), (), (), ()]
        return {
            "prompt_tokens": list(cols[1]),
            "ttft_s": np.round(np.array(cols[2], dtype=float), 4).tolist(),
            "max_tbt_ms": np.round(np.array(cols[3], dtype=float), 3).tolist(),
            "tbt_hist_ms": hist,
            "requests_sampled": len(items),
            "of_requests": self.reservoir.seen,
        }
