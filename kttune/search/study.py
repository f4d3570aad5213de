"""The search: Optuna over the launch flags, with the memory model as constraints and the cost
model as objectives (mean prefill time down, decode throughput up). Studies persist in Optuna
storage, resume after interruption and are reproducible with a seed.

Side effects (storage) live here; evaluation is pure (kttune.search.evaluate).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import optuna

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.errors import InfeasibleError, UserError
from kttune.hw.profile import HardwareProfile, profile_to_dict
from kttune.memory.host import host_ram_breakdown
from kttune.memory.vram import vram_breakdown, vram_needed_bytes
from kttune.paths import default_study_storage
from kttune.search.evaluate import Budget, Evaluation, evaluate
from kttune.search.pick import pareto_front, pick
from kttune.search.space import KV_UNIT, MIN_USEFUL_KV_TOKENS, SearchSpace, build_space, kt_run_default, minimal_config
from kttune.search.workload import Workload
from kttune.spec.methods import get_method
from kttune.spec.model_spec import ModelSpec
from kttune.units import GIB

SPACE_VERSION = 1


@dataclass(frozen=True)
class SearchRequest:
    """What is tuned: one model and KT method on one hardware profile, for a workload, under a
    budget, on `tp` GPUs. The same request serves a search and an explanation of given flags."""

    model: ModelSpec
    method: str
    profile: HardwareProfile
    workload: Workload
    budget: Budget
    tp: int = 1
    chunks: tuple[int, ...] = ()  # the user's chunk choices (kttune.search.space.parse_chunks); () = the defaults


@dataclass(frozen=True)
class StudyOptions:
    """How a search runs: the trial total, the sampler seed and where the study persists."""

    trials: int = 300
    seed: int | None = None
    storage: str | None = None  # Optuna URL (sqlite:///x.db) or a journal file path; None = cache dir
    study_name: str | None = None


@dataclass
class SearchResult:
    best: Evaluation
    pareto: list[Evaluation]
    baseline: Evaluation | None
    space: SearchSpace
    study_name: str
    storage: str
    trials_total: int
    trials_new: int
    trials_feasible: int
    wall_s: float
    notes: list[str] = field(default_factory=list)
    components: Components | None = None  # the cost model the search ran on (explain the pick with it)


def check_request(req: SearchRequest) -> None:
    """Structural rules that no search can satisfy (docs/sglang-kt.md#fp8-divisibility)."""
    method = get_method(req.method)
    if req.tp < 1:
        raise UserError(f"--gpus {req.tp} must be at least 1", "pass the number of GPUs (tensor-parallel size)")
    i = req.model.moe_intermediate_size
    if method.needs_fp8_tp_divisibility and (i // req.tp) % 128 != 0 or i % req.tp != 0:
        ok = [t for t in (1, 2, 4, 8) if i % t == 0 and (not method.needs_fp8_tp_divisibility or (i // t) % 128 == 0)]
        raise UserError(
            f"{req.model.name} with {method.name} cannot run on {req.tp} GPUs: expert width {i}/{req.tp} is not a multiple of 128"
            if method.needs_fp8_tp_divisibility else f"expert width {i} does not split over {req.tp} GPUs",
            f"use --gpus {max(ok) if ok else 1} or fewer",
        )


def check_budget(comp: Components, space: SearchSpace, req: SearchRequest) -> None:
    """Nothing fits: say what the least a launch needs is, and where it goes."""
    least_host = host_ram_breakdown(req.model, minimal_config(comp, req.tp, space.threads[0], space.threadpools,
                                                               MIN_USEFUL_KV_TOKENS, space.max_running_requests))
    if least_host.total_bytes > req.budget.host_ram_bytes:
        raise InfeasibleError(
            f"{req.model.name} with {req.method} needs {least_host.total_bytes / GIB:.0f} GiB of host RAM "
            f"(experts {least_host.cpu_experts / GIB:.0f} GiB, all kept in RAM whatever the GPU-expert count; "
            f"scratch {least_host.cpu_scratch / GIB:.1f}; base {least_host.base / GIB:.0f}), "
            f"the machine has {req.budget.host_ram_bytes / GIB:.0f} GiB",
            "pass --host-ram if the profile's RAM is not the target machine's, or pick a smaller model or method",
        )
    if space.kv_units_max >= space.kv_units_min and _min_fits(comp, space, req):
        return
    kv_min = max(MIN_USEFUL_KV_TOKENS, req.workload.max_prompt_tokens + req.workload.output_tokens)
    least = minimal_config(comp, req.tp, space.threads[0], space.threadpools, MIN_USEFUL_KV_TOKENS, space.max_running_requests)
    b = vram_breakdown(req.model, least)
    parts = ", ".join(f"{k.replace('_', ' ')} {v / GIB:.2f}" for k, v in b.items() if v > 0)
    need = vram_needed_bytes(b.runtime_peak_bytes, req.budget.vram_margin)
    if need > req.budget.vram_bytes_per_gpu:
        raise InfeasibleError(
            f"{req.model.name} needs at least {need / GIB:.1f} GiB per GPU with 0 GPU experts and a {MIN_USEFUL_KV_TOKENS}-token KV pool "
            f"(GiB: {parts}; plus {req.budget.vram_margin:.0%} margin), the budget is {req.budget.vram_bytes_per_gpu / GIB:.1f} GiB",
            "raise --vram, add GPUs with --gpus, or pick a smaller model",
        )
    raise InfeasibleError(
        f"the budget fits a KV pool smaller than the workload's longest request ({kv_min} tokens)",
        "raise --vram, or use a workload with shorter prompts",
    )


def _min_fits(comp: Components, space: SearchSpace, req: SearchRequest) -> bool:
    least = minimal_config(comp, req.tp, space.threads[0], space.threadpools, space.kv_units_min * KV_UNIT, space.max_running_requests)
    ev = evaluate(comp, least, req.workload, req.budget)
    return ev.constraints["vram"] <= 0


def study_key(req: SearchRequest, space: SearchSpace, seed: int | None = None) -> str:
    """Same inputs -> same study (so a rerun resumes it); any change of model, profile contents,
    budget, workload or space -> a new one."""
    blob = json.dumps({
        "v": SPACE_VERSION, "model": req.model.__dict__, "method": req.method, "tp": req.tp,
        "profile": hashlib.sha256(json.dumps(profile_to_dict(req.profile), sort_keys=True, default=str).encode()).hexdigest(),
        "workload": req.workload.__dict__, "budget": req.budget.__dict__, "space": space.as_dict(), "seed": seed,
    }, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def open_storage(storage: str | None):
    """An Optuna storage: an RDB URL as given, else a journal file (crash-safe, no server)."""
    url = storage or default_study_storage()
    if "://" in url:
        try:
            return optuna.storages.RDBStorage(url), url
        except Exception as e:  # bad URL, missing driver
            raise UserError(f"cannot open Optuna storage {url!r} ({type(e).__name__}: {e})",
                            "pass a journal file path or a URL like sqlite:///kttune.db") from None
    path = Path(url).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    return JournalStorage(JournalFileBackend(str(path))), str(path)


def _feasible(trial: optuna.trial.FrozenTrial) -> bool:
    cons = trial.constraints
    return bool(cons) and all(c <= 0 for c in cons.values())


def snap_threshold_to_crossover(comp: Components, ev: Evaluation, space: SearchSpace, req: SearchRequest,
                                evaluate_cfg: Callable[[LaunchConfig], Evaluation] | None = None) -> Evaluation:
    """When the workload cannot tell thresholds apart (no prompt reaches them, or several give the
    same times), put the threshold where the two paths cross: right for prompts outside the workload
    too. Kept only if it predicts the same or better on the workload and still fits."""
    from dataclasses import replace

    from kttune.cost.prefill import crossover_tokens

    if len(space.thresholds) <= 1 or ev.cfg.gpu_prefill_token_threshold == 0:
        return ev
    cross = crossover_tokens(comp, ev.cfg)
    options = [t for t in space.thresholds if t and cross is not None and t >= cross and t <= ev.cfg.chunked_prefill_size]
    if not options or options[0] == ev.cfg.gpu_prefill_token_threshold:
        return ev
    alt_cfg = replace(ev.cfg, gpu_prefill_token_threshold=options[0])
    alt = evaluate_cfg(alt_cfg) if evaluate_cfg else evaluate(comp, alt_cfg, req.workload, req.budget)
    if alt.feasible and alt.mean_ttft_ms <= ev.mean_ttft_ms * 1.0005 and alt.decode_tok_s >= ev.decode_tok_s * 0.9995:
        return alt
    return ev


def run_search(req: SearchRequest, opts: StudyOptions = StudyOptions(),
               on_trial: Callable[[int, int, Evaluation | None], None] | None = None) -> SearchResult:
    """Run (or resume) the study of `req` up to `opts.trials` trials in total. Each configuration
    is evaluated once: the trials' evaluations are kept and reused for the front, the pick and
    the `kt run` baseline."""
    check_request(req)
    if opts.trials < 1:
        raise UserError(f"--trials {opts.trials} must be at least 1", "pass a positive trial count, e.g. --trials 300")
    t0 = time.perf_counter()
    comp = Components(req.profile, req.model, req.method, req.tp)
    space = build_space(comp, req.workload, req.budget, req.tp, chunks=req.chunks or None)
    check_budget(comp, space, req)
    storage, storage_url = open_storage(opts.storage)
    name = opts.study_name or f"kttune-{req.model.name}-{req.method}-tp{req.tp}-{study_key(req, space, opts.seed)}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # The persistent study is the record (it resumes); trials run in an in-memory twin seeded with
    # every persisted trial, and each finished trial is written back with one append. The journal
    # fsyncs every write, and a trial makes about 15 writes when run against it directly.
    persisted = optuna.create_study(study_name=name, storage=storage, directions=["minimize", "maximize"],
                                    load_if_exists=True)
    done = [t for t in persisted.trials if t.state == optuna.trial.TrialState.COMPLETE]
    sampler = optuna.samplers.NSGAIISampler(seed=opts.seed, population_size=min(50, max(10, opts.trials // 10)))
    study = optuna.create_study(sampler=sampler, directions=["minimize", "maximize"])
    study.add_trials(done)
    cores = req.profile.inventory.cpu.physical_cores or max(space.threads) + 1
    baseline_cfg = kt_run_default(space, cores)
    if not done:
        study.enqueue_trial(space.params_of(baseline_cfg))
    remaining = max(0, opts.trials - len(done))
    best_so_far: list[Evaluation | None] = [None]
    evaluated: dict[LaunchConfig, Evaluation] = {}

    def evaluate_once(cfg: LaunchConfig) -> Evaluation:
        if cfg not in evaluated:
            evaluated[cfg] = evaluate(comp, cfg, req.workload, req.budget)
        return evaluated[cfg]

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        cfg = space.suggest(trial)
        ev = evaluate_once(cfg)
        for key, value in ev.constraints.items():
            trial.set_constraint(key, value)  # <= 0 is feasible; NSGA-II ranks feasible first
        if ev.feasible and (best_so_far[0] is None or ev.mean_ttft_ms < best_so_far[0].mean_ttft_ms):
            best_so_far[0] = ev
        return ev.mean_ttft_ms / 1e3, ev.decode_tok_s

    new_count = [0]

    def callback(_study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if trial.state == optuna.trial.TrialState.COMPLETE:
            persisted.add_trial(trial)
        new_count[0] += 1
        if on_trial:
            on_trial(len(done) + new_count[0], opts.trials, best_so_far[0])

    if remaining:
        study.optimize(objective, n_trials=remaining, callbacks=[callback], gc_after_trial=False)

    trials = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    feasible = [t for t in trials if _feasible(t)]
    if not feasible:
        raise InfeasibleError(
            f"no configuration among {len(trials)} trials fits the budget",
            "raise --vram or --trials, or use a workload with shorter prompts",
        )
    configs = {}
    for t in feasible:
        p = dict(t.params)
        p.setdefault("threshold", 0)
        p.setdefault("threads", space.threads[0])
        configs[t.number] = space.config(p["chunk"], p["threshold"], p["gpu_experts"], p["kv_k"], p["threads"])
    evals = {num: evaluate_once(cfg) for num, cfg in configs.items()}
    front = pareto_front(list(evals.values()))
    best = snap_threshold_to_crossover(comp, pick(front, req.workload.decode_weight), space, req, evaluate_once)
    baseline = evaluate_once(baseline_cfg)
    return SearchResult(best=best, pareto=front, baseline=baseline, space=space, study_name=name, storage=storage_url,
                        trials_total=len(trials), trials_new=new_count[0], trials_feasible=len(feasible),
                        wall_s=time.perf_counter() - t0, notes=list(dict.fromkeys(comp.notes)), components=comp)
