"""SLO-aware scoring of one configuration: serve the workload at a given arrival rate in simulation
(kttune.sim, token-chunked prefill with KT's path switch, as sglang-kt runs) and check that at
least 90% of requests meet the TTFT and TBT limits (a request passes when its TTFT and every gap
between its tokens are within them). When a limit is missed, say by how much: the limit that 90% of
requests would meet, against the one asked for."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kttune.config import LaunchConfig
from kttune.errors import InfeasibleError
from kttune.cost.components import Components
from kttune.sim import engine
from kttune.sim.costs import IterationCosts
from kttune.sim.metrics import Slo
from kttune.sim.simulate import summarise_run
from kttune.sim.workload import Request, requests_from_workload
from kttune.search.workload import Workload


@dataclass(frozen=True)
class SloTarget:
    rate_per_s: float
    ttft_s: float | None = None  # None: no TTFT limit
    tbt_ms: float | None = None  # None: no TBT limit
    target_attainment: float = 0.9
    requests: int = 200  # simulated per configuration
    seed: int = 0

    @property
    def slo(self) -> Slo:
        return Slo(
            ttft_s=self.ttft_s if self.ttft_s is not None else math.inf,
            tbt_ms=self.tbt_ms if self.tbt_ms is not None else math.inf,
        )

    def describe(self) -> str:
        parts = ([f"TTFT <= {self.ttft_s:g} s"] if self.ttft_s is not None else []) + (
            [f"every gap <= {self.tbt_ms:g} ms"] if self.tbt_ms is not None else []
        )
        return f"{' and '.join(parts)} for {self.target_attainment:.0%} of requests at {self.rate_per_s:g} req/s"

    def to_dict(self) -> dict:
        return {
            "rate_per_s": self.rate_per_s,
            "ttft_s": self.ttft_s,
            "tbt_ms": self.tbt_ms,
            "target_attainment": self.target_attainment,
            "requests": self.requests,
            "seed": self.seed,
        }


@dataclass(frozen=True)
class SloCheck:
    attainment: float
    ttft_attainment: float
    tbt_attainment: float
    ttft_needed_s: float  # the TTFT limit the target share of requests meets
    tbt_needed_ms: float  # the TBT limit the target share of requests meets (longest gap per request)
    target: SloTarget

    @property
    def met(self) -> bool:
        return self.attainment >= self.target.target_attainment

    @property
    def constraint(self) -> float:
        """<= 0 when met (Optuna's convention)."""
        return self.target.target_attainment - self.attainment

    def shortfalls(self) -> list[str]:
        """Each limit missed, with what the target share of requests would need."""
        out, t = [], self.target
        if t.ttft_s is not None and self.ttft_needed_s > t.ttft_s:
            out.append(
                f"TTFT: {t.target_attainment:.0%} of requests need {_s(self.ttft_needed_s)}, the limit is {t.ttft_s:g} s "
                f"({_s(self.ttft_needed_s - t.ttft_s)} over)"
            )
        if t.tbt_ms is not None and self.tbt_needed_ms > t.tbt_ms:
            out.append(
                f"TBT: {t.target_attainment:.0%} of requests need {self.tbt_needed_ms:,.0f} ms, the limit is {t.tbt_ms:g} ms "
                f"({self.tbt_needed_ms - t.tbt_ms:,.0f} ms over)"
            )
        if not out and not self.met:
            out.append(
                f"each limit alone is met by {t.target_attainment:.0%} of requests, both together by {self.attainment:.0%}"
            )
        return out

    def to_dict(self) -> dict:
        return {
            "met": self.met,
            "attainment": self.attainment,
            "ttft_attainment": self.ttft_attainment,
            "tbt_attainment": self.tbt_attainment,
            "ttft_needed_s": _finite(self.ttft_needed_s),
            "tbt_needed_ms": _finite(self.tbt_needed_ms),
            "target": self.target.to_dict(),
            "shortfalls": self.shortfalls(),
        }


def workload_requests(workload: Workload, target: SloTarget) -> list[Request]:
    return requests_from_workload(
        workload.prompt_tokens,
        workload.weights,
        workload.output_tokens,
        target.rate_per_s,
        target.requests,
        target.seed,
    )


def check_slo(comp: Components, cfg: LaunchConfig, requests: list[Request], target: SloTarget) -> SloCheck:
    r = summarise_run(IterationCosts(comp, cfg), cfg, requests, engine.Schedule("chunked"), target.slo)
    q = 100 * target.target_attainment
    n = r.requests
    return SloCheck(r.attainment, r.ok_ttft / n, r.ok_tbt / n, r.ttft.higher(q), r.max_gap.higher(q), target)


def _s(v: float) -> str:
    return f"{v:,.1f} s" if math.isfinite(v) else "forever (requests never fit)"


def _finite(v: float):
    return v if math.isfinite(v) else None


class SloScorer:
    """Adds the SLO constraint ("slo_attainment", <= 0 when met) to evaluations that fit in memory,
    simulating each configuration once on the same requests; remembers every check."""

    def __init__(self, comp: Components, workload: Workload, target: SloTarget) -> None:
        self.comp, self.target = comp, target
        self.requests = workload_requests(workload, target)
        self.checks: dict[LaunchConfig, SloCheck] = {}

    def __call__(self, ev):
        from dataclasses import replace

        fits = all(v <= 0 for k, v in ev.constraints.items() if k != "slo_attainment")
        if not fits:
            return replace(ev, constraints={**ev.constraints, "slo_attainment": 1.0})
        if ev.cfg not in self.checks:
            self.checks[ev.cfg] = check_slo(self.comp, ev.cfg, self.requests, self.target)
        return replace(ev, constraints={**ev.constraints, "slo_attainment": self.checks[ev.cfg].constraint})

    def best(self) -> SloCheck | None:
        """The check with the highest attainment (the closest to the SLO)."""

        def closeness(c: SloCheck) -> tuple[float, float]:
            t = c.target
            over = sum(
                min(1e9, need / lim) for need, lim in ((c.ttft_needed_s, t.ttft_s), (c.tbt_needed_ms, t.tbt_ms)) if lim
            )
            return c.attainment, -over

        return max(self.checks.values(), key=closeness, default=None)

    def max_rate(self, cfg: LaunchConfig) -> float:
        """The highest rate at which `cfg` meets the SLO (kttune.sim.simulate.capacity)."""
        from kttune.sim.simulate import capacity
        from kttune.sim.workload import rescale_arrivals

        return capacity(
            self.comp,
            cfg,
            rescale_arrivals(self.requests, 1.0),
            engine.Schedule("chunked"),
            self.target.slo,
            target=self.target.target_attainment,
        ).max_rate_per_s

    def unmet_error(self) -> InfeasibleError:
        """The error when no configuration met the SLO."""
        best = self.best()
        t = self.target
        if best is None:
            return InfeasibleError(
                f"no configuration fits in memory, so none can meet {t.describe()}",
                "raise {vram_bytes} or {host_ram_bytes}",
                params=("vram_bytes", "host_ram_bytes"),
            )
        cfg = next(c for c, k in self.checks.items() if k is best)
        rate = self.max_rate(cfg)
        at = (
            f"; with these flags at most {rate:.3g} req/s meets both limits"
            if rate > 0
            else "; with these flags not even an idle server meets both limits"
        )
        return InfeasibleError(
            f"no configuration meets {t.describe()}; the closest (chunk {cfg.chunked_prefill_size}, "
            f"threshold {cfg.gpu_prefill_token_threshold}, {cfg.num_gpu_experts} GPU experts) reaches "
            f"{best.attainment:.0%}: " + "; ".join(best.shortfalls()) + at,
            "lower {rate_per_s}, relax the limit named, or add hardware (`kttune simulate` shows these "
            "flags under load)",
            params=("rate_per_s",),
        )
