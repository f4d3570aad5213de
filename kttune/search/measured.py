"""The measured search: Optuna trials scored by measurement instead of the model.

- The evaluator is injected (`Evaluator`: `measure(cfg, lengths) -> {length: ms}`); this module
  never imports what measures. The path runner is one evaluator, the cost model another
  (`ModelEvaluator`, a dry run and the reference in tests).
- Objective: prefill throughput over the workload, request-weighted: sum(w L) / sum(w t(L)),
  maximised, over threshold, chunk, GPU experts and `--kt-cpuinfer`; the KV pool stays the model
  search's pick (it weighs decode, which a prefill measurement cannot), and so does the attention
  backend (the path runner attends in one form whatever it is). Constraints stay the model's (VRAM peak, host RAM, threshold <= chunk, KV holds the
  longest request): a configuration that breaks them is not measured.
- The model's best candidates are enqueued first, then known baselines (kttune.search.baselines).
- Each prompt length is one step: its throughput is reported as an intermediate value, and Optuna's
  WilcoxonPruner stops a trial once a paired signed-rank test over the lengths measured so far says
  it is worse than the best trial (p < 0.1); where scipy (which that pruner needs) is missing,
  Optuna's MedianPruner does the same job (`measured_pruner`). Enqueued candidates and baselines are never pruned: the
  report needs their full measurement.
- Studies live in any Optuna storage (`--storage`: an RDB URL such as postgresql://... or
  sqlite:///..., or a journal file), so several identical machines can run one study; `trials`
  counts measured trials in the study across every process, and a rerun resumes.
- The trials screen (one sample per length). The winner is declared by a race (kttune.protocol):
  the best `finalists` trials, the model's pick and the baselines that fit are measured again in
  interleaved rounds, the slower beyond noise go out, and a tie within noise goes to the cheaper
  configuration (`cheaper_key`: less VRAM, fewer GPU experts, fewer threads). Each reported
  configuration carries the race's estimate (median and interval) and its ratio to the winner.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import socket
import time
import warnings
from dataclasses import dataclass, field, replace
import typing
from typing import Callable, Sequence

import optuna

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.cost.prefill import prefill_time_ms
from kttune.errors import ParameterError, UserError
from kttune.protocol import Comparison, Estimate, Protocol, RaceResult, compare, race
from kttune.search.baselines import BASELINES, Baseline, baseline_config
from kttune.search.evaluate import evaluate
from kttune.search.space import SearchSpace
from kttune.search.storage import open_storage
from kttune.search.twins import earlier_twin
from kttune.search.study import SearchResult, prepare_search, study_key
from kttune.search.request import SearchRequest

MEASURED_VERSION = 1


class Evaluator(typing.Protocol):
    """What measures a launch configuration: prefill time in ms of one prompt of each length, from
    an idle start, one fresh timed sample per call (the evaluator warms what it needs first). The
    measured search calls it one length at a time while screening (so it can prune between lengths)
    and once per round for every length in the race. A length it cannot measure is left out of the
    answer: the trial is then recorded as not measurable."""

    name: str  # recorded with the study; studies of different evaluators never mix

    def measure(self, cfg: LaunchConfig, lengths: Sequence[int]) -> dict[int, float]: ...


@dataclass
class ModelEvaluator:
    """The cost model as an evaluator: what the measured search would find if the model were exact."""

    comp: Components
    name: str = "model"

    def measure(self, cfg: LaunchConfig, lengths: Sequence[int]) -> dict[int, float]:
        return {n: prefill_time_ms(self.comp, cfg, n) for n in lengths}


def prefill_tok_s(ms_by_length: dict[int, float], lengths: Sequence[int], weights: Sequence[float]) -> float:
    """Request-weighted prefill throughput: sum(w L) / sum(w t) in tokens per second."""
    tokens = sum(w * n for n, w in zip(lengths, weights))
    secs = sum(w * ms_by_length[n] / 1e3 for n, w in zip(lengths, weights))
    return tokens / secs if secs > 0 else 0.0


@dataclass(frozen=True)
class MeasuredRequest:
    base: SearchRequest  # model, method, profile, workload, budget, tp
    trials: int = 20  # measured trials in the study (all processes together)
    seed: int | None = None
    storage: str | None = None  # as --storage (kttune.search.storage.open_storage); None = the cache dir
    budget_s: float | None = None  # wall-clock budget of this process
    model_candidates: int = 3  # the model search's pick, then the model's fastest-prefill configurations
    model_prefill_trials: int = 200  # model-evaluated trials that find those (about 1 s)
    baselines: tuple[Baseline, ...] = BASELINES
    p_threshold: float = 0.1
    finalists: int = 3  # best screening trials raced, besides the model's pick and the baselines
    protocol: Protocol = Protocol(repeats=3)  # the race: min rounds = repeats
    max_rounds: int = 5


@dataclass(frozen=True)
class MeasuredConfig:
    """A configuration and what the measured study knows about it."""

    name: str  # "measured pick", "model pick", "model #2", a baseline's name, "trial 7"
    cfg: LaunchConfig
    fits: bool
    predicted_tok_s: float | None
    measured_tok_s: float | None  # None: not measured (does not fit, or not reached)
    ms_by_length: dict[int, float] = field(default_factory=dict)
    state: str = ""  # complete | pruned | infeasible | not run
    source: str = ""
    notes: tuple[str, ...] = ()
    trial: int | None = None
    estimate: Estimate | None = None  # the race's tok/s (median, interval), when raced
    vs_best: Comparison | None = None  # this / the measured pick, paired by round
    race_status: str = ""  # winner | best measured | tied | eliminated | survived | unmeasurable | "" (not raced)


@dataclass
class MeasuredSearchResult:
    best: MeasuredConfig
    model_pick: MeasuredConfig
    model_candidates: list[MeasuredConfig]
    baselines: list[MeasuredConfig]
    lengths: tuple[int, ...]
    weights: tuple[float, ...]
    evaluator: str
    study_name: str
    storage: str
    trials_measured: int  # complete + pruned with at least one measurement, whole study
    trials_pruned: int
    trials_infeasible: int
    trials_new: int  # run by this process
    wall_s: float
    space: SearchSpace
    # what the user should know: the model search's notes (its storage repairs, the profile's fits),
    # then repairs made on opening this study's storage (a torn journal cut back, a stale lock removed)
    notes: tuple[str, ...] = ()
    decision: str = ""  # the race's: why the measured pick won
    race_rounds: int = 0


def measured_study_name(req: MeasuredRequest, space: SearchSpace, evaluator: str) -> str:
    b = req.base
    key = hashlib.sha256(
        json.dumps(
            {"v": MEASURED_VERSION, "model_key": study_key(b, space, req.seed), "evaluator": evaluator}, sort_keys=True
        ).encode()
    ).hexdigest()[:12]
    return f"kttune-measured-{evaluator}-{b.model.name}-{b.method}-tp{b.tp}-{key}"


def _predicted_tok_s(comp: Components, cfg: LaunchConfig, req: MeasuredRequest) -> float:
    wl = req.base.workload
    return prefill_tok_s(ModelEvaluator(comp).measure(cfg, wl.prompt_tokens), wl.prompt_tokens, wl.weights)


def model_prefill_candidates(
    comp: Components, space: SearchSpace, req: MeasuredRequest, k: int, n_trials: int = 200, fixed: dict | None = None
) -> list[LaunchConfig]:
    """The k configurations the model predicts fastest on the measured objective (prefill
    throughput): an in-memory model-evaluated random study of that one objective, then each of its
    k best polished by coordinate ascent (every value of one flag at a time, until none improves).
    About a second; the model search's own pick weighs decode too, so it is not enough on its own."""
    b = req.base
    wl = b.workload
    cache: dict[LaunchConfig, float] = {}

    def score(cfg: LaunchConfig) -> float:
        """Predicted prefill tok/s; 0 when the configuration does not fit."""
        if cfg not in cache:
            ev = evaluate(comp, cfg, wl, b.budget)
            cache[cfg] = (
                sum(w * n for n, w in zip(wl.prompt_tokens, wl.weights)) / (ev.mean_ttft_ms / 1e3)
                if ev.feasible
                else 0.0
            )
        return cache[cfg]

    # random exploration is enough to seed the ascent, and costs nothing next to TPE's sampling
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.PartialFixedSampler(fixed or {}, optuna.samplers.RandomSampler(seed=req.seed))
    study = optuna.create_study(direction="maximize", sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        v = score(space.suggest(trial))
        if v <= 0:
            raise optuna.TrialPruned()
        return v

    study.optimize(objective, n_trials=n_trials, gc_after_trial=False)
    done = sorted((t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE), key=lambda t: -t.value)
    starts: list[LaunchConfig] = []
    for t in done:
        cfg = space.config_of(t.params)
        if cfg not in starts:
            starts.append(cfg)
        if len(starts) >= k:
            break

    def most_experts(cfg: LaunchConfig) -> LaunchConfig:
        """The most GPU experts that still fit with the rest of `cfg` (VRAM grows with them)."""
        lo, hi = 0, space.gpu_experts_max
        if score(replace(cfg, num_gpu_experts=0)) <= 0:
            return cfg
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if score(replace(cfg, num_gpu_experts=mid)) > 0 else (lo, mid - 1)
        return replace(cfg, num_gpu_experts=lo)

    # a larger chunk may fit only with fewer GPU experts: each value of a flag is also tried with
    # the most experts that fit beside it
    axes = {
        "chunked_prefill_size": space.chunks,
        "gpu_prefill_token_threshold": space.thresholds,
        "num_gpu_experts": range(space.gpu_experts_max + 1),
        "cpuinfer_threads": space.threads,
    }
    out: list[LaunchConfig] = []
    for cfg in starts:
        for _ in range(4):
            before = cfg
            for name, values in axes.items():
                tries = [replace(cfg, **{name: v}) for v in values]
                if name != "num_gpu_experts":
                    tries += [most_experts(c) for c in tries]
                cfg = max(tries, key=lambda c: (score(c), c == cfg))
            if cfg == before:
                break
        for c in (cfg, *starts):
            if c not in out and score(c) > 0:
                out.append(c)
                break
    return sorted(out, key=score, reverse=True)[:k]


def measured_pruner(p_threshold: float) -> optuna.pruners.BasePruner:
    """WilcoxonPruner (its test runs in scipy); without scipy, MedianPruner after 2 lengths."""
    try:
        import scipy.stats  # noqa: F401  (WilcoxonPruner calls it)
    except ImportError:
        return optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1)
    return optuna.pruners.WilcoxonPruner(p_threshold=p_threshold, n_startup_steps=2)


def _key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


def _config_of(space: SearchSpace, params: dict) -> LaunchConfig:
    return space.config_of(params)


def cheaper_key(comp: Components, cfg: LaunchConfig, req: SearchRequest) -> tuple:
    """How a tie within noise is broken, cheapest first: the VRAM peak (less VRAM, less risk of an
    out-of-memory on a long prompt), then fewer GPU experts, fewer CPU threads, the smaller chunk."""
    ev = evaluate(comp, cfg, req.workload, req.budget)
    return (ev.vram.runtime_peak_bytes, cfg.num_gpu_experts, cfg.cpuinfer_threads, cfg.chunked_prefill_size)


def race_configs(
    cfgs: Sequence[LaunchConfig],
    evaluator: "Evaluator",
    lengths: Sequence[int],
    weights: Sequence[float],
    protocol: Protocol,
    cost: Callable[[LaunchConfig], tuple],
    max_rounds: int = 5,
    stop: Callable[[], bool] | None = None,
    on_sample=None,
    known=None,
    describe: Callable[[LaunchConfig], str] | None = None,
) -> RaceResult:
    """Race launch configurations on measured prefill throughput: one round measures every length
    of every surviving configuration (a fresh sample each), in a shuffled order."""

    def sample(cfg: LaunchConfig, r: int) -> float | None:
        ms = {}
        for n in lengths:
            got = evaluator.measure(cfg, [n])
            if n not in got:
                return None
            ms[n] = float(got[n])
        return prefill_tok_s(ms, lengths, weights)

    label = describe or (
        lambda c: f"{c.chunked_prefill_size}/{c.gpu_prefill_token_threshold}/{c.num_gpu_experts}/{c.cpuinfer_threads}"
    )
    return race(
        list(dict.fromkeys(cfgs)),
        sample,
        protocol,
        cost=cost,
        max_rounds=max_rounds,
        stop=stop,
        on_sample=on_sample,
        known=known,
        describe=label,
    )


def run_measured_search(
    req: MeasuredRequest,
    evaluator: Evaluator,
    model_result: SearchResult,
    on_trial: Callable[[int, int, float | None], None] | None = None,
) -> MeasuredSearchResult:
    """Run (or resume, or join) the measured study. `model_result` is the model search of the same
    request (kttune.search.study.run_search): its pick is measured first."""
    b = req.base
    if req.trials < 1:
        raise ParameterError("trials", f"{req.trials} must be at least 1", "pass e.g. {trials} 20")
    t0 = time.perf_counter()
    comp, space = prepare_search(b)  # the model search's space: the user's chunks bound both
    # The attention backend is the model search's choice too: the path runner attends in one form
    # whatever the backend (it expands every prefix), so its measurements cannot choose it
    # (docs/cost-model.md#mla-prefill-forms).
    space = replace(space, backends=(model_result.best.cfg.attention_backend,))
    lengths, weights = tuple(b.workload.prompt_tokens), tuple(b.workload.weights)
    opened = open_storage(req.storage)
    storage, storage_url = opened.storage, opened.url
    name = measured_study_name(req, space, evaluator.name)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # The KV pool is the model search's choice (it weighs decode, which prefill measurements cannot);
    # the measured study tunes the prefill flags under it.
    fixed = {"kv_k": space.params_of(model_result.best.cfg)["kv_k"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        tpe = optuna.samplers.TPESampler(seed=req.seed, n_startup_trials=5, multivariate=True, constant_liar=True)
        sampler = optuna.samplers.PartialFixedSampler(fixed, tpe)
        pruner = measured_pruner(req.p_threshold)
    study = optuna.create_study(
        study_name=name, storage=storage, direction="maximize", sampler=sampler, pruner=pruner, load_if_exists=True
    )

    cores = b.profile.inventory.cpu.physical_cores or max(space.threads) + 1
    cands = [model_result.best.cfg] + [
        c
        for c in model_prefill_candidates(comp, space, req, req.model_candidates, req.model_prefill_trials, fixed)
        if c != model_result.best.cfg
    ][: max(0, req.model_candidates - 1)]
    base_cfgs = [(bl, *baseline_config(bl, space, cores)) for bl in req.baselines]
    for i, cfg in enumerate(cands):
        study.enqueue_trial(
            space.params_of(cfg),
            user_attrs={"role": "model", "name": "model pick" if i == 0 else f"model prefill #{i}"},
            skip_if_exists=True,
        )
    for bl, cfg, _notes in base_cfgs:
        if evaluate(comp, cfg, b.workload, b.budget).feasible:
            study.enqueue_trial(
                space.params_of(cfg), user_attrs={"role": "baseline", "name": bl.name}, skip_if_exists=True
            )

    worker = f"{socket.gethostname()}:{os.getpid()}"
    new = [0]
    stuck: set[int] = set()  # trials whose parameters never all arrived (kttune.search.twins)

    def measured_count() -> int:
        return sum(
            1
            for t in study.get_trials(
                deepcopy=False, states=(optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
            )
            if t.user_attrs.get("measured")
        )

    def objective(trial: optuna.Trial) -> float:
        cfg = space.suggest(trial)
        trial.set_user_attr("worker", worker)
        ev = evaluate(comp, cfg, b.workload, b.budget)
        if not ev.feasible:
            trial.set_user_attr("infeasible", ev.violated)
            raise optuna.TrialPruned(f"does not fit: {', '.join(ev.violated)}")
        twin = earlier_twin(study, trial.number, trial.params, stuck)  # kttune.search.twins: who measures it
        if twin is not None:  # another process measures it now, or will (two processes can enqueue the same candidate)
            trial.set_user_attr("duplicate_of", twin.number)
            raise optuna.TrialPruned(f"trial {twin.number} measures the same configuration")
        same = [
            t
            for t in study.get_trials(
                deepcopy=False, states=(optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
            )
            if t.params == trial.params and t.user_attrs.get("measured")
        ]
        if same and same[0].state == optuna.trial.TrialState.PRUNED:  # measured before and stopped early
            trial.set_user_attr("duplicate_of", same[0].number)
            raise optuna.TrialPruned(f"trial {same[0].number} measured the same configuration and was stopped early")
        if same:  # measured before (by this process or another): reuse, measure nothing
            trial.set_user_attr("duplicate_of", same[0].number)
            for step, value in same[0].intermediate_values.items():
                trial.report(value, step)
            return same[0].value
        protected = trial.user_attrs.get("role") in ("model", "baseline")
        order = list(range(len(lengths)))
        random.Random(trial.number).shuffle(order)  # the Wilcoxon test assumes no order bias between instances
        ms: dict[int, float] = {}
        for step in order:
            n = lengths[step]
            got = evaluator.measure(cfg, [n])
            if n not in got:  # the evaluator could not measure it (over its time cap, too large for it)
                trial.set_user_attr("unmeasured", n)
                raise optuna.TrialPruned(f"the evaluator could not measure {n} tokens")
            ms[n] = float(got[n])
            if len(ms) == 1:
                trial.set_user_attr("measured", True)
            trial.report(n / (ms[n] / 1e3), step)  # tok/s at this length; the ms follow from it
            if not protected and len(ms) < len(lengths) and trial.should_prune():
                raise optuna.TrialPruned(f"worse than the best after {len(ms)} of {len(lengths)} lengths")
        return prefill_tok_s(ms, lengths, weights)

    def callback(st: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        new[0] += 1
        done = measured_count()
        if on_trial:
            best = None
            try:
                best = st.best_value
            except ValueError:
                pass
            on_trial(done, req.trials, best)
        if done >= req.trials:
            st.stop()

    if measured_count() < req.trials:
        # every configuration may be infeasible or a duplicate: cap the attempts of this process
        study.optimize(
            objective,
            n_trials=max(50, 20 * req.trials),
            timeout=req.budget_s,
            callbacks=[callback],
            gc_after_trial=False,
            catch=(),
        )

    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs.get("measured")]
    pruned = [t for t in trials if t.state == optuna.trial.TrialState.PRUNED and t.user_attrs.get("measured")]
    infeasible = [t for t in trials if t.user_attrs.get("infeasible")]
    if not complete:
        raise UserError(
            f"no configuration was measured in full in study {name!r} ({len(trials)} trials)",
            "raise {budget_s} or {trials}, or check the evaluator",
            params=("budget_s", "trials"),
        )
    by_params = {_key(t.params): t for t in complete}
    by_params_pruned = {_key(t.params): t for t in pruned}

    def describe(label: str, cfg: LaunchConfig, source: str = "", notes: tuple[str, ...] = ()) -> MeasuredConfig:
        fits = evaluate(comp, cfg, b.workload, b.budget).feasible
        pk = _key(space.params_of(cfg))
        t = by_params.get(pk) or by_params_pruned.get(pk)
        ms = {lengths[step]: lengths[step] * 1e3 / v for step, v in (t.intermediate_values.items() if t else ())}
        if t is None:
            state, tok = ("not run" if fits else "infeasible"), None
        elif t.state == optuna.trial.TrialState.COMPLETE:
            state, tok = "complete", float(t.value)
        else:
            state, tok = "pruned", None
        return MeasuredConfig(
            label, cfg, fits, _predicted_tok_s(comp, cfg, req), tok, ms, state, source, notes, t.number if t else None
        )

    def cfg_of(t) -> LaunchConfig:
        return _config_of(space, t.params)

    def norm(c: LaunchConfig) -> LaunchConfig:
        return _config_of(space, space.params_of(c))

    # the race: the best screened trials, the model's pick and the fitting baselines that measured in
    # full, again in interleaved rounds; the winner is declared on intervals
    ranked = sorted(complete, key=lambda t: -t.value)
    finalists = list(dict.fromkeys(cfg_of(t) for t in ranked))[: max(1, req.finalists)]
    complete_keys = set(by_params)
    extra = [
        norm(c) for c in [cands[0]] + [cfg for _, cfg, _ in base_cfgs] if _key(space.params_of(c)) in complete_keys
    ]
    raced = list(dict.fromkeys(finalists + extra))
    rr = race_configs(
        raced, evaluator, lengths, weights, req.protocol, lambda c: cheaper_key(comp, c, b), max_rounds=req.max_rounds
    )
    raced_entry = {e.item: e for e in rr.entries}
    winner = rr.winner if rr.winner is not None else finalists[0]

    def with_race(m: MeasuredConfig) -> MeasuredConfig:
        e = raced_entry.get(norm(m.cfg))
        if e is None or e.estimate is None:
            return m
        vs = None if norm(m.cfg) == winner else compare(raced_entry[winner].estimate, e.estimate)
        return replace(m, measured_tok_s=e.estimate.median, estimate=e.estimate, vs_best=vs, race_status=e.status)

    top = by_params.get(_key(space.params_of(winner))) or ranked[0]
    model_confs = [
        with_race(
            describe(
                "model pick" if i == 0 else f"model prefill #{i}",
                c,
                "kttune search's pick" if i == 0 else "the model's fastest prefill",
            )
        )
        for i, c in enumerate(cands)
    ]
    return MeasuredSearchResult(
        best=with_race(describe("measured pick", winner, f"trial {top.number}, race winner")),
        model_pick=model_confs[0],
        model_candidates=model_confs,
        baselines=[with_race(describe(bl.name, cfg, bl.source, notes)) for bl, cfg, notes in base_cfgs],
        lengths=lengths,
        weights=weights,
        evaluator=evaluator.name,
        study_name=name,
        storage=storage_url,
        trials_measured=len(complete) + len(pruned),
        trials_pruned=len(pruned),
        trials_infeasible=len(infeasible),
        trials_new=new[0],
        wall_s=time.perf_counter() - t0,
        space=space,
        decision=rr.decision,
        race_rounds=rr.rounds,
        notes=tuple(dict.fromkeys((*model_result.notes, *opened.notes))),
    )
