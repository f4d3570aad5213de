"""Simulate schedules side by side for one configuration, and find the highest arrival rate that
keeps SLO attainment at or above a target (90% by default, as the Layered Prefill paper reports
capacity). Pure: takes a Components and a LaunchConfig, returns frozen results."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kttune.bounds import finite_or_null
from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.schema import schema
from kttune.sim import engine
from kttune.sim.costs import IterationCosts
from kttune.sim.metrics import ScheduleResult, Slo, Summary
from kttune.sim.workload import Request, RequestList, rescale_arrivals

TARGET_ATTAINMENT = 0.9


def schedule_config(cfg: LaunchConfig, schedule: engine.Schedule) -> LaunchConfig:
    """The flags a schedule runs with (its planner's `flags`: `hybrid` turns layerwise off)."""
    return engine.PLANNERS[schedule.name].flags(cfg)


def _stream(requests):
    return RequestList(tuple(requests)) if isinstance(requests, (list, tuple)) else requests


def summarise_run(
    costs: IterationCosts,
    cfg: LaunchConfig,
    requests,
    schedule: engine.Schedule,
    slo: Slo,
    samples: bool = False,
    on_progress=None,
) -> Summary:
    """One run of `requests` (a list of Request or a stream, kttune.sim.workload) into a Summary."""
    summary = Summary(slo, samples)
    engine.serve(costs, cfg, _stream(requests), schedule, summary, on_progress)
    return summary


def simulate_one(
    comp: Components,
    cfg: LaunchConfig,
    requests,
    schedule: engine.Schedule,
    slo: Slo,
    router_skew: float = 0.0,
    samples: bool = False,
    costs: IterationCosts | None = None,
    on_progress=None,
) -> ScheduleResult:
    """One schedule over `requests` (a list of Request or a stream), in bounded memory."""
    c = schedule_config(cfg, schedule)
    costs = costs or IterationCosts(comp, c, router_skew)
    return summarise_run(costs, c, requests, schedule, slo, samples, on_progress).result(schedule.name)


@dataclass(frozen=True)
class Capacity:
    schedule: str
    max_rate_per_s: float  # highest rate with attainment >= target (0: not even an idle server meets the SLO)
    target_attainment: float
    curve: tuple[tuple[float, float], ...]  # (rate per s, attainment), sorted by rate
    requests_per_point: int

    def to_dict(self) -> dict:
        return {
            "schedule": self.schedule,
            "max_rate_per_s": self.max_rate_per_s,
            "target_attainment": self.target_attainment,
            "curve": [{"rate_per_s": r, "attainment": a} for r, a in self.curve],
            "requests_per_point": self.requests_per_point,
        }


def capacity(
    comp: Components,
    cfg: LaunchConfig,
    base: list[Request],
    schedule: engine.Schedule,
    slo: Slo,
    router_skew: float = 0.0,
    target: float = TARGET_ATTAINMENT,
    steps: int = 7,
) -> Capacity:
    """Highest rate keeping attainment >= target: the same requests (lengths fixed) with their
    arrivals rescaled to each rate; doubling to bracket, then bisection on a log scale."""
    c = schedule_config(cfg, schedule)
    costs = IterationCosts(comp, c, router_skew)
    seen: dict[float, float] = {}

    def att(rate: float) -> float:
        if rate not in seen:
            seen[rate] = summarise_run(costs, c, rescale_arrivals(base, rate), schedule, slo).attainment
        return seen[rate]

    lo_rate = 1e-4
    if att(lo_rate) < target:
        return Capacity(schedule.name, 0.0, target, tuple(sorted(seen.items())), len(base))
    # a first guess: the rate at which prefill alone keeps the server busy
    mean_prompt = sum(r.prompt_tokens for r in base) / len(base)
    guess = 1e3 / max(1e-3, costs.forward([(int(mean_prompt), 0)], 0, 0.0).ms)
    lo, hi = lo_rate, None
    r = guess
    for _ in range(20):
        if att(r) >= target:
            lo = r
            r *= 2
        else:
            hi = r
            break
    if hi is None:
        return Capacity(schedule.name, lo, target, tuple(sorted(seen.items())), len(base))
    if lo == lo_rate:  # the guess failed: halve until it passes
        r = hi / 2
        for _ in range(20):
            if att(r) >= target:
                lo = r
                break
            hi = r
            r /= 2
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        if att(mid) >= target:
            lo = mid
        else:
            hi = mid
    return Capacity(schedule.name, lo, target, tuple(sorted(seen.items())), len(base))


@dataclass(frozen=True)
class SimulationReport:
    model: str
    method: str
    profile: str
    flags: dict
    workload: dict  # name, source (preset | trace), statistics, rate_per_s, requests, seed
    slo: Slo
    router_skew: float
    schedules: tuple[ScheduleResult, ...]
    capacity: tuple[Capacity, ...] = ()
    schedule_settings: tuple[dict, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return finite_or_null(
            {
                "schema": schema("simulate"),
                "model": self.model,
                "method": self.method,
                "profile": self.profile,
                "flags": self.flags,
                "workload": self.workload,
                "slo": self.slo.to_dict(),
                "router_skew": self.router_skew,
                "schedules": [s.to_dict() for s in self.schedules],
                "schedule_settings": list(self.schedule_settings),
                "capacity": [c.to_dict() for c in self.capacity],
                "notes": list(self.notes),
            }
        )


def paper_rule_tbt_slo_ms(costs: IterationCosts) -> float:
    """The Layered Prefill paper's TBT limit rule: 5 x one decode step of 32 requests at a
    4,096-token context (docs/simulate.md)."""
    return 5.0 * costs.decode(32, 32 * 4096.0).ms


@dataclass(frozen=True)
class SimulationInputs:
    """Everything `kttune simulate` needs, resolved."""

    comp: Components
    cfg: LaunchConfig
    requests: object  # a request stream (kttune.sim.workload): replayed by every schedule
    workload: dict
    slo: Slo
    schedules: tuple[engine.Schedule, ...]
    router_skew: float = 0.0
    profile_name: str = ""


def simulate(
    inp: SimulationInputs,
    with_capacity: bool = False,
    capacity_requests: int = 300,
    samples: bool = False,
    on_progress=None,
) -> SimulationReport:
    """Every schedule on the same requests; optionally each schedule's capacity (on the first
    `capacity_requests` of them). `on_progress(step, done, total)`: step is a schedule's name
    (done/total requests) or "capacity of <schedule>"."""
    results, caps = [], []
    total = inp.requests.count
    for s in inp.schedules:
        tick = (lambda done, name=s.name: on_progress(name, done, total)) if on_progress else None
        results.append(
            simulate_one(inp.comp, inp.cfg, inp.requests, s, inp.slo, inp.router_skew, samples, on_progress=tick)
        )
    if with_capacity:
        base = inp.requests.head(capacity_requests)
        for i, s in enumerate(inp.schedules):
            if on_progress:
                on_progress(f"capacity of {s.name}", i, len(inp.schedules))
            caps.append(capacity(inp.comp, inp.cfg, base, s, inp.slo, inp.router_skew))
    return SimulationReport(
        model=inp.comp.model.name,
        method=inp.comp.method.name,
        profile=inp.profile_name,
        flags=inp.cfg.to_dict(),
        workload=inp.workload,
        slo=inp.slo,
        router_skew=inp.router_skew,
        schedules=tuple(results),
        capacity=tuple(caps),
        schedule_settings=tuple(s.to_dict() for s in inp.schedules),
        notes=tuple(dict.fromkeys(inp.comp.notes)),
    )
