"""The configurations `kttune tune` measures, from the (calibrated) model: its pick, its fastest
prefill configurations, the pick at the measured crossover, the pick at the other thread counts and
at the chunks either side of its own at each of those thread counts (with the most GPU experts that
fit there); and the baselines. Configurations that run the same forwards on the same GPU experts and threads
for every measured length are one measurement: only the cheapest of them is kept. Pure."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.spec.forwards import forward_plan
from kttune.search.baselines import BASELINES, baseline_config
from kttune.search.evaluate import evaluate
from kttune.search.measured import MeasuredRequest, cheaper_key, model_prefill_candidates
from kttune.search.space import SearchSpace
from kttune.search.request import SearchRequest


def measurement_key(
    cfg: LaunchConfig, lengths: Sequence[int], layerwise: bool, threads: Callable[[int], int] = lambda t: t
) -> tuple:
    """What a measurement of `cfg` at `lengths` runs: GPU experts, kt-kernel threads, and the
    forwards of every length (two configurations with one key measure the same thing)."""
    return (
        cfg.num_gpu_experts,
        threads(cfg.cpuinfer_threads),
        tuple(forward_plan(layerwise, n, cfg.chunked_prefill_size, cfg.gpu_prefill_token_threshold) for n in lengths),
    )


def dedupe(
    named: list[tuple[str, LaunchConfig]], key: Callable[[LaunchConfig], tuple], cost: Callable[[LaunchConfig], tuple]
) -> list[tuple[str, LaunchConfig]]:
    """One configuration per measurement key: the first name, the cheapest configuration."""
    groups: dict[tuple, list[tuple[str, LaunchConfig]]] = {}
    for name, cfg in named:
        groups.setdefault(key(cfg), []).append((name, cfg))
    return [(g[0][0], min((c for _, c in g), key=cost)) for g in groups.values()]


def crossover_threshold(space: SearchSpace, cfg: LaunchConfig, crossover: float) -> int | None:
    """The smallest threshold choice at or above a measured crossover that layerwise can fire at."""
    ok = [t for t in space.thresholds if t >= crossover and 0 < t <= cfg.chunked_prefill_size]
    return min(ok) if ok else None


def most_gpu_experts(cfg: LaunchConfig, fits: Callable[[LaunchConfig], bool], most: int) -> LaunchConfig | None:
    """`cfg` with the most GPU experts (0..`most`) that `fits` allows, None when none fits. Fewer
    GPU experts never need more VRAM, so the feasible counts are a prefix (bisected)."""
    if not fits(replace(cfg, num_gpu_experts=0)):
        return None
    lo, hi = 0, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(replace(cfg, num_gpu_experts=mid)) else (lo, mid - 1)
    return replace(cfg, num_gpu_experts=lo)


def chunk_neighbours(
    chunks: Sequence[int], pick: LaunchConfig, fits: Callable[[LaunchConfig], bool], most_experts: int
) -> list[tuple[str, LaunchConfig]]:
    """The pick at the chunk choices either side of its own (its threshold capped at the chunk),
    each with the most GPU experts that fit beside that chunk's activations (`fits`, up to
    `most_experts`; left out where none fit). The chunk is the flag the model ranks least surely:
    its effect is the balance of a forward's fixed costs against kt-kernel's max_len and the
    activations' VRAM, small beside the noise of one measurement, so the race measures the pick's
    neighbours rather than trusting the model's choice among them. A smaller chunk frees VRAM for
    GPU experts, and that is what the neighbour must use: on the H200 box three tune picks at chunk
    32,768 lost 4-10% to a grid point at 16,384 that held 3 more GPU experts, while the neighbour at
    16,384 with the pick's experts ran the same forwards as the pick and was one measurement with it
    (docs/tune.md#on-the-h200-box)."""
    ordered = sorted(set(chunks))
    c = pick.chunked_prefill_size
    if c not in ordered:
        return []
    i = ordered.index(c)
    out = []
    for j in (i - 1, i + 1):
        if 0 <= j < len(ordered):
            x = ordered[j]
            cfg = most_gpu_experts(
                replace(
                    pick, chunked_prefill_size=x, gpu_prefill_token_threshold=min(pick.gpu_prefill_token_threshold, x)
                ),
                fits,
                most_experts,
            )
            if cfg is not None:
                out.append((f"pick at chunk {x}", cfg))
    return out


def tune_candidates(
    comp: Components,
    space: SearchSpace,
    base: SearchRequest,
    pick: LaunchConfig,
    k: int,
    crossover: float | None,
    threads: Sequence[int],
    seed: int = 0,
    model_trials: int = 200,
) -> list[tuple[str, LaunchConfig]]:
    """The named candidates, feasible under the budget, the model's pick first."""
    fixed = {"kv_k": space.params_of(pick)["kv_k"]}
    req = MeasuredRequest(base=base, seed=seed)
    named = [("model pick", pick)]
    for i, c in enumerate(model_prefill_candidates(comp, space, req, k, model_trials, fixed)):
        named.append((f"model prefill #{i + 1}", c))
    if crossover and comp.method.layerwise:
        thr = crossover_threshold(space, pick, crossover)
        if thr is not None:
            named.append(("pick, threshold at the measured crossover", replace(pick, gpu_prefill_token_threshold=thr)))
    for t in threads:
        if t != pick.cpuinfer_threads:
            named.append((f"pick at {t} threads", replace(pick, cpuinfer_threads=t)))

    def fits(c: LaunchConfig) -> bool:
        return evaluate(comp, c, base.workload, base.budget).feasible

    # the chunk neighbours at every thread count raced (the race may keep another count than the
    # model's: on the H200 box qwen3's model pick ran 11 threads where 13 won)
    for t in dict.fromkeys((pick.cpuinfer_threads, *threads)):
        at = replace(pick, cpuinfer_threads=t)
        for name, c in chunk_neighbours(space.chunks, at, fits, space.gpu_experts_max):
            named.append((name if t == pick.cpuinfer_threads else f"{name}, {t} threads", c))
    return [(n, c) for n, c in named if fits(c)]


def tune_baselines(
    comp: Components, space: SearchSpace, base: SearchRequest, cores: int
) -> list[tuple[str, LaunchConfig, tuple[str, ...], bool]]:
    """(name, configuration fitted to this machine and space, what was changed, fits the budget)."""
    out = []
    for bl in BASELINES:
        cfg, notes = baseline_config(bl, space, cores)
        out.append((bl.name, cfg, notes, evaluate(comp, cfg, base.workload, base.budget).feasible))
    return out


def cost_of(comp: Components, base: SearchRequest) -> Callable[[LaunchConfig], tuple]:
    return lambda cfg: cheaper_key(comp, cfg, base)
