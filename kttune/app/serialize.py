"""The machine-readable results of the app's commands (`--json`), in one place: search, explain
(flags and a launch command), the measured search and validation, each in the one envelope
(kttune.schema). The listings, the simulation, the path runner and tune serialise themselves
(`to_dict()` of kttune.app.catalog, kttune.sim.simulate, kttune.runner.api, kttune.app.tuning)
in the same envelope."""

from __future__ import annotations

from dataclasses import asdict

from kttune.hw.profile import HardwareProfile
from kttune.schema import enveloped, kttune_version
from kttune.search.evaluate import Budget, Evaluation
from kttune.search.workload import Workload
from kttune.spec.model_spec import ModelSpec


def evaluation_dict(ev: Evaluation) -> dict:
    return {
        "flags": ev.cfg.to_dict(),
        "predicted": {
            "mean_prefill_ms": ev.mean_ttft_ms,
            "prefill_ms_by_prompt_tokens": {str(p): t for p, t in ev.ttft_ms},
            "prefill_tok_s_by_prompt_tokens": {str(p): p / (t / 1e3) for p, t in ev.ttft_ms},
            "decode_batch": ev.decode_batch,
            "decode_step_ms": ev.tbt_ms,
            "decode_tok_s": ev.decode_tok_s,
            "decode_tok_s_per_request": ev.decode_tok_s_per_request,
        },
        "vram_bytes_per_gpu": ev.vram.to_dict(),
        "host_ram_bytes": ev.host.to_dict(),
        "constraints": ev.constraints,
        "feasible": ev.feasible,
    }


def context_dict(model: ModelSpec, profile: HardwareProfile, workload: Workload, budget: Budget, method: str) -> dict:
    return {
        "kttune_version": kttune_version(),
        "model": {
            "name": model.name,
            "family": model.family,
            "source": model.source,
            "method": method,
            "checkpoint_format": model.checkpoint_format,
            "experts": model.num_experts,
            "top_k": model.top_k,
            "moe_layers": model.num_moe_layers,
            "hidden_size": model.hidden_size,
            "moe_intermediate_size": model.moe_intermediate_size,
            "non_expert_bytes": model.non_expert_bytes,
            "non_expert_bytes_measured": model.non_expert_bytes_measured is not None,
        },
        "profile": {
            "machine": profile.provenance.machine,
            "kind": profile.provenance.kind,
            "fingerprint": profile.fingerprint,
            "created": profile.provenance.created,
            "notes": list(profile.provenance.notes),
        },
        "workload": {
            "name": workload.name,
            "prompt_tokens": list(workload.prompt_tokens),
            "weights": list(workload.weights),
            "output_tokens": workload.output_tokens,
            "concurrency": workload.concurrency,
            "decode_weight": workload.decode_weight,
        },
        "budget": {
            "vram_bytes_per_gpu": budget.vram_bytes_per_gpu,
            "host_ram_bytes": budget.host_ram_bytes,
            "vram_margin": budget.vram_margin,
        },
    }


def request_context(req) -> dict:
    return context_dict(req.model, req.profile, req.workload, req.budget, req.method)


def search_dict(req, paths, res, ex, argv: list[str], input_notes: tuple[str, ...] = ()) -> dict:
    """`kttune search --json`: the context, the pick, its launch command and explanation, the
    Pareto front, the `kt run` baseline and the study. `req` a SearchRequest, `paths` LaunchPaths,
    `res` a SearchResult, `ex` the Explanation of `res.best`."""
    out = request_context(req)
    out.update(
        pick=evaluation_dict(res.best),
        command=list(argv),
        crossover_tokens=ex.crossover_tokens,
        by_prompt_tokens=[length_row_dict(r) for r in ex.rows],
        reasons=list(ex.reasons),
        notes=_notes(input_notes, res.notes, ex.notes, paths.notes),
        model_fits=ex.fits,
        pareto=[evaluation_dict(e) for e in res.pareto],
        kt_run_default=evaluation_dict(res.baseline) if res.baseline else None,
        study={
            "name": res.study_name,
            "storage": res.storage,
            "trials": res.trials_total,
            "new_trials": res.trials_new,
            "feasible": res.trials_feasible,
            "wall_s": res.wall_s,
            "space": res.space.as_dict(),
        },
    )
    if res.slo is not None:
        out["slo"] = res.slo  # kttune.search.slo.SloCheck.to_dict() of the pick
    return enveloped("search", out)


def _notes(*groups) -> list[str]:
    """Notes of the inputs (loader, workload), the study, the model and the paths, once each."""
    return list(dict.fromkeys(n for g in groups for n in g))


def length_row_dict(r) -> dict:
    return {
        "prompt_tokens": r.prompt_tokens,
        "hybrid_ms": r.hybrid_ms,
        "layerwise_ms": r.layerwise_ms,
        "picked_ms": r.chosen_ms,
        "forwards": r.chosen_paths,
        "expert_traffic_bytes": r.traffic_bytes,
    }


def explain_dict(req, paths, ex, argv: list[str], input_notes: tuple[str, ...] = ()) -> dict:
    """`kttune explain --json`: the context, the evaluation of the given flags, their launch
    command, prefill on both paths per prompt length and the crossover."""
    out = request_context(req)
    out.update(
        evaluation=evaluation_dict(ex.evaluation),
        command=list(argv),
        crossover_tokens=ex.crossover_tokens,
        by_prompt_tokens=[length_row_dict(r) for r in ex.rows],
        reasons=list(ex.reasons),
        notes=_notes(input_notes, ex.notes, paths.notes),
        model_fits=ex.fits,
    )
    return enveloped("explain", out)


def launch_explain_dict(outcome) -> dict:
    """`kttune explain -- COMMAND --json`: `explain --json` of the command's configuration, plus what
    was read from the command and assumed for it (`launch`), and the search's pick on the same
    inputs with the flags it changes (`kttune_pick`; null without the comparison)."""
    ex = outcome.explained
    out = explain_dict(ex.inputs.request, ex.inputs.paths, ex.explanation, list(ex.argv), ex.inputs.notes)
    p, r = outcome.parsed, outcome.resolved
    out["launch"] = {
        "argv": list(p.argv),
        "read": dict(p.values),
        "env": list(p.env),
        "ignored": [{"flag": f, "note": n} for f, n in p.ignored],
        "unknown": list(p.unknown),
        "assumed": list(r.notes),
        "mem_fraction_static": r.mem_fraction_static,
        "kv_tokens_from_mem_fraction": r.profiled_kv_tokens,
    }
    out["kttune_pick"] = None
    if outcome.search is not None:
        s = outcome.search
        out["kttune_pick"] = {
            "evaluation": evaluation_dict(s.best),
            "command": list(s.argv),
            "crossover_tokens": s.explanation.crossover_tokens,
            "changes": [asdict(c) for c in outcome.changes],
            "study": {"name": s.result.study_name, "trials": s.result.trials_total},
        }
    out["search_problem"] = outcome.search_problem.line() if outcome.search_problem else None
    return out


def measured_dict(res, argv: list[str], context: dict, input_notes: tuple[str, ...] = ()) -> dict:
    """`kttune search --measure --json`: the request's context (`context_dict`), then the measured
    pick, the model's pick and candidates and the baselines, the race's decision and the study;
    `command` the measured pick's launch argv; `notes` the inputs' (`input_notes`), then the
    search's (storage repairs, the profile's fits), once each, as `kttune search --json` has them."""

    def one(r) -> dict:
        return {
            "name": r.name,
            "config": r.cfg.to_dict(),
            "fits": r.fits,
            "measured_tok_s": r.measured_tok_s,
            "predicted_tok_s": r.predicted_tok_s,
            "ms_by_prompt_tokens": {str(k): v for k, v in sorted(r.ms_by_length.items())},
            "state": r.state,
            "source": r.source,
            "notes": list(r.notes),
            "trial": r.trial,
            "estimate": r.estimate.to_dict() if r.estimate is not None else None,
            "vs_measured_pick": r.vs_best.to_dict() if r.vs_best is not None else None,
            "race_status": r.race_status,
        }

    return enveloped(
        "search-measured",
        {
            **context,
            "evaluator": res.evaluator,
            "prompt_tokens": list(res.lengths),
            "weights": list(res.weights),
            "measured_pick": one(res.best),
            "model_pick": one(res.model_pick),
            "model_candidates": [one(r) for r in res.model_candidates],
            "baselines": [one(r) for r in res.baselines],
            "decision": res.decision,
            "race_rounds": res.race_rounds,
            "study": {
                "name": res.study_name,
                "storage": res.storage,
                "measured_trials": res.trials_measured,
                "pruned": res.trials_pruned,
                "infeasible": res.trials_infeasible,
                "new_trials": res.trials_new,
                "wall_s": res.wall_s,
            },
            "notes": list(dict.fromkeys((*input_notes, *res.notes))),
            "command": list(argv),
        },
    )


def validation_dict(outcome) -> dict:
    """`kttune validate --json` (`outcome`: kttune.app.validation.ValidateOutcome)."""
    res = outcome.result
    cmp = res.comparison
    return enveloped(
        "validate",
        {
            "ok": res.ok,
            "stage": res.stage,
            "reason": res.reason,
            "failure": asdict(res.failure) if res.failure else None,
            "config": outcome.cfg.to_dict(),
            "emitted_command": outcome.emitted_argv,
            "server_argv": res.argv,
            "prompt_lengths": list(outcome.lengths),
            "chunk_prompt_tokens": res.chunk_prompt_tokens,
            "ready_timeout_s": outcome.timeout_s,
            "ready_s": res.ready_s,
            "log": res.log_path,
            "startup_memory": asdict(res.log.startup),
            "measurements": [
                {
                    "prompt_tokens": m.prompt_tokens,
                    "server_prompt_tokens": m.server_prompt_tokens,
                    "ttft_ms": list(m.ttft_ms),
                    "layerwise_lines": len(m.layerwise),
                }
                for m in res.measurements
            ],
            "comparison": None
            if cmp is None
            else {
                "lengths": [{**asdict(c), "ratio": c.ratio} for c in cmp.lengths],
                "parts": [{**asdict(p), "ratio": p.ratio} for p in cmp.parts],
                "corrections": list(cmp.corrections),
            },
            "profile_written": outcome.profile_written,
            "server_info": res.server_info,
        },
    )
