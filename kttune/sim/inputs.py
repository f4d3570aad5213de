"""Resolve `kttune simulate`'s arguments into SimulationInputs: model, profile, flags, requests,
SLO. One-line UserErrors for bad values."""

from __future__ import annotations

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.cost.prefill import prefill_time_ms
from kttune.errors import UserError
from kttune.hw.registry import resolve_profile
from kttune.sim import engine
from kttune.sim.costs import IterationCosts
from kttune.sim.metrics import Slo
from kttune.sim.simulate import SimulationInputs, paper_rule_tbt_slo_ms
from kttune.sim.workload import MIXES, get_mix, load_trace, mix_statistics, poisson_requests, rescale_arrivals, trace_statistics
from kttune.spec.loader import load_model
from kttune.spec.methods import get_method


def resolve(model: str, profile: str | None = None, method: str | None = None, workload: str = "summarize",
            rate: float | None = None, requests: int = 1000, seed: int = 0, gpu_experts: int = 0, chunk: int = 8192,
            threshold: int | None = None, max_total_tokens: int = 262144, max_running_requests: int = 32,
            cpuinfer: int | None = None, gpus: int = 1, schedules: tuple[str, ...] = engine.SCHEDULES,
            groups: int | None = None, large_chunk: int = 8192, ttft_slo_s: float | None = None,
            tbt_slo_ms: float | None = None, router_skew: float = 0.0, this_machine=None) -> SimulationInputs:
    """`this_machine`: the Inventory whose cached probe is the default profile (the caller takes it)."""
    for name, v in (("--chunk", chunk), ("--max-total-tokens", max_total_tokens), ("--max-running-requests", max_running_requests),
                    ("--large-chunk", large_chunk)):
        if v <= 0:
            raise UserError(f"{name} {v} must be positive", "pass a positive count")
    if groups is not None and groups < 1:
        raise UserError(f"--groups {groups} must be at least 1", "pass a group count, or leave it out for the paper's rule")
    if router_skew < 0:
        raise UserError(f"--router-skew {router_skew} is negative", "use 0 (uniform routing) or a Zipf exponent such as 1.0")
    bad = [s for s in schedules if s not in engine.SCHEDULES]
    if bad or not schedules:
        raise UserError(f"unknown schedule {', '.join(bad) or '(none)'}", f"use any of {', '.join(engine.SCHEDULES)}")
    spec = load_model(model, method)
    meth = get_method(method or spec.default_method)
    prof = resolve_profile(profile, this_machine)
    comp = Components(prof, spec, meth.name, gpus)
    threads = comp.cpu_thread_options()
    cores = prof.inventory.cpu.physical_cores or 10**9
    th = cpuinfer if cpuinfer is not None else max([t for t in threads if t < cores] or threads)
    if th not in threads:
        raise UserError(f"--cpuinfer {th} was not measured on this profile", f"use one of {threads}")
    if gpu_experts < 0 or gpu_experts > spec.num_experts:
        raise UserError(f"--gpu-experts {gpu_experts} is outside 0..{spec.num_experts}", f"pass 0..{spec.num_experts}")
    thr = threshold if threshold is not None else (min(4096, chunk) if meth.layerwise else 0)
    if thr < 0:
        raise UserError(f"--threshold {thr} is negative", "pass 0 (layerwise off) or a token count")
    if thr > 0 and not meth.layerwise:
        raise UserError(f"--threshold {thr} with {meth.name}: sglang-kt 0.7.2 crashes when layerwise fires for this method",
                        "use --threshold 0, or a native method (RAWINT4, FP8, FP8_PERCHANNEL, BF16, MXFP4, MXFP8)")
    cfg = LaunchConfig(method=meth.name, tp=gpus, num_gpu_experts=gpu_experts, chunked_prefill_size=chunk,
                       gpu_prefill_token_threshold=thr, max_total_tokens=max_total_tokens, cpuinfer_threads=th,
                       threadpool_count=max(1, len(prof.inventory.cpu.numa_nodes)),
                       max_running_requests=max_running_requests, cuda_graph_max_bs=max_running_requests)
    if workload in MIXES:
        mix = get_mix(workload)
        if rate is None:  # half the rate at which idle-server prefill of the mean prompt fills the server
            mean_prompt = int(mix_statistics(mix)["prompt_tokens"]["mean"])
            rate = float(f"{0.5e3 / prefill_time_ms(comp, cfg, mean_prompt):.2g}")
        reqs = poisson_requests(mix, rate, requests, seed)
        wl = {"name": mix.name, "source": "preset", "description": mix.description, "mix": mix.to_dict(),
              "statistics": mix_statistics(mix), "rate_per_s": rate, "requests": requests, "seed": seed}
        ttft_default, tbt_default = mix.ttft_slo_s, mix.tbt_slo_ms
    elif workload.endswith((".csv", ".jsonl", ".json")) or "/" in workload:
        reqs = load_trace(workload)
        if rate is not None:
            reqs = rescale_arrivals(reqs, rate)
        wl = {"name": workload, "source": "trace", "statistics": trace_statistics(reqs), "rate_per_s": rate,
              "requests": len(reqs), "seed": None}
        ttft_default, tbt_default = 10.0, None
    else:
        raise UserError(f"unknown simulation workload {workload!r}", f"use {', '.join(MIXES)} or a trace file (.csv / .jsonl)")
    costs = IterationCosts(comp, cfg, router_skew)
    tbt = tbt_slo_ms if tbt_slo_ms is not None else tbt_default
    slo = Slo(ttft_s=ttft_slo_s if ttft_slo_s is not None else ttft_default,
              tbt_ms=tbt if tbt is not None else paper_rule_tbt_slo_ms(costs))
    if slo.ttft_s <= 0 or slo.tbt_ms <= 0:
        raise UserError("SLO limits must be positive", "pass e.g. --ttft-slo 10s --tbt-slo 150ms")
    scheds = tuple(engine.Schedule(s, groups=groups, large_chunk=large_chunk) for s in dict.fromkeys(schedules))
    if not meth.layerwise:
        comp.notes.append(f"{meth.name} has no layerwise path: chunked runs hybrid only, and layered splits hybrid prefill over groups")
    return SimulationInputs(comp, cfg, tuple(reqs), wl, slo, scheds, router_skew, prof.provenance.machine)
