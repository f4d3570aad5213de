"""`kttune paths` as a library call: build the K layers of a model once (a runner session,
kttune.runner.session), run a grid of prompts on the switch (and, with `force`, on each path
alone) per GPU-expert count through the measurement protocol (kttune.protocol), and hold the cost
model and the memory model to every run.

Runs whose predicted time (cost model, x `slack`) exceeds `max_run_s` are skipped with the reason,
so a grid fits a time budget; so are forwards larger than the buffers."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from kttune.errors import UserError
from kttune.schema import schema
from kttune.runner.result import PathRun

Progress = Callable[[str], None]


@dataclass(frozen=True)
class PathsRequest:
    model: str
    method: str | None = None
    layers: int = 2
    gpu_experts: tuple[int, ...] = (0,)
    chunks: tuple[int, ...] = (4096,)
    prompts: tuple[int, ...] = (1024, 8192)
    threshold: int | None = None  # None: each chunk's own size (full chunks layerwise, tail hybrid)
    force: tuple[str, ...] = ()  # also run every prompt forced onto these paths
    sweep: tuple[int, ...] = ()  # forward sizes timed on both paths alone (crossover)
    # explicit (prompt, chunk, threshold, GPU experts) runs instead of the chunks x prompts grid (a
    # space-filling design); `gpu_experts` should hold every count they name
    points: tuple[tuple[int, int, int, int], ...] = ()
    cpuinfer: int = 0
    device: str = ""
    small: bool = False  # the model's architecture at small shapes (the CPU variant)
    cpu_max_tokens: int = 4096
    max_run_s: float = 60.0
    repeats: int = 3  # timed samples per run, in interleaved rounds (kttune.protocol)
    slack: float = 1.5
    profile: str | None = None  # for the predictions (default: the shipped default profile)
    seed: int = 0


@dataclass
class PathsResult:
    request: PathsRequest
    runs: list[PathRun] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    predictions: list[dict] = field(default_factory=list)  # one per run, same order
    summary: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "schema": schema("paths"),
            "request": {k: list(v) if isinstance(v, tuple) else v for k, v in self.request.__dict__.items()},
            "runs": [r.to_dict() | {"prediction": p} for r, p in zip(self.runs, self.predictions)],
            "skipped": self.skipped,
            "summary": self.summary,
            "notes": self.notes,
        }


def run_paths(req: PathsRequest, progress: Progress | None = None) -> PathsResult:
    """Build a runner session for the model and measure the request's runs through the measurement
    protocol (kttune.protocol): per GPU-expert count, every run is warmed, then timed `repeats` times
    in interleaved rounds; each run's record is the sample nearest the median, with the repeats'
    estimates (median, interval, outliers and their reasons) under `timing`."""
    import torch

    from kttune.runner.session import RunnerSession, SessionSpec
    from kttune.protocol import Protocol
    from kttune.spec.loader import load_model
    from kttune.spec.methods import get_method

    say = progress or (lambda s: None)
    spec = load_model(req.model, req.method)
    method = get_method(req.method or spec.default_method).name
    if not 1 <= req.layers <= spec.num_moe_layers:
        raise UserError(
            f"--layers {req.layers} is outside 1..{spec.num_moe_layers}, the MoE layers of {spec.name}",
            "pass e.g. --layers 2",
        )
    for n in req.gpu_experts:
        if not 0 <= n <= spec.num_experts:
            raise UserError(
                f"--gpu-experts {n} is outside 0..{spec.num_experts} for {spec.name}", "pass a count per MoE layer"
            )
    for f in req.force:
        if f not in ("hybrid", "layerwise"):
            raise UserError(f"--force {f!r} is not a path", "use hybrid or layerwise")
        if f == "layerwise" and not get_method(method).layerwise:
            raise UserError(f"{method} has no layerwise path", "force hybrid only, or pick a native method")
    if req.repeats < 1:
        raise UserError(f"--repeats {req.repeats} must be at least 1", "pass e.g. --repeats 3")
    if any(c < 1 for c in req.chunks) or any(p < 1 for p in req.prompts):
        raise UserError("chunks and prompt lengths must be positive", "pass token counts such as 4096")
    res = PathsResult(req)
    if req.small:
        res.notes.append("small shapes (CPU variant): predictions are for the real model and are not compared")
    max_fwd = max(list(req.chunks) + list(req.sweep) + [c for _, c, _, _ in req.points] + [1])
    session = RunnerSession(
        SessionSpec(
            model=req.model,
            method=req.method,
            layers=req.layers,
            threads=(req.cpuinfer,) if req.cpuinfer else (),
            max_tokens=max_fwd,
            cpu_max_tokens=min(req.cpu_max_tokens, max_fwd),
            device=req.device,
            small=req.small,
            seed=req.seed,
            max_run_s=req.max_run_s,
            slack=req.slack,
            profile=req.profile,
        ),
        say,
    )
    res.notes.append(
        f"stack built in {session.build_s:.1f} s"
        + ("; " + "; ".join(session.stack.notes) if session.stack.notes else "")
    )
    protocol = Protocol(repeats=req.repeats, seed=req.seed)
    profile = session.profile
    try:
        for n in req.gpu_experts:
            _run_grid(req, res, session, min(n, session.run_spec.num_experts), n, spec, method, protocol, say)
    finally:
        res.notes.append(
            "protocol: "
            + ", ".join(f"{k} {round(v, 1) if isinstance(v, float) else v}" for k, v in session.stats.items())
        )
        session.close()
        del session
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if not req.small:
        res.summary = summarize(res.runs, profile, spec)
    return res


@dataclass(frozen=True)
class RunnerJob:
    """One run of the grid: a prompt under a configuration, on the switch or forced onto a path."""

    cfg: "object"  # kttune.runner.session.RunnerConfig
    prompt: int
    force: str | None = None

    def label(self) -> str:
        c = self.cfg
        return f"L={self.prompt} chunk={c.chunk} thr={c.threshold} n={c.gpu_experts}" + (
            f" forced {self.force}" if self.force else ""
        )


def grid_jobs(req: PathsRequest, session, n: int, threads: int) -> list[RunnerJob]:
    """The runs of one GPU-expert count: the sweep's single forwards on each path, then every prompt
    at every chunk (and forced onto the request's paths); the same forwards under another chunk once."""
    from kttune.runner.session import RunnerConfig

    jobs: list[RunnerJob] = []
    for m in req.sweep:
        for f in ("hybrid", "layerwise") if session.layerwise else ("hybrid",):
            jobs.append(RunnerJob(RunnerConfig(n, m, m, threads), m, f))
    seen = set()
    grid = (
        [(p, c, thr) for p, c, thr, pn in req.points if pn == n]
        if req.points
        else [(p, c, c if req.threshold is None else req.threshold) for c in req.chunks for p in req.prompts]
    )
    for p, c, thr in grid:
        for f in (None,) + tuple(req.force):
            cfg = RunnerConfig(n, c, thr, threads)
            key = (session.plan(cfg, p, f), thr, f)
            if key not in seen:
                seen.add(key)
                jobs.append(RunnerJob(cfg, p, f))
    return jobs


def measure_jobs(
    session, jobs: list[RunnerJob], protocol, say: Progress, seed: int = 0, stop=None
) -> tuple[dict, dict, dict]:
    """Every job through the protocol's interleaved rounds on `session`: ({job: representative PathRun
    with its `timing`}, {job: skip reason}, the rounds' record). A run whose K layers are far apart
    (`compare.disturbed`) is an outlier with that reason; one that raises (out of memory, too large)
    is not measurable, with the error.

    Round r draws its prompt with `seed + r` (`prompt_seed`): the hidden states, so the router's
    choice, differ from round to round and are the same for every job of one round (a round's jobs
    stay paired). At a few tokens one draw moves a large share of the routed pairs on or off the GPU
    experts (docs/path-runner.md#one-prompt-draw-per-round); repeats of one draw would leave that
    spread out of the interval."""
    import torch

    from kttune.calibration.runner import disturbed
    from kttune.protocol import measure_rounds, prompt_seed

    skipped: dict = {}
    todo = []
    for j in jobs:
        why = session.skip_reason(j.cfg, j.prompt, j.force)
        if why:
            skipped[j] = why
            say(f"skip {j.label()}: {why}")
        else:
            todo.append(j)
    runs: dict = {}
    errors: dict = {}

    def sample(job: RunnerJob, r: int):
        try:
            run = session.sample(job.cfg, job.prompt, job.force, seed=prompt_seed(seed, r))
        except (ValueError, torch.cuda.OutOfMemoryError) as e:  # type: ignore[attr-defined]
            errors[job] = f"{type(e).__name__}: {str(e)[:200]}"
            if session.stack.is_cuda:
                torch.cuda.empty_cache()
            return None
        runs.setdefault(job, []).append(run)
        say(
            f"run {job.label()} (round {r + 1}): {run.measured_ms:.1f} ms ({len(run.forwards)} forwards: {','.join(run.paths)})"
        )
        return run.measured_ms

    def flag(job: RunnerJob, value: float):
        bad = [f for f in runs[job][-1].forwards if disturbed(f)]
        return f"{len(bad)} forward(s) with layers over 3x apart" if bad else None

    rounds = measure_rounds(
        todo, sample, protocol, flag=flag, unmeasurable=lambda j: errors.get(j, "could not be measured"), stop=stop
    )
    out = {}
    for j in todo:
        if j in errors and j not in runs:
            skipped[j] = errors[j]
            continue
        est = rounds.estimates.get(j)
        if est is not None:
            out[j] = representative_run(runs[j], est, protocol)
    return out, skipped, rounds.to_dict(lambda j: j.label())


def representative_run(tries: list[PathRun], est, protocol) -> PathRun:
    """The record of a run measured once per round (`tries`, in round order; `est` the estimate of
    their K-layer times): the sample nearest the median among those not left out as outliers, with
    the estimates of its K-layer and extrapolated times under `timing` and the largest peaks of all
    the samples (the peak is a maximum over the rounds)."""
    flags = {o.index: o.reason for o in est.outliers}
    ext = protocol.estimate([t.extrapolated_ms for t in tries], est.rounds, flags)
    kept = [i for i in range(len(tries)) if i not in flags] or list(range(len(tries)))
    rep = min(kept, key=lambda i: abs(tries[i].measured_ms - est.median))
    return replace(
        tries[rep],
        timing={"measured_ms": est.to_dict(), "extrapolated_ms": ext.to_dict()},
        peak_allocated_bytes=max(t.peak_allocated_bytes for t in tries),
        peak_reserved_bytes=max(t.peak_reserved_bytes for t in tries),
    )


def _run_grid(req, res, session, n, n_asked, spec, method, protocol, say) -> None:
    threads = session.threads[0]
    jobs = grid_jobs(req, session, n, threads)
    done, skipped, _ = measure_jobs(session, jobs, protocol, say, seed=req.seed)
    for j, why in skipped.items():
        res.skipped.append(
            {
                "prompt": j.prompt,
                "chunk": j.cfg.chunk,
                "threshold": j.cfg.threshold,
                "gpu_experts": n_asked,
                "force": j.force,
                "reason": why,
            }
        )
    driver = next((r.pipeline_driver for r in done.values() if r.pipeline_driver), None)
    comps = _components(session.profile, spec, method, driver=driver) if session.profile is not None else None
    for j in jobs:
        if j in done:
            res.runs.append(done[j])
            res.predictions.append({} if req.small else _predict(comps, session.profile, spec, done[j]))


def _components(profile, spec, method, calibration: tuple = (), driver: str | None = None, tp: int = 1):
    """The cost model of the runner's runs at their TP size (`PathRun.tp`: a session runs 1,
    `kttune.runner.tp` more): `driver` is the layerwise pipeline driver they ran
    (`PathRun.pipeline_driver`), so the load is predicted for the pipeline that was measured; not
    recorded: the probe's fastest configuration (the runner's own, never sglang-kt's loop)."""
    from kttune.cost.components import FASTEST_PIPELINE, Components

    try:
        return Components(
            replace(profile, calibration=calibration), spec, method, tp, pipeline_driver=driver or FASTEST_PIPELINE
        )
    except UserError:
        return None


def _predict(comps, profile, spec, run: PathRun) -> dict:
    from kttune.calibration.runner import disturbed, forward_points
    from kttune.runner.memory import predicted_runner_peak_bytes

    out: dict = {
        "memory": predicted_runner_peak_bytes(spec, run),
        "disturbed_forwards": sum(1 for f in run.forwards if disturbed(f)),
    }
    if comps is not None:
        pts = forward_points(run, comps)
        out["forwards"] = [p.to_dict() for p in pts]
        out["predicted_ms"] = round(sum(p.predicted_ms for p in pts) * run.layers_run, 3)
    return out


def summarize(runs: list[PathRun], profile, spec) -> dict:
    """Per-path errors (raw, held-out calibrated), the crossover measured and predicted per GPU-expert
    count, and the memory model against the measured peaks."""
    from kttune.calibration.entries import Calibration
    from kttune.calibration.runner import (
        ForwardPoint,
        disturbed,
        disturbed_forwards,
        forward_points,
        held_out_errors,
        measured_crossover,
        predicted_crossover,
    )
    from kttune.runner.memory import layerwise_slot_held, predicted_runner_peak_bytes

    comps = _components(profile, spec, runs[0].method, driver=runs[0].pipeline_driver, tp=runs[0].tp) if runs else None
    out: dict = {}
    if comps is None or not runs:
        return out
    by_run = [(r, forward_points(r, comps)) for r in runs]
    points: list[ForwardPoint] = [p for _, ps in by_run for p in ps]
    out["errors"] = held_out_errors(points)
    out["disturbed"] = disturbed_forwards(runs)

    def calibrated(fit_on: list[ForwardPoint]):
        """The components with a calibration fitted on `fit_on` (None without points)."""
        if not fit_on:
            return None
        return _components(
            profile,
            spec,
            runs[0].method,
            calibration=tuple(Calibration.fit([p.to_dict() for p in fit_on]).to_dicts()),
            driver=runs[0].pipeline_driver,
            tp=runs[0].tp,
        )

    # two held-out calibrations, neither sees the forced single forwards that measure a crossover:
    # fitted on the switch runs only, and on every run of the other GPU-expert counts (the calibration
    # carries no GPU-expert term, so this is a transfer to a configuration never run)
    switch = [p for r, ps in by_run if not r.forced_path for p in ps]
    switch_comps = calibrated(switch)
    cross = {}
    for n in sorted({r.gpu_experts for r in runs}):
        forced = [
            r
            for r in runs
            if r.gpu_experts == n and r.forced_path and len(r.forwards) == 1 and not disturbed(r.forwards[0])
        ]
        sizes = sorted({r.prompt_tokens for r in forced})
        pairs = []
        for m in sizes:
            hy = [r.forwards[0].mean_moe_ms for r in forced if r.prompt_tokens == m and r.forced_path == "hybrid"]
            lw = [r.forwards[0].mean_moe_ms for r in forced if r.prompt_tokens == m and r.forced_path == "layerwise"]
            if hy and lw:
                pairs.append((m, hy[0], lw[0]))
        ref = next((r for r in runs if r.gpu_experts == n), None)
        meas = measured_crossover(pairs) if pairs else None
        interval = crossover_interval(forced)
        pred = predicted_crossover(comps, ref) if ref else None
        others = [p for p in points if p.gpu_experts != n]
        other_comps = calibrated(others)
        pred_cal = predicted_crossover(switch_comps, ref) if ref and switch_comps else None
        pred_other = predicted_crossover(other_comps, ref) if ref and other_comps else None
        err = lambda p: (abs(p - meas) / meas) if (meas and p) else None  # noqa: E731
        cross[str(n)] = {
            "measured": meas,
            "predicted": pred,
            "error": err(pred),
            "predicted_calibrated": pred_cal,
            "error_calibrated": err(pred_cal),
            "calibration_points": len(switch),
            "predicted_calibrated_other_n": pred_other,
            "error_calibrated_other_n": err(pred_other),
            "calibration_points_other_n": len(others),
            "pairs": pairs,
            "measured_interval": interval.to_dict() if interval else None,
        }
    out["crossover"] = cross
    mem = []
    for r, held in zip(runs, layerwise_slot_held(runs)):
        if r.peak_allocated_bytes:
            pred = predicted_runner_peak_bytes(spec, r, held)["total"]
            mem.append(
                {
                    "prompt": r.prompt_tokens,
                    "chunk": r.chunk,
                    "gpu_experts": r.gpu_experts,
                    "paths": list(r.paths),
                    "measured_peak_bytes": r.peak_allocated_bytes,
                    "measured_reserved_bytes": r.peak_reserved_bytes,
                    "predicted_bytes": pred,
                    "ratio": round(pred / r.peak_allocated_bytes, 3),
                }
            )
    out["memory"] = mem
    return out


def crossover_interval(forced: list[PathRun]):
    """The crossover with its interval from the repeats of forced single forwards (`timing`): per
    size the paired ratio layerwise / hybrid of the K-layer times (kttune.protocol.compare), and where
    that ratio crosses 1 (kttune.protocol.crossing); None without repeats on both paths."""
    from kttune.protocol import Estimate, compare, crossing

    by: dict = {}
    for r in forced:
        e = (r.timing or {}).get("measured_ms")
        if e and e.get("n", 0) >= 2:
            by.setdefault(r.prompt_tokens, {})[r.forced_path] = Estimate.from_dict(e)
    sizes = sorted(m for m, d in by.items() if {"hybrid", "layerwise"} <= set(d))
    if len(sizes) < 2:
        return None
    return crossing(sizes, [compare(by[m]["hybrid"], by[m]["layerwise"]) for m in sizes])


def _result_blobs(results: dict, profile):
    """(blob, spec, runs, components) for each model's result in a results dict (`PathsResult.to_dict()`
    or a file of several under "results"), small-shape runs left out."""
    from kttune.spec.loader import load_model

    from kttune.runner.result import runs_in_results

    for blob, (req, runs) in zip(results.get("results", [results]), runs_in_results(results)):
        if not runs or req.get("small"):
            continue
        spec = load_model(req["model"], req.get("method"))
        yield (
            blob,
            spec,
            runs,
            _components(profile, spec, runs[0].method, driver=runs[0].pipeline_driver, tp=runs[0].tp),
        )


def calibration_points(results: dict, profile) -> list[dict]:
    """Every forward of every run, predicted afresh by `profile` without its calibration: what
    `Calibration.fit` needs to correct that profile."""
    from kttune.calibration.runner import forward_points

    return [
        p.to_dict()
        for _, _, runs, comps in _result_blobs(results, profile)
        if comps is not None
        for r in runs
        for p in forward_points(r, comps)
    ]


def repredict(results: dict, profile) -> dict:
    """`results` with every run's prediction and every summary recomputed with `profile`."""
    for blob, spec, runs, comps in _result_blobs(results, profile):
        for r, d in zip(runs, blob["runs"]):
            d["prediction"] = _predict(comps, profile, spec, r)
        blob["summary"] = summarize(runs, profile, spec)
    return results
