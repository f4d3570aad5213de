"""Results of a simulation: frozen dataclasses with `to_dict()` (schema in kttune.sim)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from kttune.sim.engine import Trace

QUANTILES = (50, 90, 99)


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

    def to_dict(self) -> dict:
        d = asdict(self)
        return d


def _pct(x: np.ndarray, weights: np.ndarray | None = None) -> Percentiles:
    x = x[~np.isnan(x)]
    if x.size == 0:
        return Percentiles(float("nan"), float("nan"), float("nan"), float("nan"), float("nan"))
    if weights is None:
        q = np.percentile(x, QUANTILES)
        return Percentiles(float(q[0]), float(q[1]), float(q[2]), float(x.mean()), float(x.max()))
    order = np.argsort(x)
    xs, ws = x[order], weights[order].astype(float)
    cum = np.cumsum(ws)
    total = cum[-1]
    q = [float(xs[min(len(xs) - 1, int(np.searchsorted(cum, p / 100 * total)))]) for p in QUANTILES]
    return Percentiles(q[0], q[1], q[2], float((xs * ws).sum() / total), float(xs[-1]))


def _hist(x: np.ndarray, w: np.ndarray, bins: int = 60) -> dict:
    """Every inter-token gap as a histogram on log-spaced edges (ms): gap counts per bin."""
    if x.size == 0:
        return {"edges_ms": [], "counts": []}
    lo, hi = float(x.min()), float(x.max())
    edges = np.geomspace(lo, hi * (1 + 1e-9), bins + 1) if hi > lo else np.array([lo, lo + 1e-9])
    counts, _ = np.histogram(x, bins=edges, weights=w)
    return {"edges_ms": np.round(edges, 3).tolist(), "counts": counts.astype(int).tolist()}


def summarise(name: str, tr: Trace, slo: Slo, samples: bool = False) -> ScheduleResult:
    n = len(tr.arrival_s)
    ttft = tr.first_token_s - tr.arrival_s
    ok_ttft = np.nan_to_num(ttft, nan=np.inf) <= slo.ttft_s
    ok_tbt = np.nan_to_num(tr.max_gap_ms, nan=np.inf) <= slo.tbt_ms
    gaps_w = tr.iter_decode
    has = gaps_w > 0
    tbt = _pct(tr.iter_ms[has], gaps_w[has]) if has.any() else _pct(np.array([]))
    served = int((~tr.rejected).sum())
    pp = max(1, served)
    multi = tr.output_tokens > 1
    return ScheduleResult(
        schedule=name, requests=n, rejected=int(tr.rejected.sum()),
        duration_s=float(tr.end_s - tr.arrival_s.min()) if n else 0.0,
        ttft_s=_pct(ttft), tbt_ms=tbt, max_tbt_ms=_pct(np.where(multi, tr.max_gap_ms, np.nan)),
        slo=slo, attainment=float((ok_ttft & ok_tbt).mean()), ttft_attainment=float(ok_ttft.mean()),
        tbt_attainment=float(ok_tbt.mean()),
        traffic_total=Traffic(*(a + b for a, b in zip(tr.traffic_prefill, tr.traffic_decode))),
        traffic_prefill_per_prompt=Traffic(*(a / pp for a in tr.traffic_prefill)),
        layer_loads_per_prompt=float(tr.layer_loads.sum() / pp),
        gpu_busy_s=tr.gpu_busy_ms / 1e3, cpu_busy_s=tr.cpu_busy_ms / 1e3, iterations=len(tr.iter_ms),
        mean_decode_batch=float(tr.iter_decode.mean()) if len(tr.iter_decode) else 0.0,
        longest_prefill_iteration_ms=tr.prefill_gap_max_ms,
        groups_used={str(k): v for k, v in sorted(tr.groups_used.items())},
        samples={"prompt_tokens": tr.prompt_tokens.tolist(), "ttft_s": np.round(ttft, 4).tolist(),
                 "max_tbt_ms": np.round(tr.max_gap_ms, 3).tolist(), "tbt_hist_ms": _hist(tr.iter_ms[has], gaps_w[has])}
        if samples else None,
    )
