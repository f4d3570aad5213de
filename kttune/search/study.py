"""The search: Optuna over the launch flags, with the memory model as constraints and the cost
model as objectives (mean prefill time down, decode throughput up). Studies persist in Optuna
storage, resume after interruption and are reproducible with a seed.

Side effects (storage) live here; evaluation is pure (kttune.search.evaluate).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import optuna

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.errors import InfeasibleError, ParameterError, UserError
from kttune.hw.profile import HardwareProfile, profile_to_dict
from kttune.memory.host import host_ram_breakdown
from kttune.memory.vram import vram_breakdown, vram_needed_bytes
from kttune.search.evaluate import Budget, Evaluation, evaluate
from kttune.search.pick import pareto_front, pick
from kttune.search.request import SearchRequest, check_request
from kttune.search.slo import SloScorer, SloTarget
from kttune.search.storage import open_storage
from kttune.search.baselines import kt_run_default
from kttune.search.space import KV_UNIT, MIN_USEFUL_KV_TOKENS, SearchSpace, build_space, minimal_config
from kttune.units import GIB

SPACE_VERSION = 1


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
    slo: dict | None = None  # the SLO check of the pick (kttune.search.slo.SloCheck.to_dict()), when asked


def check_budget(comp: Components, space: SearchSpace, req: SearchRequest) -> None:
    """Nothing fits: say what the least a launch needs is, and where it goes."""
    least_host = host_ram_breakdown(
        req.model,
        minimal_config(
            comp, req.tp, space.threads[0], space.threadpools, MIN_USEFUL_KV_TOKENS, space.max_running_requests
        ),
    )
    if least_host.total_bytes > req.budget.host_ram_bytes:
        raise InfeasibleError(
            f"{req.model.name} with {req.method} needs {least_host.total_bytes / GIB:.0f} GiB of host RAM "
            f"(experts {least_host.cpu_experts / GIB:.0f} GiB, all kept in RAM whatever the GPU-expert count; "
            f"scratch {least_host.cpu_scratch / GIB:.1f}; base {least_host.base / GIB:.0f}), "
            f"{req.budget.host_ram_source.has(req.budget.host_ram_bytes / GIB)}",
            req.budget.host_ram_source.fix(),
            params=req.budget.host_ram_source.PARAMS,
        )
    if space.kv_units_max >= space.kv_units_min and _min_fits(comp, space, req):
        return
    kv_min = max(MIN_USEFUL_KV_TOKENS, req.workload.max_prompt_tokens + req.workload.output_tokens)
    least = minimal_config(
        comp, req.tp, space.threads[0], space.threadpools, MIN_USEFUL_KV_TOKENS, space.max_running_requests
    )
    b = vram_breakdown(req.model, least)
    parts = ", ".join(f"{k.replace('_', ' ')} {v / GIB:.2f}" for k, v in b.items() if v > 0)
    need = vram_needed_bytes(b.runtime_peak_bytes, req.budget.vram_margin)
    if need > req.budget.vram_bytes_per_gpu:
        raise InfeasibleError(
            f"{req.model.name} needs at least {need / GIB:.1f} GiB per GPU with 0 GPU experts and a {MIN_USEFUL_KV_TOKENS}-token KV pool "
            f"(GiB: {parts}; plus {req.budget.vram_margin:.0%} margin), the budget is {req.budget.vram_bytes_per_gpu / GIB:.1f} GiB",
            "raise {vram_bytes}, add GPUs with {gpus}, or pick a smaller model",
            params=("vram_bytes", "gpus"),
        )
    raise InfeasibleError(
        f"the budget fits a KV pool smaller than the workload's longest request ({kv_min} tokens)",
        "raise {vram_bytes}, or use a workload with shorter prompts",
        params=("vram_bytes",),
    )


def _min_fits(comp: Components, space: SearchSpace, req: SearchRequest) -> bool:
    least = minimal_config(
        comp, req.tp, space.threads[0], space.threadpools, space.kv_units_min * KV_UNIT, space.max_running_requests
    )
    ev = evaluate(comp, least, req.workload, req.budget)
    return ev.constraints["vram"] <= 0


def study_key(req: SearchRequest, space: SearchSpace, seed: int | None = None) -> str:
    """Same inputs -> same study (so a rerun resumes it); any change of model, profile contents,
    budget, workload or space -> a new one."""
    blob = json.dumps(
        {
            "v": SPACE_VERSION,
            "model": req.model.__dict__,
            "method": req.method,
            "tp": req.tp,
            "profile": hashlib.sha256(
                json.dumps(_profile_contents(req.profile), sort_keys=True, default=str).encode()
            ).hexdigest(),
            "workload": req.workload.search_fields(),
            "budget": _searched(req.budget),
            "space": space.as_dict(),
            "seed": seed,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _profile_contents(profile: HardwareProfile) -> dict:
    """The profile as written, less its envelope (kttune.schema): a study keeps its key."""
    return {k: v for k, v in profile_to_dict(profile).items() if k != "schema"}


def _searched(budget: Budget) -> dict:
    """The budget's fields that change what a search finds (not the words of its messages)."""
    return {k: v for k, v in budget.__dict__.items() if k != "host_ram_source"}


def _complete(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


def _feasible(trial: optuna.trial.FrozenTrial) -> bool:
    cons = trial.constraints
    return bool(cons) and all(c <= 0 for c in cons.values())


def snap_threshold_to_crossover(
    comp: Components,
    ev: Evaluation,
    space: SearchSpace,
    req: SearchRequest,
    evaluate_cfg: Callable[[LaunchConfig], Evaluation] | None = None,
) -> Evaluation:
    """When the workload cannot tell thresholds apart (no prompt reaches them, or several give the
    same times), put the threshold where the two paths cross: right for prompts outside the workload
    too. Kept only if it predicts the same or better on the workload and still fits."""
    from kttune.cost.prefill import crossover_tokens

    if len(space.thresholds) <= 1 or ev.cfg.gpu_prefill_token_threshold == 0:
        return ev
    cross = crossover_tokens(comp, ev.cfg)
    options = [
        t for t in space.thresholds if t and cross is not None and t >= cross and t <= ev.cfg.chunked_prefill_size
    ]
    if not options or options[0] == ev.cfg.gpu_prefill_token_threshold:
        return ev
    alt_cfg = replace(ev.cfg, gpu_prefill_token_threshold=options[0])
    alt = evaluate_cfg(alt_cfg) if evaluate_cfg else evaluate(comp, alt_cfg, req.workload, req.budget)
    if alt.feasible and alt.mean_ttft_ms <= ev.mean_ttft_ms * 1.0005 and alt.decode_tok_s >= ev.decode_tok_s * 0.9995:
        return alt
    return ev


def best_backend(
    comp: Components,
    ev: Evaluation,
    space: SearchSpace,
    req: SearchRequest,
    evaluate_cfg: Callable[[LaunchConfig], Evaluation] | None = None,
) -> Evaluation:
    """The pick on each other --attention-backend the space offers, kept where it fits and is no
    worse on either objective and better on one: a narrow feasible region (a large model on a tight
    budget) leaves the sampler few trials to try each backend on (docs/cost-model.md#mla-prefill-forms)."""
    best = ev
    for b in space.backends:
        if b == ev.cfg.attention_backend:
            continue
        alt_cfg = replace(ev.cfg, attention_backend=b)
        alt = evaluate_cfg(alt_cfg) if evaluate_cfg else evaluate(comp, alt_cfg, req.workload, req.budget)
        no_worse = alt.mean_ttft_ms <= best.mean_ttft_ms and alt.decode_tok_s >= best.decode_tok_s
        better = alt.mean_ttft_ms < best.mean_ttft_ms * 0.9995 or alt.decode_tok_s > best.decode_tok_s * 1.0005
        if alt.feasible and no_worse and better:
            best = alt
    return best


def prepare_search(req: SearchRequest) -> tuple[Components, SearchSpace]:
    """What every search of `req` (model-evaluated or measured) starts from: the request checked,
    its components, the space (the user's chunks when given) and the budget checked against it."""
    check_request(req)
    comp = Components(req.profile, req.model, req.method, req.tp)
    space = build_space(comp, req.workload, req.budget, req.tp, chunks=req.chunks or None)
    if req.attention_backend and len(space.backends) > 1:  # pinned by the user (an MLA model's alone matters)
        space = replace(space, backends=(req.attention_backend,))
    check_budget(comp, space, req)
    return comp, space


def run_search(
    req: SearchRequest,
    opts: StudyOptions = StudyOptions(),
    on_trial: Callable[[int, int, Evaluation | None], None] | None = None,
    slo: SloTarget | None = None,
) -> SearchResult:
    """Run (or resume) the study of `req` up to `opts.trials` trials in total. Each configuration
    is evaluated once: the trials' evaluations are kept and reused for the front, the pick and
    the `kt run` baseline. With `slo`, a configuration must also meet the SLO at the target rate
    in simulation (kttune.search.slo); without it, the idle-server objectives and memory
    constraints alone."""
    if opts.trials < 1:
        raise ParameterError(
            "trials", f"{opts.trials} must be at least 1", "pass a positive trial count, e.g. {trials} 300"
        )
    t0 = time.perf_counter()
    comp, space = prepare_search(req)
    opened = open_storage(opts.storage)
    storage, storage_url = opened.storage, opened.url
    scorer = SloScorer(comp, req.workload, slo) if slo else None
    key = study_key(req, space, opts.seed)
    if slo:
        key += "-slo" + hashlib.sha256(json.dumps(slo.to_dict(), sort_keys=True).encode()).hexdigest()[:8]
    name = opts.study_name or f"kttune-{req.model.name}-{req.method}-tp{req.tp}-{key}"
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a failed trial re-raises; its warning would print a traceback
    # The persistent study is the record (it resumes); trials run in an in-memory twin seeded with
    # every persisted trial, and each finished trial is written back with one append. The journal
    # fsyncs every write, and a trial makes about 15 writes when run against it directly.
    try:
        persisted = optuna.create_study(
            study_name=name, storage=storage, directions=["minimize", "maximize"], load_if_exists=True
        )
    except OSError as e:
        raise UserError(
            f"cannot write the study to {storage_url} ({e.strerror or e})",
            "pass {storage} a path in a writable directory",
            params=("storage",),
        ) from None
    done = _complete(persisted)
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
            ev = evaluate(comp, cfg, req.workload, req.budget)
            evaluated[cfg] = scorer(ev) if scorer else ev
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
        # --trials is the study's total across every process writing to it (as Optuna's
        # MaxTrialsCallback counts): after each write, count the stored COMPLETE trials and stop
        # when they reach it. Each process reports the trials it added itself.
        if trial.state != optuna.trial.TrialState.COMPLETE:
            return
        persisted.add_trial(trial)
        new_count[0] += 1
        stored = len(_complete(persisted))
        if on_trial:
            on_trial(min(stored, opts.trials), opts.trials, best_so_far[0])
        if stored >= opts.trials:
            _study.stop()

    if remaining:
        try:
            study.optimize(objective, n_trials=remaining, callbacks=[callback], gc_after_trial=False)
        except OSError as e:
            raise UserError(
                f"cannot write the study to {storage_url} ({e.strerror or e}); the trials written before it are kept",
                "free space or pass {storage} elsewhere, then rerun to resume",
                params=("storage",),
            ) from None

    # The front is taken over every stored trial: those other processes added to the study too.
    stored_trials = _complete(persisted)
    trials = stored_trials or [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    feasible = [t for t in trials if _feasible(t)]
    if not feasible and scorer and scorer.checks:
        raise scorer.unmet_error()
    if not feasible:
        raise InfeasibleError(
            f"no configuration among {len(trials)} trials fits the budget",
            "raise {vram_bytes} or {trials}, or use a workload with shorter prompts",
            params=("vram_bytes", "trials"),
        )
    configs = {}
    for t in feasible:
        configs[t.number] = space.config_of(t.params)
    evals = {num: evaluate_once(cfg) for num, cfg in configs.items()}
    front = pareto_front(list(evals.values()))
    best = snap_threshold_to_crossover(comp, pick(front, req.workload.decode_weight), space, req, evaluate_once)
    best = best_backend(comp, best, space, req, evaluate_once)
    baseline = evaluate_once(baseline_cfg)
    return SearchResult(
        best=best,
        pareto=front,
        baseline=baseline,
        space=space,
        study_name=name,
        storage=storage_url,
        trials_total=len(trials),
        trials_new=new_count[0],
        trials_feasible=len(feasible),
        wall_s=time.perf_counter() - t0,
        notes=list(dict.fromkeys(list(opened.notes) + list(comp.notes))),
        components=comp,
        slo=scorer.checks[best.cfg].to_dict() if scorer else None,
    )
