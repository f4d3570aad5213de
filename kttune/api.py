"""The library calls behind the CLI: the same functions serve `kttune` and Python users. Each
returns a result object holding what a command prints: the data, the explanation, the launch
argv, and `to_dict()`, the JSON-ready form (assembled in kttune.emit.result)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kttune import bounds
from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.emit import result as result_json
from kttune.search.explain import Explanation, explain
from kttune.search.launch import LaunchPaths, default_paths, launch_argv
from kttune.errors import UserError
from kttune.hw.profile import Inventory
from kttune.memory.vram import DEFAULT_VRAM_MARGIN
from kttune.search.admission import running_requests
from kttune.search.evaluate import Budget, Evaluation, HostRamSource
from kttune.search.slo import SloTarget
from kttune.search.space import parse_chunks
from kttune.search.study import SearchRequest, SearchResult, StudyOptions, check_request, run_search
from kttune.search.workload import Workload, load_workload
from kttune.spec.catalog import CatalogEntry
from kttune.spec.loader import load_model
from kttune.spec.methods import get_method
from kttune.units import GIB, parse_size_bytes


def this_machine_inventory() -> Inventory | None:
    """This machine's inventory, for finding its cached probe (the hardware layer is handed it and
    never inventories the machine itself); None where the machine cannot be inventoried."""
    from kttune.probes.inventory import collect_inventory

    try:
        return collect_inventory()
    except Exception:  # an odd /proc or NVML must not stop a search that can use a shipped profile
        return None


# Bounds on sizes no real machine has (a typo such as --vram 9999T is refused, not searched): the
# rules live in kttune.bounds, shared with every command and file input.
MAX_VRAM_BYTES_PER_GPU = bounds.VRAM_BYTES_PER_GPU.hi
MAX_HOST_RAM_BYTES = bounds.HOST_RAM_BYTES.hi
MAX_GPUS = bounds.GPUS.hi


@dataclass(frozen=True)
class Inputs:
    """A resolved request (model, method, profile, workload, budget, TP: the fields live in
    `SearchRequest` alone) and where the weights are, for the launch command."""

    request: SearchRequest
    paths: LaunchPaths
    # What the loader and the inputs say about the request (wrong method for the checkpoint,
    # an untested family, clipped prompts): printed in the report, listed in the JSON.
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SearchOutcome:
    """`kttune search`: the study's result, the explanation of its pick and the launch argv."""

    inputs: Inputs
    result: SearchResult
    explanation: Explanation  # of result.best, made from the search's own evaluation of it
    argv: tuple[str, ...]

    @property
    def best(self) -> Evaluation:
        return self.result.best

    def to_dict(self) -> dict:
        return result_json.search_dict(self.inputs.request, self.inputs.paths, self.result, self.explanation,
                                       list(self.argv), self.inputs.notes)


@dataclass(frozen=True)
class ExplainOutcome:
    """`kttune explain`: a given flag set, explained, and its launch argv."""

    inputs: Inputs
    explanation: Explanation
    argv: tuple[str, ...]

    @property
    def evaluation(self) -> Evaluation:
        return self.explanation.evaluation

    @property
    def feasible(self) -> bool:
        return self.explanation.evaluation.feasible

    def to_dict(self) -> dict:
        return result_json.explain_dict(self.inputs.request, self.inputs.paths, self.explanation, list(self.argv),
                                        self.inputs.notes)


@dataclass(frozen=True)
class ShippedProfile:
    name: str
    kind: str  # provenance kind: measured, datasheet, mixed
    machine: str
    default: bool
    curves: int


@dataclass(frozen=True)
class ProfileListing:
    """`kttune profiles`: the shipped profiles and this machine's probed one, if any."""

    shipped: tuple[ShippedProfile, ...]
    this_machine: str | None  # fingerprint of this machine's cached profile

    def to_dict(self) -> dict:
        return result_json.profiles_dict(self)


def resolve_inputs(model: str, vram: str, gpus: int = 1, profile: str | None = None, workload: str = "rag",
                   method: str | None = None, host_ram: str | None = None, vram_margin: float = DEFAULT_VRAM_MARGIN,
                   model_path: str | None = None, weight_path: str | None = None, chunks: str | None = None) -> Inputs:
    """The CLI's strings resolved into a request; bad input raises UserError."""
    from kttune.hw.registry import default_shipped_name, resolve_named_profile

    bounds.GPUS.check(gpus, "--gpus")
    bounds.VRAM_MARGIN.check(vram_margin, "--vram-margin")
    budget_bytes = parse_size_bytes(vram, "--vram")
    if budget_bytes > MAX_VRAM_BYTES_PER_GPU:
        raise UserError(f"--vram {vram} is {budget_bytes / GIB:,.0f} GiB per GPU, more than any GPU holds "
                        f"(the largest hold 288 GB: B300, MI355X)",
                        "--vram is per GPU: pass one card's memory, e.g. --vram 141G for an H200, and the count with --gpus")
    spec = load_model(model, method)
    meth = get_method(method or spec.default_method).name
    prof, prof_name = resolve_named_profile(profile, this_machine_inventory())
    raw_wl = load_workload(workload)
    wl = raw_wl.clipped(spec.max_position_embeddings)
    ram = parse_size_bytes(host_ram, "--host-ram") if host_ram is not None else prof.inventory.cpu.ram_total_bytes
    if not ram:
        raise UserError("the profile does not say how much host RAM the machine has", "pass --host-ram, e.g. --host-ram 512G")
    if ram > MAX_HOST_RAM_BYTES:
        raise UserError(f"--host-ram {host_ram} is {ram / (1024 * GIB):,.0f} TiB, more than any server holds",
                        "pass the target machine's RAM, e.g. --host-ram 512G")
    notes = tuple(spec.notes) + tuple(n for n in (raw_wl.clip_note(spec.max_position_embeddings),) if n)
    source = (HostRamSource("flag") if host_ram is not None else
              HostRamSource("probe", default_shipped_name()) if prof_name is None else HostRamSource("profile", prof_name))
    budget = Budget(vram_bytes_per_gpu=budget_bytes, host_ram_bytes=ram, vram_margin=vram_margin, host_ram_source=source)
    req = SearchRequest(model=spec, method=meth, profile=prof, workload=wl, budget=budget, tp=gpus,
                        chunks=parse_chunks(chunks) if chunks else ())
    return Inputs(req, default_paths(spec, meth, model_path, weight_path or None), notes)


def slo_target(rate_per_s: float | None, ttft_s: float | None, tbt_ms: float | None) -> SloTarget | None:
    """The search's SLO at a load (`--rate`, `--ttft-slo`, `--tbt-slo`), or None for the
    idle-server search."""
    from kttune.search.slo import SloTarget

    if rate_per_s is None and ttft_s is None and tbt_ms is None:
        return None
    if rate_per_s is None:
        raise UserError("an SLO needs the load it must hold at", "pass --rate, e.g. --rate 1.5 (requests per second)")
    bounds.RATE_PER_S.check(rate_per_s, "--rate")
    if ttft_s is None and tbt_ms is None:
        raise UserError("--rate without an SLO", "add --ttft-slo (e.g. 10s) and/or --tbt-slo (e.g. 150ms)")
    return SloTarget(rate_per_s, ttft_s, tbt_ms)


def search(inp: Inputs, trials: int = 300, seed: int | None = None, storage: str | None = None,
           on_trial: Callable[[int, int, Evaluation | None], None] | None = None,
           study_name: str | None = None, slo: SloTarget | None = None) -> SearchOutcome:
    """Run (or resume) the search and explain its pick; the pick is evaluated once. With `slo`
    (see `slo_target`) the pick must also meet it under load, in simulation."""
    res = run_search(inp.request, StudyOptions(trials=trials, seed=seed, storage=storage, study_name=study_name),
                     on_trial=on_trial, slo=slo)
    req = inp.request
    comp = res.components or Components(req.profile, req.model, req.method, req.tp)
    ex = explain(comp, res.best.cfg, req.workload, req.budget, evaluation=res.best)
    return SearchOutcome(inp, res, ex, tuple(command_for(inp, res.best)))


def launch_config(inp: Inputs, gpu_experts: int, chunk: int, threshold: int, max_total_tokens: int,
                  cpuinfer: int | None = None, threadpools: int | None = None,
                  components: Components | None = None) -> LaunchConfig:
    """A user-given flag set, checked against the model, the method and the profile's measured
    thread counts. `cpuinfer` None: the most measured threads below the core count."""
    req = inp.request
    for name, v, rule in (("--gpu-experts", gpu_experts, bounds.GPU_EXPERTS), ("--threshold", threshold, bounds.THRESHOLD_TOKENS),
                          ("--chunk", chunk, bounds.FORWARD_TOKENS), ("--max-total-tokens", max_total_tokens, bounds.KV_TOKENS)):
        rule.check(v, name)
    if cpuinfer is not None:
        bounds.THREADS.check(cpuinfer, "--cpuinfer")
    if gpu_experts > req.model.num_experts:
        raise UserError(f"--gpu-experts {gpu_experts} exceeds the {req.model.num_experts} experts per layer",
                        f"pass 0..{req.model.num_experts}")
    method = get_method(req.method)
    if threshold > 0 and not method.layerwise:
        raise UserError(f"--threshold {threshold} with {method.name}: sglang-kt 0.7.2 crashes when layerwise fires for this method",
                        "use --threshold 0, or a native method (RAWINT4, FP8, FP8_PERCHANNEL, BF16, MXFP4, MXFP8)")
    check_request(req)
    comp = components or Components(req.profile, req.model, req.method, req.tp)
    threads = comp.cpu_thread_options()
    cores = req.profile.inventory.cpu.physical_cores or 10**9
    th = cpuinfer if cpuinfer is not None else max([t for t in threads if t < cores] or threads)
    if th not in threads:
        raise UserError(f"--cpuinfer {th} was not measured on this profile", f"use one of {threads}")
    # the sub-pools and NUMA nodes measured fastest at this thread count, unless given
    pools, numa = (threadpools, ()) if threadpools else comp.threadpool_choice(th)
    running = running_requests(max_total_tokens, req.workload)  # what the pool admits of the workload
    return LaunchConfig(method=req.method, tp=req.tp, num_gpu_experts=gpu_experts, chunked_prefill_size=chunk,
                        gpu_prefill_token_threshold=threshold, max_total_tokens=max_total_tokens, cpuinfer_threads=th,
                        threadpool_count=pools, numa_nodes=numa, max_running_requests=running, cuda_graph_max_bs=running)


def explain_flags(inp: Inputs, gpu_experts: int, chunk: int, threshold: int, max_total_tokens: int,
                  cpuinfer: int | None = None, threadpools: int | None = None) -> ExplainOutcome:
    """Explain a given flag set (see `launch_config` for the checks)."""
    req = inp.request
    comp = Components(req.profile, req.model, req.method, req.tp)
    cfg = launch_config(inp, gpu_experts, chunk, threshold, max_total_tokens, cpuinfer, threadpools, components=comp)
    ex = explain(comp, cfg, req.workload, req.budget)
    return ExplainOutcome(inp, ex, tuple(command_for(inp, ex.evaluation)))


def command_for(inp: Inputs, ev: Evaluation) -> list[str]:
    """The sglang-kt launch argv for an evaluated configuration."""
    return launch_argv(inp.request.model, ev.cfg, ev.vram, inp.request.budget.vram_bytes_per_gpu, inp.paths)


def list_models() -> list[CatalogEntry]:
    from kttune.spec.catalog import catalog_entries

    return catalog_entries()


def list_workloads() -> list[Workload]:
    from kttune.search.workload import preset_names

    return [load_workload(n) for n in preset_names()]


def list_profiles() -> ProfileListing:
    from kttune.hw.registry import cached_profile_for_this_machine, default_shipped_name, load_shipped, shipped_names

    default = default_shipped_name()
    rows = []
    for n in shipped_names():
        p = load_shipped(n)
        rows.append(ShippedProfile(n, p.provenance.kind, p.provenance.machine, n == default, len(p.curves)))
    cached = cached_profile_for_this_machine(this_machine_inventory())
    return ProfileListing(tuple(rows), cached.fingerprint if cached else None)
