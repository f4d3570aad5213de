"""The library calls behind the CLI: the same functions serve `kttune search` and Python users."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.emit.explain import Explanation, explain
from kttune.emit.launch import LaunchPaths, default_paths, launch_argv
from kttune.errors import UserError
from kttune.hw.profile import HardwareProfile
from kttune.hw.registry import resolve_profile
from kttune.search.evaluate import Budget, Evaluation
from kttune.search.study import SearchRequest, SearchResult, check_request, run_search
from kttune.search.workload import Workload, load_workload
from kttune.spec.loader import load_model
from kttune.spec.methods import get_method
from kttune.spec.model_spec import ModelSpec
from kttune.units import parse_size_bytes


@dataclass(frozen=True)
class Inputs:
    model: ModelSpec
    method: str
    profile: HardwareProfile
    workload: Workload
    budget: Budget
    tp: int
    paths: LaunchPaths


def resolve_inputs(model: str, vram: str, gpus: int = 1, profile: str | None = None, workload: str = "rag",
                   method: str | None = None, host_ram: str | None = None, vram_margin: float = 0.05,
                   model_path: str | None = None, weight_path: str | None = None) -> Inputs:
    if gpus < 1:
        raise UserError(f"--gpus {gpus} must be at least 1", "pass the number of GPUs SGLang will use (tensor parallel)")
    if not 0.0 <= vram_margin < 0.5:
        raise UserError(f"--vram-margin {vram_margin} is outside 0..0.5", "use e.g. 0.05 for 5%")
    budget_bytes = parse_size_bytes(vram, "--vram")
    spec = load_model(model, method)
    meth = get_method(method or spec.default_method).name
    prof = resolve_profile(profile)
    wl = load_workload(workload).clipped(spec.max_position_embeddings)
    ram = parse_size_bytes(host_ram, "--host-ram") if host_ram else prof.inventory.cpu.ram_total_bytes
    if not ram:
        raise UserError("the profile does not say how much host RAM the machine has", "pass --host-ram, e.g. --host-ram 512G")
    budget = Budget(vram_bytes_per_gpu=budget_bytes, host_ram_bytes=ram, vram_margin=vram_margin)
    return Inputs(spec, meth, prof, wl, budget, gpus, default_paths(spec, meth, model_path, weight_path or None))


def search(inp: Inputs, trials: int = 300, seed: int | None = None, storage: str | None = None,
           on_trial: Callable[[int, int, Evaluation | None], None] | None = None) -> SearchResult:
    req = SearchRequest(model=inp.model, method=inp.method, profile=inp.profile, workload=inp.workload,
                        budget=inp.budget, tp=inp.tp, trials=trials, seed=seed, storage=storage)
    return run_search(req, on_trial=on_trial)


def explain_flags(inp: Inputs, gpu_experts: int, chunk: int, threshold: int, max_total_tokens: int,
                  cpuinfer: int | None = None, threadpools: int | None = None) -> tuple[Explanation, Components]:
    for name, v in (("--gpu-experts", gpu_experts), ("--threshold", threshold)):
        if v < 0:
            raise UserError(f"{name} {v} is negative", "pass 0 or more")
    for name, v in (("--chunk", chunk), ("--max-total-tokens", max_total_tokens)):
        if v <= 0:
            raise UserError(f"{name} {v} must be positive", "pass a token count such as 8192")
    if gpu_experts > inp.model.num_experts:
        raise UserError(f"--gpu-experts {gpu_experts} exceeds the {inp.model.num_experts} experts per layer",
                        f"pass 0..{inp.model.num_experts}")
    method = get_method(inp.method)
    if threshold > 0 and not method.layerwise:
        raise UserError(f"--threshold {threshold} with {method.name}: sglang-kt 0.7.2 crashes when layerwise fires for this method",
                        "use --threshold 0, or a native method (RAWINT4, FP8, FP8_PERCHANNEL, BF16, MXFP4, MXFP8)")
    check_request(SearchRequest(inp.model, inp.method, inp.profile, inp.workload, inp.budget, inp.tp))
    comp = Components(inp.profile, inp.model, inp.method, inp.tp)
    threads = comp.cpu_thread_options()
    th = cpuinfer if cpuinfer is not None else max([t for t in threads if t < (inp.profile.inventory.cpu.physical_cores or 10**9)] or threads)
    if th not in threads:
        raise UserError(f"--cpuinfer {th} was not measured on this profile", f"use one of {threads}")
    pools = threadpools or max(1, len(inp.profile.inventory.cpu.numa_nodes))
    cfg = LaunchConfig(method=inp.method, tp=inp.tp, num_gpu_experts=gpu_experts, chunked_prefill_size=chunk,
                       gpu_prefill_token_threshold=threshold, max_total_tokens=max_total_tokens, cpuinfer_threads=th,
                       threadpool_count=pools, max_running_requests=inp.workload.concurrency,
                       cuda_graph_max_bs=inp.workload.concurrency)
    return explain(comp, cfg, inp.workload, inp.budget), comp


def command_for(inp: Inputs, ev: Evaluation) -> list[str]:
    return launch_argv(inp.model, ev.cfg, ev.vram, inp.budget.vram_bytes_per_gpu, inp.paths)
