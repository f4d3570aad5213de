"""`kttune tune`: measured launch flags in one call (docs/tune.md).

    result = run_tune(TuneRequest(model="qwen3-30b-a3b", vram_bytes=32 * 2**30), on_event=print)

On a machine with a GPU (the one that will serve):

1. profile: this machine's profile where it holds (measured on a machine with this fingerprint, with
   CPU MoE curves of the method), else a targeted probe of the model's expert shape at the thread
   counts to choose from (CPU MoE and stage A, in a child process); on a CUDA machine, the model's
   attention block too, where the profile lacks it (the cost model's per-layer fixed cost);
2. runner: one runner session (K decoder layers at the model's shapes, one kt-kernel MoE per thread
   count) in a worker process, for every measurement below (kttune.runner.session);
3. crossover: forced single forwards on both paths at sizes around the model's crossover, in
   interleaved rounds (kttune.protocol); the crossover with its interval; the cost model calibrated
   on those forwards (kttune.calibration.entries);
4. search: the calibrated model's pick and fastest prefill configurations, the pick at the measured
   crossover, at the other thread counts and at the chunks either side of its own, the baselines
   (`kt run` defaults, the KT doc example);
5. screen: one round over the candidates; the best `finalists` go on;
6. race: finalists and baselines in interleaved rounds until the slower beyond noise are out; a tie
   within noise goes to the cheaper configuration (less VRAM, fewer GPU experts, fewer threads);
7. check: hybrid and layerwise give the same layer output at the pick's threshold on this machine's
   kt-kernel and kernels (a pick that fails is replaced by the next that passes, or by layerwise off);
8. answer: the launch command, the gains over the baselines with their intervals.

Every sample is saved as it is taken (kttune.app.tuning.state): Ctrl-C keeps them and the same call
resumes. `budget_s` cuts each step at its share of the budget and decides on what was measured.
Without a GPU the cost model answers alone, and says so (`mode` "model").
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from kttune.config import LaunchConfig
from kttune.errors import UserError
from kttune.protocol import Comparison, Protocol, compare, crossing, measure_rounds, prompt_seed, race
from kttune.search.user_flags import usable_threads
from kttune.app.tuning.result import EVALUATORS, PROBE_MODES, Gain, TuneEvent, TuneRequest, TuneResult, VerifyRow
from kttune.app.tuning.state import TuneState

TUNE_VERSION = 1
# shares of the budget at which each step stops (cumulative)
PHASE_SHARES = {"crossover": 0.20, "screen": 0.45, "race": 0.90}
MAX_THREAD_COUNTS = 3
RUN_CAP_S = 30.0  # a run the model predicts (x1.5) longer than this is not measured: one run must not take the budget


class _Clock:
    def __init__(self, budget_s: float | None) -> None:
        self.t0, self.budget_s = time.perf_counter(), budget_s
        self.phases: dict[str, float] = {}
        self._phase, self._since = "", self.t0

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def phase(self, name: str) -> None:
        now = time.perf_counter()
        if self._phase:
            self.phases[self._phase] = round(self.phases.get(self._phase, 0.0) + now - self._since, 2)
        self._phase, self._since = name, now

    def over(self, phase: str) -> Callable[[], bool]:
        share = PHASE_SHARES.get(phase)
        if self.budget_s is None or share is None:
            return lambda: False
        return lambda: self.elapsed() > share * self.budget_s


class _Progress:
    """Counts timed runner samples against the plan's total (which moves as the plan does)."""

    def __init__(self, on_event: Callable[[TuneEvent], None] | None) -> None:
        self.on_event = on_event or (lambda e: None)
        self.done, self.total, self.phase = 0, 0, ""
        self.samples = 0  # timed samples taken by this run

    def plan(self, extra: int) -> None:
        self.total = max(self.done, self.total + extra)
        self.emit("")

    def replan(self, remaining: int) -> None:
        self.total = self.done + max(0, remaining)
        self.emit("")

    def step(self, message: str = "", measured: bool = True) -> None:
        self.done += 1
        self.samples += measured
        self.total = max(self.total, self.done)
        self.emit(message)

    def emit(self, message: str) -> None:
        self.on_event(TuneEvent(self.phase, self.done, self.total, message))

    def say(self, phase: str, message: str) -> None:
        self.phase = phase
        self.emit(message)


def _inputs(req: TuneRequest, profile: str | None = None):
    from kttune.app.inputs import resolve_inputs

    return resolve_inputs(
        req.model,
        req.vram_bytes,
        req.gpus,
        profile or req.profile,
        req.workload,
        req.method,
        req.host_ram_bytes,
        req.vram_margin,
        req.model_path,
        req.weight_path,
        req.chunks,
    )


def _check_request(req: TuneRequest) -> None:
    if req.evaluator not in EVALUATORS:
        raise UserError(f"unknown evaluator {req.evaluator!r}", f"use one of {', '.join(EVALUATORS)}")
    if req.probe not in PROBE_MODES:
        raise UserError(f"--probe {req.probe!r} is not a probe mode", f"use one of {', '.join(PROBE_MODES)}")
    for name, v, lo in (
        ("--repeats", req.repeats, 2),
        ("--layers", req.layers, 1),
        ("--lengths", req.lengths, 1),
        ("--candidates", req.candidates, 1),
        ("--finalists", req.finalists, 1),
    ):
        if v < lo:
            raise UserError(f"{name} {v} must be at least {lo}", f"pass {name} {max(lo, 3)}")
    if req.max_rounds < req.repeats:
        raise UserError(
            f"--max-rounds {req.max_rounds} is below --repeats {req.repeats}", "pass --max-rounds of at least --repeats"
        )
    if req.gpus > 1 and req.evaluator in ("runner", "runner-cpu"):
        raise UserError(
            f"--gpus {req.gpus} with --evaluator {req.evaluator}: the runner in tune measures one GPU (TP 1)",
            "use --gpus 1, or --evaluator model (or auto) for a TP answer from the cost model",
        )
    if req.budget_s is not None and req.budget_s <= 0:
        raise UserError(f"--budget {req.budget_s:g} s must be positive", "pass e.g. --budget 3m")


def _has_cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch, no GPU
        return False


def resolve_evaluator(req: TuneRequest) -> tuple[str, str]:
    """(evaluator, why): `auto` is the runner where CUDA is, else the cost model."""
    if req.evaluator != "auto":
        return req.evaluator, f"--evaluator {req.evaluator}"
    if not _has_cuda():
        return "model", "no GPU here (torch sees no CUDA device)"
    if req.gpus > 1:
        return "model", f"--gpus {req.gpus}: the runner in tune measures one GPU (TP 1)"
    refused = _runner_refusal(req)
    if refused:
        return "model", refused
    return "runner", "a CUDA GPU is present"


def _runner_refusal(req: TuneRequest) -> str | None:
    """Why the path runner cannot run the model with the request's method (DeepSeek-V4's attention,
    MXFP8: `kttune.runner.session.runner_refusal`), or None."""
    from kttune.runner.session import runner_refusal
    from kttune.spec.loader import load_model
    from kttune.spec.methods import get_method

    model = load_model(req.model, req.method)
    return runner_refusal(model, get_method(req.method or model.default_method).name)


def state_key(req: TuneRequest, evaluator: str) -> str:
    fields = {k: v for k, v in req.__dict__.items() if k not in ("state_path", "fresh", "out_dir", "budget_s")}
    blob = json.dumps({**fields, "v": TUNE_VERSION, "evaluator": evaluator}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def default_dir(req: TuneRequest, key: str) -> Path:
    from kttune.paths import cache_dir

    name = Path(req.model).name if os.path.isdir(req.model) else req.model
    return cache_dir() / "tune" / f"{name}-{key}"


# ---- the model's answer (no GPU) --------------------------------------------------------------------


def _model_answer(req: TuneRequest, inp, why: str, clock: _Clock, notes: list[str]) -> TuneResult:
    from kttune.app.search_explain import search
    from kttune.search.measured import prefill_tok_s

    clock.phase("search")
    out = search(inp, trials=300, seed=req.seed, storage=":memory:")
    r = inp.request
    wl = r.workload
    comp = out.result.components
    from kttune.cost.prefill import prefill_time_ms

    pred = prefill_tok_s(
        {n: prefill_time_ms(comp, out.best.cfg, n) for n in wl.prompt_tokens}, wl.prompt_tokens, wl.weights
    )
    prof = r.profile.provenance
    notes = [
        f"{why}: answered from the cost model on the {prof.kind} profile of {prof.machine!r}; nothing was measured"
    ] + notes
    clock.phase("")
    return TuneResult(
        mode="model",
        model=r.model.name,
        method=r.method,
        evaluator="model",
        profile=prof.machine,
        pick=out.best.cfg,
        argv=tuple(out.argv),
        decision="the cost model's pick (not measured)",
        lengths=tuple(wl.prompt_tokens),
        weights=tuple(wl.weights),
        predicted_tok_s=pred,
        phases_s=dict(clock.phases),
        wall_s=round(clock.elapsed(), 2),
        notes=tuple(dict.fromkeys(notes)),
    )


# ---- profile ----------------------------------------------------------------------------------------


def profile_holds(profile, here, method: str) -> tuple[bool, str]:
    """Whether `profile` answers for this machine (`here`, its Inventory or None): measured on one with
    the same fingerprint, with kt-kernel CPU MoE curves of `method`."""
    from kttune.hw.fingerprint import is_this_machine

    if here is None or not is_this_machine(here, profile.fingerprint):
        return False, f"the profile ({profile.provenance.machine}) was not measured on a machine like this one"
    if not profile.curves_of("cpu_moe", method=method):
        return False, f"the profile has no {method} CPU MoE curves"
    return True, f"measured on this machine kind ({profile.provenance.machine}) with {method} CPU MoE curves"


def _probe_child(model: str, method: str, small: bool, threads: tuple[int, ...], queue) -> None:
    try:
        from kttune.probes.run import ProbeOptions, run_probe
        from kttune.spec.loader import load_model

        spec = load_model(model, method)
        if small:
            from kttune.runner.stack import small_spec

            spec = small_spec(spec)
        prof = run_probe(
            ProbeOptions(
                quick=True,
                model=spec,
                methods=(method,),
                threads=threads,
                stage_a=True,
                host_ram=False,
                gpu=False,
                attention_block=not small,  # where CUDA is; the small variant's block is not the model's
                merge_cached=True,
                write_cache=True,
                command=f"kttune tune: CPU MoE, stage A and attention block of {spec.name} {method}",
            )
        )
        queue.put(("ok", len(prof.curves), list(prof.provenance.notes)[-3:]))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        queue.put(("error", f"{type(e).__name__}: {e}", []))


def block_measured(profile, model_name: str) -> bool:
    """Whether `profile` holds an attention-block curve of this model (the cost model's per-layer
    fixed cost, docs/cost-model.md#the-attention-blocks-fixed-cost; without it the model borrows
    another model's)."""
    return any(c.params.get("model") == model_name for c in profile.curves_of("attention_block"))


def _probe_attention_block(req: TuneRequest, inp, inv, prog: _Progress):
    """(inputs, what was done): the model's attention block timed on this GPU (seconds), the rest of
    the profile as it was. Into this machine's cached profile where there is one (the next tune
    finds it); else, when the profile in use is a shipped one measured on this machine kind, into
    this run's copy only (a cache of one curve would hide the shipped curves from the next run)."""
    from kttune.hw.registry import cached_profile_for_this_machine
    from kttune.probes.run import ProbeOptions, curves_not_remeasured, run_probe

    spec = inp.request.model
    prog.say("probe", f"timing the attention block of {spec.name} on this GPU (the profile has none of this model)")
    t0 = time.perf_counter()
    cached = cached_profile_for_this_machine(inv) is not None
    prof = run_probe(
        ProbeOptions(
            quick=True,
            model=spec,
            methods=(inp.request.method,),
            cpu_moe=False,
            stage_a=False,
            host_ram=False,
            gpu=False,
            attention_block=True,
            merge_cached=cached,
            write_cache=cached,
            command=f"kttune tune: attention block of {spec.name}",
        )
    )
    new = [c for c in prof.curves if c.kind == "attention_block" and c.params.get("model") == spec.name]
    info = {"model": spec.name, "curves": len(new), "seconds": round(time.perf_counter() - t0, 1)}
    if not new:
        info["notes"] = [n for n in prof.provenance.notes if "attention block" in n][-2:]
        return inp, info
    if cached:
        info["into"] = "this machine's cached profile"
        return _inputs(req), info
    old = inp.request.profile
    note = f"attention block of {spec.name} measured on this machine by kttune tune (not cached)"
    merged = replace(
        old,
        curves=tuple(curves_not_remeasured(old.curves, new)) + tuple(new),
        provenance=replace(old.provenance, notes=old.provenance.notes + (note,)),
    )
    info["into"] = "this run's copy of the profile (no cached profile of this machine to keep it in)"
    return replace(inp, request=replace(inp.request, profile=merged)), info


def _profile_step(req: TuneRequest, inp, small: bool, prog: _Progress):
    """(inputs on the profile to use, what was done): the given profile, this machine's where it
    holds, or a targeted probe in a child process (kt-kernel keeps every layer a probe builds)."""
    if req.profile:
        return inp, {"action": "given", "profile": req.profile}
    from kttune.app.inputs import this_machine_inventory

    inv = this_machine_inventory()
    holds, why = profile_holds(inp.request.profile, inv, inp.request.method)
    if req.probe == "never" or (holds and req.probe == "auto"):
        info = {
            "action": "reused" if holds else "not probed (--probe never)",
            "why": why,
            "profile": inp.request.profile.provenance.machine,
        }
        # the small CPU variant's block is not the model's: the cost model would take it for it
        if holds and req.probe == "auto" and not small and _has_cuda():
            if not block_measured(inp.request.profile, inp.request.model.name):
                inp, info["attention_block"] = _probe_attention_block(req, inp, inv, prog)
        return inp, info
    import multiprocessing as mp

    from kttune.probes.common import probe_thread_counts

    cores = (inv.cpu.physical_cores if inv is not None else None) or os.cpu_count() or 2
    threads = tuple(probe_thread_counts(cores, quick=False))
    prog.say(
        "probe",
        f"probing {inp.request.model.name} {inp.request.method} CPU MoE and stage A at {', '.join(map(str, threads))} threads ({why})",
    )
    t0 = time.perf_counter()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_probe_child, args=(req.model, inp.request.method, small, threads, q))
    p.start()
    try:
        status, detail, pnotes = q.get(timeout=1800)
    finally:
        p.join(60)
        if p.is_alive():
            p.kill()
    if status != "ok":
        raise RuntimeError(f"the probe failed: {detail}")
    return _inputs(req), {
        "action": "probed",
        "why": why,
        "threads": list(threads),
        "curves": detail,
        "seconds": round(time.perf_counter() - t0, 1),
        "notes": pnotes,
    }


# ---- the measured answer -----------------------------------------------------------------------------


def _label(cfg: LaunchConfig) -> str:
    """chunk/threshold/GPU experts/threads (and the KV pool, which tells two baselines apart)."""
    return (
        f"{cfg.chunked_prefill_size}/{cfg.gpu_prefill_token_threshold}/{cfg.num_gpu_experts}/{cfg.cpuinfer_threads}"
        f"/kv{cfg.max_total_tokens}"
    )


def _thread_candidates(space, cores: int) -> list[int]:
    return usable_threads(space.threads, cores)[-MAX_THREAD_COUNTS:]


def sweep_sizes(predicted: float | None, cap: int, lo: int = 32, count: int = 5) -> list[int]:
    """Forward sizes for the crossover: `count` sizes a factor of two apart, centred on the predicted
    crossover (or ending at `cap` without one), moved down to end at `cap` where they would pass
    it and up to start at `lo`; multiples of 32."""
    cap = max(lo, cap)
    top = min(cap, (predicted or cap) * 2 ** (count // 2))
    top = max(top, min(cap, lo * 2 ** (count - 1)))
    raw = [top / 2**i for i in range(count)]
    return sorted({min(cap, max(lo, int(round(x / 32)) * 32)) for x in raw})


def run_tune(
    req: TuneRequest, on_event: Callable[[TuneEvent], None] | None = None, keep_runner: bool = False
) -> TuneResult:
    """Tune the launch flags for `req` (module docstring). Raises UserError on bad input; a Ctrl-C
    leaves the samples saved in the state file. `keep_runner`: leave the runner session running and
    hand it back as `result.runner` (a benchmark measures more on it; the caller closes it)."""
    _check_request(req)
    clock = _Clock(req.budget_s)
    prog = _Progress(on_event)
    clock.phase("inputs")
    inp = _inputs(req)
    evaluator, why = resolve_evaluator(req)
    notes = list(inp.notes)
    if evaluator == "model":
        res = _model_answer(req, inp, why, clock, notes)
        res.report_dir = str(Path(req.out_dir) if req.out_dir else default_dir(req, state_key(req, evaluator)))
        return res
    small = evaluator == "runner-cpu"
    clock.phase("probe")
    inp, probe = _profile_step(req, inp, small, prog)
    return _measured(req, inp, evaluator, small, probe, clock, prog, notes, keep_runner)


def _measured(
    req: TuneRequest,
    inp,
    evaluator: str,
    small: bool,
    probe: dict,
    clock: _Clock,
    prog: _Progress,
    notes: list[str],
    keep_runner: bool = False,
) -> TuneResult:
    from kttune.app.search_explain import command_for
    from kttune.calibration.entries import Calibration
    from kttune.cost.components import Components
    from kttune.cost.prefill import crossover_tokens, prefill_time_ms
    from kttune.app.runner_evaluator import path_runner_evaluator
    from kttune.search.evaluate import evaluate
    from kttune.search.measured import prefill_tok_s
    from kttune.search.study import StudyOptions, prepare_search, run_search
    from kttune.app.tuning.candidates import cost_of, dedupe, measurement_key, tune_baselines, tune_candidates

    if small:
        from kttune.runner.stack import small_spec

        inp = replace(inp, request=replace(inp.request, model=small_spec(inp.request.model)))
        notes.append(
            "CPU variant (--evaluator runner-cpu): the model's architecture at small shapes on this CPU, "
            "measured and searched as the model; a check of the flow, not advice for the real model"
        )
    base = inp.request
    meas_wl = base.workload.reduced(req.lengths)
    lengths, weights = tuple(meas_wl.prompt_tokens), tuple(meas_wl.weights)
    if len(lengths) < len(base.workload.prompt_tokens):
        notes.append(
            f"measured at {len(lengths)} representative lengths of the workload's {len(base.workload.prompt_tokens)} "
            f"({', '.join(map(str, lengths))} tokens, request-weighted)"
        )
    key = state_key(req, evaluator)
    home = default_dir(req, key)
    state = TuneState(Path(req.state_path) if req.state_path else home / "state.json", key, req.fresh)
    protocol = Protocol(repeats=req.repeats, seed=req.seed)
    comp0, space = prepare_search(base)
    cores = base.profile.inventory.cpu.physical_cores or max(space.threads) + 1
    baselines = tune_baselines(comp0, space, base, cores)
    threads = sorted(
        set(_thread_candidates(space, cores)) | {cfg.cpuinfer_threads for _, cfg, _, fits in baselines if fits}
    )
    ev = path_runner_evaluator(
        inp,
        "cpu" if small else "cuda",
        threads=threads,
        chunks=space.chunks,
        layers=req.layers,
        lengths=lengths,
        max_run_s=RUN_CAP_S,
    )
    layerwise = comp0.method.layerwise
    mkey = lambda c: measurement_key(c, lengths, layerwise, lambda t: ev.thread_map.get(t, t))  # noqa: E731
    stopped = ""
    try:
        clock.phase("runner")
        if not state.get("finished"):  # a finished run resumed needs no runner
            prog.say(
                "runner",
                f"building the runner: {req.layers} layers of {base.model.name} {base.method}, "
                f"kt-kernel threads {', '.join(map(str, ev.spec.threads))}",
            )
            ev.session  # noqa: B018 - starts the worker (the build is this phase's time)

        # ---- crossover and calibration --------------------------------------------------------------
        clock.phase("crossover")
        pick0 = run_search(base, StudyOptions(trials=150, seed=req.seed, storage=":memory:")).best.cfg
        pred0 = crossover_tokens(comp0, pick0) if layerwise else None
        cap = min(ev.spec.max_tokens, ev.spec.cpu_max_tokens)
        sizes = sweep_sizes(pred0, cap) if layerwise else []
        items = [(m, p) for m in sizes for p in ("hybrid", "layerwise")]
        prog.phase = "crossover"
        prog.plan(len(items) * req.repeats)
        points: dict = {}  # this run's calibration points per item (their keys in the state)

        def sweep_sample(item, r):
            m, path = item
            cfg = replace(pick0, chunked_prefill_size=m, gpu_prefill_token_threshold=m)
            run = ev.sample_run(cfg, m, force=path, seed=prompt_seed(req.seed, r))
            if run is None:
                return None
            from kttune.calibration.runner import forward_points

            # the forward as the search sees it: at the searched thread count (the CPU variant runs fewer)
            pts = forward_points(replace(run, cpuinfer=cfg.cpuinfer_threads), comp0)
            if pts:
                state.put(f"point/{m}/{path}/{r}/{len(points.get(item, []))}", pts[0].to_dict())
                points.setdefault(item, []).append(pts[0].to_dict())
            prog.step(f"crossover: {m} tokens {path}, {run.measured_ms:.1f} ms")
            return run.measured_ms

        known = {(int(k.split(":")[0]), k.split(":")[1]): v for k, v in state.samples("crossover").items()}
        rounds = measure_rounds(
            items,
            sweep_sample,
            protocol,
            known=known,
            stop=clock.over("crossover"),
            on_sample=lambda it, r, v: state.add("crossover", f"{it[0]}:{it[1]}", r, v),
        )
        ratios = {
            m: compare(rounds.estimates[(m, "hybrid")], rounds.estimates[(m, "layerwise")])
            for m in sizes
            if (m, "hybrid") in rounds.estimates and (m, "layerwise") in rounds.estimates
        }
        cross = crossing(sorted(ratios), [ratios[m] for m in sorted(ratios)]) if len(ratios) >= 2 else None
        stored = [v for k, v in state.data["results"].items() if k.startswith("point/")]
        cal = Calibration.fit(stored, source="kttune tune crossover sweep") if stored else None
        profile_cal = replace(base.profile, calibration=tuple(cal.to_dicts())) if cal and cal.entries else base.profile
        base_cal = replace(base, profile=profile_cal)
        comp = Components(profile_cal, base.model, base.method, base.tp)
        pred_cal = crossover_tokens(comp, pick0) if layerwise else None
        crossover = {
            "gpu_experts": pick0.num_gpu_experts,
            "threads": pick0.cpuinfer_threads,
            "sizes": sizes,
            "estimates": {f"{m}:{p}": e.to_dict() for (m, p), e in rounds.estimates.items()},
            "ratio_layerwise_over_hybrid": {str(m): c.to_dict() for m, c in ratios.items()},
            "measured": cross.to_dict() if cross else None,
            "predicted_raw": pred0,
            "predicted_calibrated": pred_cal,
        }
        if rounds.stopped:
            stopped = "the budget's share for the crossover was spent"

        # ---- candidates ---------------------------------------------------------------------------
        clock.phase("search")
        prog.say("search", "searching the calibrated model")
        model_res = run_search(base_cal, StudyOptions(trials=300, seed=req.seed, storage=":memory:"))
        pick_m = model_res.best.cfg
        cost = cost_of(comp, base_cal)
        x = cross.x if cross and cross.x else None
        named = tune_candidates(
            comp, space, base_cal, pick_m, req.candidates, x, _thread_candidates(space, cores), req.seed
        )
        named = dedupe(named, mkey, cost)
        pick_c = next((c for n, c in named if n == "model pick"), None)
        base_named = [(n, c, nt, fits) for n, c, nt, fits in baselines]
        by_label = {_label(c): c for _, c in named}
        by_label.update({_label(c): c for _, c, _, _ in base_named})
        name_of = {}
        for n, c in named + [(n, c) for n, c, _, _ in base_named]:
            name_of.setdefault(c, n)

        # ---- screen -----------------------------------------------------------------------------------
        clock.phase("screen")
        prog.phase = "screen"
        prog.plan(len(named) * len(lengths))

        def tok_s_sample(cfg: LaunchConfig, r: int) -> float | None:
            ms = {}
            for n in lengths:
                got = ev.measure(cfg, [n])
                prog.step(
                    f"{name_of.get(cfg, _label(cfg))}: {n} tokens"
                    + (f", {got[n] / 1e3:.2f} s" if n in got else ", not measurable"),
                    measured=n in got,
                )
                if n not in got:
                    return None
                ms[n] = got[n]
            return prefill_tok_s(ms, lengths, weights)

        cands = [c for _, c in named]

        def why_not(cfg: LaunchConfig) -> str:
            """Why `cfg` could not be measured (kept in the state: a resumed run does not try again)."""
            why = (ev.skipped.get(cfg) or [{}])[-1].get("reason") or "could not be measured"
            state.put(f"unmeasurable/{_label(cfg)}", why)
            return why

        unmeasurable = {
            by_label[k.split("/", 1)[1]]: v
            for k, v in state.data["results"].items()
            if k.startswith("unmeasurable/") and k.split("/", 1)[1] in by_label
        }

        known_screen = {by_label[k]: v for k, v in state.samples("screen").items() if k in by_label}
        screen = measure_rounds(
            [c for c in cands if c not in unmeasurable],
            tok_s_sample,
            protocol,
            rounds=1,
            known=known_screen,
            stop=clock.over("screen"),
            on_sample=lambda c, r, v: state.add("screen", _label(c), r, v),
            unmeasurable=why_not,
        )
        ranked = sorted(screen.estimates, key=lambda c: -screen.estimates[c].median)
        finalists = ranked[: req.finalists]
        if pick_c in screen.estimates and pick_c not in finalists:
            finalists.append(pick_c)  # the model's pick is always verified
        if screen.stopped:
            stopped = stopped or "the budget's share for screening was spent"

        # ---- race ---------------------------------------------------------------------------------------
        clock.phase("race")
        prog.phase = "race"
        racers = list(dict.fromkeys(finalists + [c for _, c, _, fits in base_named if fits and c not in unmeasurable]))
        prog.plan(len(racers) * len(lengths) * req.max_rounds - len(finalists) * len(lengths))
        # the screening round is the finalists' round 0; the race's own samples resume from the state
        known_race = {c: [(0, v, f) for _, v, f in screen.samples.values.get(c, [])][:1] for c in finalists}
        for k, vs in state.samples("race").items():
            if k in by_label:
                known_race.setdefault(by_label[k], []).extend(vs)

        def on_round(r: int, alive: list) -> None:
            prog.replan(len(alive) * len(lengths) * max(0, req.max_rounds - r))

        rr = race(
            racers,
            tok_s_sample,
            protocol,
            cost=cost,
            max_rounds=req.max_rounds,
            tie_tolerance=req.tie_tolerance,
            known=known_race,
            stop=clock.over("race"),
            on_round=on_round,
            unmeasurable=why_not,
            on_sample=lambda c, r, v: state.add("race", _label(c), r, v),
            describe=lambda c: name_of.get(c, _label(c)),
        )
        if rr.stopped:
            stopped = stopped or f"the budget's share for the race was spent after {rr.rounds} rounds"

        # ---- output check ------------------------------------------------------------------------------
        clock.phase("check")
        prog.say("check", "checking that hybrid and layerwise agree at the pick's threshold")
        est = {e.item: e.estimate for e in rr.entries if e.estimate is not None}
        order = [rr.winner] + sorted(
            (c for c in est if c != rr.winner and c in finalists), key=lambda c: -est[c].median
        )
        pick, check, tried = None, {}, []
        for c in [c for c in order if c is not None][:3]:
            check = dict(state.get(f"check/{_label(c)}") or ev.paths_agree(c))
            state.put(f"check/{_label(c)}", check)
            tried.append(_label(c))
            if check.get("agree"):
                pick = c
                break
        if pick is None:
            base_pick = rr.winner or finalists[0]
            pick = replace(base_pick, gpu_prefill_token_threshold=0)
            notes.append(
                f"hybrid and layerwise disagree at the thresholds of {', '.join(tried)}: layerwise is turned off "
                "(--kt-gpu-prefill-token-threshold 0) and the pick is not measured that way"
            )
        elif pick != rr.winner:
            notes.append(
                f"the race's winner {name_of.get(rr.winner, '')} ({_label(rr.winner)}) failed the output check; "
                f"the next that passes, {_label(pick)}, is the pick"
            )
        check = {**check, "configurations_checked": tried}
        info = ev.info() if ev.started else {}
        memory = ev.memory() if ev.started else {}
        state.put("finished", True)
    except BaseException:
        ev.close()
        raise
    if not keep_runner:
        ev.close()

    # ---- the answer --------------------------------------------------------------------------------------
    clock.phase("")
    entries = {e.item: e for e in rr.entries}
    pick_est = est.get(pick)

    def predicted(cfg: LaunchConfig) -> float:
        return prefill_tok_s({n: prefill_time_ms(comp, cfg, n) for n in lengths}, lengths, weights)

    def vs_pick(cfg: LaunchConfig) -> Comparison | None:
        e = est.get(cfg)
        return compare(pick_est, e) if (e is not None and pick_est is not None and cfg != pick) else None

    rows = []
    role_of = {c: "baseline" for _, c, _, _ in base_named}
    for c in racers:
        e = entries.get(c)
        role = "pick" if c == pick else role_of.get(c, "runner-up")
        rows.append(
            VerifyRow(
                name_of.get(c, _label(c)),
                role,
                c,
                True,
                predicted(c),
                est.get(c),
                vs_pick(c),
                e.status if e else "not measured",
                (e.reason,) if e and e.reason else (),
            )
        )
    for n, c, nt, fits in base_named:
        if not fits:
            rows.append(VerifyRow(n, "baseline", c, False, None, None, None, "does not fit the budget", nt))
        elif c not in racers:
            rows.append(
                VerifyRow(n, "baseline", c, True, predicted(c), None, None, unmeasurable.get(c, "not measured"), nt)
            )
        elif nt:
            rows = [replace(r, notes=r.notes + nt) if r.cfg == c and r.role == "baseline" else r for r in rows]
    for c in cands:
        if c not in racers:
            status = (
                "screened out"
                if c in screen.estimates
                else (screen.samples.unmeasurable.get(c) or unmeasurable.get(c) or "not measured")
            )
            rows.append(
                VerifyRow(
                    name_of.get(c, _label(c)), "candidate", c, True, predicted(c), screen.estimates.get(c), None, status
                )
            )
    if pick not in racers:  # layerwise turned off after a failed check
        rows.insert(
            0, VerifyRow("pick (layerwise off)", "pick", pick, True, predicted(pick), None, None, "not measured")
        )
    gains = []
    for n, c, _, fits in base_named:
        e = est.get(c)
        if fits and e is not None and pick_est is not None and c != pick:
            g = compare(e, pick_est)
            gains.append(Gain(n, g.ratio, g.low, g.high))
    full_eval = evaluate(comp, pick, base.workload, base.budget)
    argv = tuple(command_for(replace(inp, request=base_cal), full_eval))
    decision = rr.decision
    if stopped:
        decision += f" ({stopped}: decided on what was measured)"
    result = TuneResult(
        mode="measured",
        model=base.model.name,
        method=base.method,
        evaluator=ev.name,
        profile=base.profile.provenance.machine,
        pick=pick,
        argv=argv,
        decision=decision,
        lengths=lengths,
        weights=weights,
        rows=tuple(rows),
        gains=tuple(gains),
        pick_estimate=pick_est,
        predicted_tok_s=predicted(pick),
        crossover=crossover,
        calibration=cal.to_dicts() if cal else [],
        check=check,
        probe=probe,
        phases_s=dict(clock.phases),
        protocol={
            **protocol.to_dict(),
            "max_rounds": req.max_rounds,
            "race_rounds": rr.rounds,
            "tie_tolerance": req.tie_tolerance,
            "session": info.get("stats", {}),
            "threads_built": list(ev.spec.threads),
            "thread_map": ev.thread_map,
            "samples_this_run": prog.samples,
        },
        memory=memory,
        wall_s=round(clock.elapsed(), 2),
        resumed=state.resumed,
        state_path=str(state.path or ""),
        report_dir=str(Path(req.out_dir) if req.out_dir else home),
        notes=tuple(dict.fromkeys(notes)),
        stopped=stopped,
    )
    result.runner = ev if keep_runner else None
    result.space, result.components, result.request = space, comp, base_cal
    return result
