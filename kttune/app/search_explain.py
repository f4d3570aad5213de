"""`kttune search` and `kttune explain` (a flag set): the search's pick explained with its launch
argv, or a given flag set checked and explained. Each returns a result object holding what the
command prints and `to_dict()`, its JSON document (kttune.app.serialize)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kttune import bounds
from kttune.app import serialize
from kttune.app.inputs import Inputs, components_at
from kttune.app.names import DEFAULT_TRIALS
from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.errors import ParameterError, UserError
from kttune.search.admission import running_requests
from kttune.search.evaluate import Evaluation
from kttune.search.explain import Explanation, explain
from kttune.search.launch import launch_argv
from kttune.search.slo import SloTarget
from kttune.search.study import SearchResult, StudyOptions, run_search
from kttune.search.request import check_request
from kttune.search.user_flags import check_gpu_experts, check_threshold, cpuinfer_threads
from kttune.spec.launch_args import check_attention_backend
from kttune.spec.methods import get_method


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
        return serialize.search_dict(
            self.inputs.request, self.inputs.paths, self.result, self.explanation, list(self.argv), self.inputs.notes
        )


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
        return serialize.explain_dict(
            self.inputs.request, self.inputs.paths, self.explanation, list(self.argv), self.inputs.notes
        )


def slo_target(rate_per_s: float | None, ttft_s: float | None, tbt_ms: float | None) -> SloTarget | None:
    """The search's SLO at a load (requests/s, TTFT seconds, TBT milliseconds), or None for the
    idle-server search."""
    if rate_per_s is None and ttft_s is None and tbt_ms is None:
        return None
    if rate_per_s is None:
        raise UserError(
            "an SLO needs the load it must hold at",
            "pass {rate_per_s}, e.g. {rate_per_s} 1.5 (requests per second)",
            params=("rate_per_s",),
        )
    bounds.RATE_PER_S.check(rate_per_s, "rate_per_s")
    if ttft_s is None and tbt_ms is None:
        raise ParameterError(
            "rate_per_s",
            "without an SLO",
            "add {ttft_s} (e.g. 10s) and/or {tbt_ms} (e.g. 150ms)",
            also=("ttft_s", "tbt_ms"),
        )
    return SloTarget(rate_per_s, ttft_s, tbt_ms)


def search(
    inp: Inputs,
    trials: int = DEFAULT_TRIALS,
    seed: int | None = None,
    storage: str | None = None,
    on_trial: Callable[[int, int, Evaluation | None], None] | None = None,
    study_name: str | None = None,
    slo: SloTarget | None = None,
) -> SearchOutcome:
    """Run (or resume) the search and explain its pick; the pick is evaluated once. With `slo`
    (see `slo_target`) the pick must also meet it under load, in simulation."""
    res = run_search(
        inp.request,
        StudyOptions(trials=trials, seed=seed, storage=storage, study_name=study_name),
        on_trial=on_trial,
        slo=slo,
    )
    req = inp.request
    comp = res.components or Components(req.profile, req.model, req.method, req.tp)
    ex = explain(comp, res.best.cfg, req.workload, req.budget, evaluation=res.best)
    return SearchOutcome(inp, res, ex, tuple(command_for(inp, res.best)))


def launch_config(
    inp: Inputs,
    gpu_experts: int,
    chunk: int,
    threshold: int,
    max_total_tokens: int,
    cpuinfer: int | None = None,
    threadpools: int | None = None,
    components: Components | None = None,
    attention_backend: str | None = None,
) -> LaunchConfig:
    """A user-given flag set, checked against the model, the method and the profile's measured
    thread counts (kttune.search.user_flags). `cpuinfer` None: the most measured threads below the
    core count; `attention_backend` None: what kttune launches with (an MLA model's alone matters:
    docs/cost-model.md#mla-prefill-forms)."""
    req = inp.request
    for name, v, rule in (
        ("gpu_experts", gpu_experts, bounds.GPU_EXPERTS),
        ("threshold", threshold, bounds.THRESHOLD_TOKENS),
        ("chunk", chunk, bounds.FORWARD_TOKENS),
        ("max_total_tokens", max_total_tokens, bounds.KV_TOKENS),
    ):
        rule.check(v, name)
    if cpuinfer is not None:
        bounds.THREADS.check(cpuinfer, "cpuinfer")
    check_gpu_experts(req.model, gpu_experts)
    check_threshold(get_method(req.method), threshold)
    check_request(req)
    comp = components or Components(req.profile, req.model, req.method, req.tp)
    th = cpuinfer_threads(comp.cpu_thread_options(), req.profile.inventory.cpu.physical_cores or 10**9, cpuinfer)
    # the sub-pools and NUMA nodes measured fastest at this thread count, unless given
    pools, numa = (threadpools, ()) if threadpools else comp.threadpool_choice(th)
    running = running_requests(max_total_tokens, req.workload)  # what the pool admits of the workload
    return LaunchConfig(
        method=req.method,
        tp=req.tp,
        num_gpu_experts=gpu_experts,
        chunked_prefill_size=chunk,
        gpu_prefill_token_threshold=threshold,
        max_total_tokens=max_total_tokens,
        cpuinfer_threads=th,
        threadpool_count=pools,
        numa_nodes=numa,
        max_running_requests=running,
        cuda_graph_max_bs=running,
        attention_backend=check_attention_backend(attention_backend) if attention_backend else "",
    )


def explain_flags(
    inp: Inputs,
    gpu_experts: int,
    chunk: int = 8192,
    threshold: int = 0,
    max_total_tokens: int = 65536,
    cpuinfer: int | None = None,
    threadpools: int | None = None,
    attention_backend: str | None = None,
) -> ExplainOutcome:
    """Explain a given flag set (see `launch_config` for the checks). A `cpuinfer` between two
    measured counts is interpolated (`kttune.app.inputs.components_at`)."""
    req = inp.request
    comp = components_at(req.profile, req.model, req.method, req.tp, cpuinfer)
    cfg = launch_config(
        inp, gpu_experts, chunk, threshold, max_total_tokens, cpuinfer, threadpools, comp, attention_backend
    )
    ex = explain(comp, cfg, req.workload, req.budget)
    return ExplainOutcome(inp, ex, tuple(command_for(inp, ex.evaluation)))


def command_for(inp: Inputs, ev: Evaluation) -> list[str]:
    """The sglang-kt launch argv for an evaluated configuration."""
    return launch_argv(inp.request.model, ev.cfg, ev.vram, inp.request.budget.vram_bytes_per_gpu, inp.paths)
