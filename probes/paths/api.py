"""`kttune paths` as a library call: build the K layers of a model once per GPU-expert count, run a
grid of prompts on the switch (and, with `force`, on each path alone), and hold the cost model and
the memory model to every run.

Runs whose predicted time (cost model, x `slack`) exceeds `max_run_s` are skipped with the reason,
so a grid fits a time budget; so are forwards larger than the buffers."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

from kttune.errors import UserError
from kttune.probes.paths.result import PathRun

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
    repeat_below_s: float = 0.0  # runs shorter than this run `repeats` times, the fastest kept
    repeats: int = 2
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
            "request": {k: list(v) if isinstance(v, tuple) else v for k, v in self.request.__dict__.items()},
            "runs": [r.to_dict() | {"prediction": p} for r, p in zip(self.runs, self.predictions)],
            "skipped": self.skipped,
            "summary": self.summary,
            "notes": self.notes,
        }


def run_paths(req: PathsRequest, progress: Progress | None = None) -> PathsResult:
    import torch

    from kttune.hw.registry import resolve_profile
    from kttune.probes.paths.stack import StackOptions, build_stack, small_spec
    from kttune.probes.paths.runner import PathRunner, chunks_of, forward_path
    from kttune.spec.loader import load_model
    from kttune.spec.methods import get_method

    say = progress or (lambda s: None)
    spec = load_model(req.model, req.method)
    method = get_method(req.method or spec.default_method).name
    if not 1 <= req.layers <= spec.num_moe_layers:
        raise UserError(f"--layers {req.layers} is outside 1..{spec.num_moe_layers}, the MoE layers of {spec.name}",
                        "pass e.g. --layers 2")
    for n in req.gpu_experts:
        if not 0 <= n <= spec.num_experts:
            raise UserError(f"--gpu-experts {n} is outside 0..{spec.num_experts} for {spec.name}", "pass a count per MoE layer")
    for f in req.force:
        if f not in ("hybrid", "layerwise"):
            raise UserError(f"--force {f!r} is not a path", "use hybrid or layerwise")
        if f == "layerwise" and not get_method(method).layerwise:
            raise UserError(f"{method} has no layerwise path", "force hybrid only, or pick a native method")
    if req.repeats < 1 or req.repeat_below_s < 0:
        raise UserError(f"--repeats {req.repeats} / --repeat-below-s {req.repeat_below_s:g} must be at least 1 / 0",
                        "pass e.g. --repeats 3 --repeat-below-s 2.5")
    if any(c < 1 for c in req.chunks) or any(p < 1 for p in req.prompts):
        raise UserError("chunks and prompt lengths must be positive", "pass token counts such as 4096")
    run_spec = small_spec(spec) if req.small else spec
    from kttune.probes.inventory import collect_inventory

    profile = resolve_profile(req.profile, None if req.profile else collect_inventory())
    comps = _components(profile, spec, method)
    res = PathsResult(req)
    if req.small:
        res.notes.append("small shapes (CPU variant): predictions are for the real model and are not compared")
    max_fwd = max(list(req.chunks) + list(req.sweep) + [c for _, c, _, _ in req.points] + [1])
    threads_before = torch.get_num_threads()
    if not torch.cuda.is_available() or req.device == "cpu":
        # the CPU variant: torch's intra-op threads and kt-kernel's spinning workers share the cores
        import os

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
        torch.set_num_threads(max(1, cores - max(1, req.cpuinfer or 1)))
    say(f"building {req.layers} layers of {spec.name} {method}")
    t0 = time.perf_counter()
    st = build_stack(run_spec, spec.router, method, StackOptions(
        layers=req.layers, gpu_experts=0, cpuinfer=req.cpuinfer, max_tokens=max_fwd,
        cpu_max_tokens=min(req.cpu_max_tokens, max_fwd), seed=req.seed, device=req.device))
    res.notes.append(f"stack built in {time.perf_counter() - t0:.1f} s" + ("; " + "; ".join(st.notes) if st.notes else ""))
    try:
        for n in req.gpu_experts:
            st.set_gpu_experts(min(n, run_spec.num_experts))
            _run_grid(req, res, st, n, spec, method, comps, profile, max_fwd, say)
    finally:
        st.close()
        del st
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    torch.set_num_threads(threads_before)
    if not req.small:
        res.summary = summarize(res.runs, profile, spec)
    return res


def _run_grid(req, res, st, n, spec, method, comps, profile, max_fwd, say) -> None:
    import torch

    from kttune.probes.paths.runner import PathRunner, chunks_of, forward_path
    from kttune.spec.methods import get_method

    runner = PathRunner(st)
    layerwise = get_method(method).layerwise
    jobs: list[tuple[int, int, int, str | None]] = []  # prompt, chunk, threshold, force
    for m in req.sweep:
        for f in ("hybrid", "layerwise") if layerwise else ("hybrid",):
            jobs.append((m, m, m, f))
    seen = set()
    grid = [(p, c, thr) for p, c, thr, pn in req.points if pn == n] if req.points else [
        (p, c, c if req.threshold is None else req.threshold) for c in req.chunks for p in req.prompts]
    for p, c, thr in grid:
        for f in (None,) + tuple(req.force):
            key = (tuple(chunks_of(p, c)), thr, f)  # the same forwards under another chunk: once
            if key not in seen:
                seen.add(key)
                jobs.append((p, c, thr, f))
    try:
        w = min(64, max_fwd)
        runner.run_prompt(w, w, 0, "hybrid")  # warm-up (kernels, pools)
        # and attention over a cached prefix: its kernel is loaded on first use (seconds on CUDA)
        runner.run_prompt(2 * w, w, 0, "hybrid")
        if layerwise:
            runner.run_prompt(w, w, w, "layerwise")  # and the slot, Triton compiles
        for p, c, thr, f in jobs:
            label = f"L={p} chunk={c} thr={thr} n={n}" + (f" forced {f}" if f else "")
            why = _skip_reason(comps, st, runner, spec, method, n, p, c, thr, f, req, chunks_of, forward_path)
            if why:
                res.skipped.append({"prompt": p, "chunk": c, "threshold": thr, "gpu_experts": n, "force": f, "reason": why})
                say(f"skip {label}: {why}")
                continue
            say(f"run {label}")
            try:
                run = runner.run_prompt(p, c, thr, f, seed=req.seed)
                if req.repeat_below_s and run.measured_ms < 1e3 * req.repeat_below_s and req.repeats > 1:
                    # short runs again: the fastest is kept (a run can pay a cold pool, the allocator or
                    # another process on the cores); the peak memory is the largest seen
                    tries = [run] + [runner.run_prompt(p, c, thr, f, seed=req.seed) for _ in range(req.repeats - 1)]
                    note = "repeated: " + ", ".join(f"{t.measured_ms:.1f}" for t in tries) + " ms, the fastest kept"
                    run = min(tries, key=lambda x: x.measured_ms)
                    run = replace(run, notes=run.notes + (note,),
                                  peak_allocated_bytes=max(t.peak_allocated_bytes for t in tries),
                                  peak_reserved_bytes=max(t.peak_reserved_bytes for t in tries))
            except (ValueError, torch.cuda.OutOfMemoryError) as e:  # type: ignore[attr-defined]
                res.skipped.append({"prompt": p, "chunk": c, "threshold": thr, "gpu_experts": n, "force": f,
                                    "reason": f"{type(e).__name__}: {str(e)[:200]}"})
                if st.is_cuda:
                    torch.cuda.empty_cache()
                continue
            if req.small:
                run = replace(run, model=spec.name + " (small shapes)")
            res.runs.append(run)
            res.predictions.append({} if req.small else _predict(comps, profile, spec, run))
            say(f"  {run.measured_ms:.1f} ms measured ({len(run.forwards)} forwards: {','.join(run.paths)})")
    finally:
        del runner


def _components(profile, spec, method, calibration: tuple = ()):
    from kttune.cost.components import Components

    try:
        return Components(replace(profile, calibration=calibration), spec, method, 1)
    except UserError:
        return None


def _skip_reason(comps, st, runner, spec, method, n, p, c, thr, f, req, chunks_of, forward_path) -> str | None:
    from kttune.config import LaunchConfig
    from kttune.cost.prefill import hybrid_moe_layer, layerwise_moe_layer

    sizes = chunks_of(p, c)
    cap = st.cpu.max_tokens if st.cpu is not None else st.opts.max_tokens
    for m in sizes:
        if forward_path(method, m, thr, f) == "hybrid" and m > cap and n < spec.num_experts:
            return f"hybrid forward of {m} tokens > kt-kernel max_len {cap} (its host scratch grows with it)"
    if comps is None or req.small:
        return None
    cfg = LaunchConfig(method, 1, n, c, thr, max(65536, p), st.cpu.threads if st.cpu else 1)
    est = 0.0
    prefix = 0
    for m in sizes:
        path = forward_path(method, m, thr, f)
        lt = layerwise_moe_layer(comps, cfg, m) if path == "layerwise" else hybrid_moe_layer(comps, cfg, m)
        est += st.opts.layers * (lt.total_ms + comps.attention_ms(m, prefix) + comps.dense_ms(m))
        prefix += m
    if est * req.slack / 1e3 > req.max_run_s:
        return f"predicted {est / 1e3:.1f} s x {req.slack} > {req.max_run_s:g} s cap per run"
    return None


def _predict(comps, profile, spec, run: PathRun) -> dict:
    from kttune.probes.paths.compare import disturbed, forward_points, predicted_runner_peak_bytes

    out: dict = {"memory": predicted_runner_peak_bytes(spec, run),
                 "disturbed_forwards": sum(1 for f in run.forwards if disturbed(f))}
    if comps is not None:
        pts = forward_points(run, comps)
        out["forwards"] = [p.to_dict() for p in pts]
        out["predicted_ms"] = round(sum(p.predicted_ms for p in pts) * run.layers_run, 3)
    return out


def summarize(runs: list[PathRun], profile, spec) -> dict:
    """Per-path errors (raw, held-out calibrated), the crossover measured and predicted per GPU-expert
    count, and the memory model against the measured peaks."""
    from kttune.cost.calibration import Calibration
    from kttune.probes.paths.compare import (
        ForwardPoint, disturbed, disturbed_forwards, forward_points, held_out_errors, measured_crossover,
        predicted_crossover, predicted_runner_peak_bytes)

    comps = _components(profile, spec, runs[0].method) if runs else None
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
        return _components(profile, spec, runs[0].method, calibration=tuple(Calibration.fit([p.to_dict() for p in fit_on]).to_dicts()))

    # two held-out calibrations, neither sees the forced single forwards that measure a crossover:
    # fitted on the switch runs only, and on every run of the other GPU-expert counts (the calibration
    # carries no GPU-expert term, so this is a transfer to a configuration never run)
    switch = [p for r, ps in by_run if not r.forced_path for p in ps]
    switch_comps = calibrated(switch)
    cross = {}
    for n in sorted({r.gpu_experts for r in runs}):
        forced = [r for r in runs if r.gpu_experts == n and r.forced_path and len(r.forwards) == 1 and not disturbed(r.forwards[0])]
        sizes = sorted({r.prompt_tokens for r in forced})
        pairs = []
        for m in sizes:
            hy = [r.forwards[0].mean_moe_ms for r in forced if r.prompt_tokens == m and r.forced_path == "hybrid"]
            lw = [r.forwards[0].mean_moe_ms for r in forced if r.prompt_tokens == m and r.forced_path == "layerwise"]
            if hy and lw:
                pairs.append((m, hy[0], lw[0]))
        ref = next((r for r in runs if r.gpu_experts == n), None)
        meas = measured_crossover(pairs) if pairs else None
        pred = predicted_crossover(comps, ref) if ref else None
        others = [p for p in points if p.gpu_experts != n]
        other_comps = calibrated(others)
        pred_cal = predicted_crossover(switch_comps, ref) if ref and switch_comps else None
        pred_other = predicted_crossover(other_comps, ref) if ref and other_comps else None
        err = lambda p: (abs(p - meas) / meas) if (meas and p) else None  # noqa: E731
        cross[str(n)] = {"measured": meas, "predicted": pred, "error": err(pred),
                         "predicted_calibrated": pred_cal, "error_calibrated": err(pred_cal),
                         "calibration_points": len(switch),
                         "predicted_calibrated_other_n": pred_other, "error_calibrated_other_n": err(pred_other),
                         "calibration_points_other_n": len(others), "pairs": pairs}
    out["crossover"] = cross
    mem = []
    for r in runs:
        if r.peak_allocated_bytes:
            pred = predicted_runner_peak_bytes(spec, r)["total"]
            mem.append({"prompt": r.prompt_tokens, "chunk": r.chunk, "gpu_experts": r.gpu_experts, "paths": list(r.paths),
                        "measured_peak_bytes": r.peak_allocated_bytes, "measured_reserved_bytes": r.peak_reserved_bytes,
                        "predicted_bytes": pred, "ratio": round(pred / r.peak_allocated_bytes, 3)})
    out["memory"] = mem
    return out


def _result_blobs(results: dict, profile):
    """(blob, spec, runs, components) for each model's result in a results dict (`PathsResult.to_dict()`
    or a file of several under "results"), small-shape runs left out."""
    from kttune.spec.loader import load_model

    from kttune.probes.paths.result import runs_in_results

    for blob, (req, runs) in zip(results.get("results", [results]), runs_in_results(results)):
        if not runs or req.get("small"):
            continue
        spec = load_model(req["model"], req.get("method"))
        yield blob, spec, runs, _components(profile, spec, runs[0].method)


def calibration_points(results: dict, profile) -> list[dict]:
    """Every forward of every run, predicted afresh by `profile` without its calibration: what
    `Calibration.fit` needs to correct that profile."""
    from kttune.probes.paths.compare import forward_points

    return [p.to_dict() for _, _, runs, comps in _result_blobs(results, profile) if comps is not None
            for r in runs for p in forward_points(r, comps)]


def repredict(results: dict, profile) -> dict:
    """`results` with every run's prediction and every summary recomputed with `profile`."""
    for blob, spec, runs, comps in _result_blobs(results, profile):
        for r, d in zip(runs, blob["runs"]):
            d["prediction"] = _predict(comps, profile, spec, r)
        blob["summary"] = summarize(runs, profile, spec)
    return results
