"""What a search or an explanation is asked about (`SearchRequest`: model, KT method, hardware
profile, workload, budget, GPU count) and the structural rules no search can satisfy. Pure and
free of Optuna, so the commands that build a request without searching (`probe --model`,
`explain`, `tune`'s candidates) do not import it (kttune.search.study runs the study)."""

from __future__ import annotations

from dataclasses import dataclass

from kttune.errors import ParameterError, UserError
from kttune.hw.profile import HardwareProfile
from kttune.search.evaluate import Budget
from kttune.search.workload import Workload
from kttune.spec.methods import get_method
from kttune.spec.model_spec import ModelSpec


@dataclass(frozen=True)
class SearchRequest:
    """What is tuned: one model and KT method on one hardware profile, for a workload, under a
    budget, on `tp` GPUs. The same request serves a search and an explanation of given flags."""

    model: ModelSpec
    method: str
    profile: HardwareProfile
    workload: Workload
    budget: Budget
    tp: int = 1
    chunks: tuple[int, ...] = ()  # the user's chunk choices (kttune.search.space.parse_chunks); () = the defaults
    attention_backend: str = ""  # the user's --attention-backend, pinned; "" = searched (MLA models)


def tp_problem(model: ModelSpec, method_name: str, tp: int) -> str | None:
    """Why SGLang cannot shard `model` over `tp` GPUs, or None. Its rules: attention heads split
    evenly over the ranks; KV heads split evenly when there are at least `tp` of them, else `tp`
    must be a multiple of them (each is replicated); MLA's latent KV has no head rule; each
    expert's width splits evenly, in 128-wide blocks for FP8 block-quantized methods."""
    method = get_method(method_name)
    if model.num_attention_heads % tp:
        return f"{model.name} has {model.num_attention_heads} attention heads, which do not split over {tp} GPUs"
    kv = model.num_kv_heads
    if model.attention != "mla" and kv and (kv % tp if kv >= tp else tp % kv):
        return f"{model.name} has {kv} KV heads, which neither split over nor replicate evenly on {tp} GPUs"
    i = model.moe_intermediate_size
    if i % tp:
        return f"expert width {i} of {model.name} does not split over {tp} GPUs"
    if method.needs_fp8_tp_divisibility and (i // tp) % 128:
        return (
            f"{model.name} with {method.name} cannot run on {tp} GPUs: expert width {i}/{tp} is not a multiple of 128"
        )
    return None


def check_request(req: SearchRequest) -> None:
    """Structural rules that no search can satisfy (docs/sglang-kt.md#fp8-divisibility)."""
    if req.tp < 1:
        raise ParameterError("gpus", f"{req.tp} must be at least 1", "pass the number of GPUs (tensor-parallel size)")
    problem = tp_problem(req.model, req.method, req.tp)
    if problem is None:
        return
    ok = [t for t in range(1, 9) if tp_problem(req.model, req.method, t) is None]
    if ok:
        fix = f"use {{gpus}} {', '.join(map(str, ok[:-1])) + ' or ' + str(ok[-1]) if len(ok) > 1 else ok[0]}"
    else:
        fix = (
            f"no GPU count from 1 to 8 serves it with {req.method}: pass another {{method}} "
            "(e.g. BF16 or AMXINT4, whose experts need no 128-wide blocks)"
        )
    raise UserError(problem, fix, params=("gpus", "method"))
