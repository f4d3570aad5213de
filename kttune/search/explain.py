"""Why a configuration performs as predicted: both paths per prompt length, the crossover, the
VRAM against the budget. Pure data; kttune.emit.report renders it."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.cost.prefill import (
    crossover_tokens,
    hybrid_moe_layer,
    layerwise_moe_layer,
    layerwise_traffic_bytes,
    prefill_forwards,
    prefill_time_ms,
)
from kttune.search.admission import pool_note
from kttune.search.evaluate import Budget, Evaluation, evaluate
from kttune.search.workload import Workload

LENGTHS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


@dataclass(frozen=True)
class LengthRow:
    prompt_tokens: int
    hybrid_ms: float  # every forward on the hybrid path (threshold 0)
    layerwise_ms: float | None  # every forward layerwise (None: method has no layerwise path)
    chosen_ms: float
    chosen_paths: str  # e.g. "2 layerwise + 1 hybrid"
    traffic_bytes: int = 0  # expert weights streamed CPU -> GPU per link for this prompt (picked flags)


@dataclass(frozen=True)
class Explanation:
    evaluation: Evaluation
    rows: tuple[LengthRow, ...]
    crossover_tokens: int | None
    layer_hybrid_ms: float  # one MoE layer at a full chunk, hybrid
    layer_layerwise_ms: float | None
    layerwise_load_ms: float | None
    reasons: tuple[str, ...]
    notes: tuple[str, ...]
    fits: dict  # each fitted component: coefficients and relative RMS error on its own points


def explain(
    comp: Components, cfg: LaunchConfig, workload: Workload, budget: Budget, evaluation: Evaluation | None = None
) -> Explanation:
    """Both paths per prompt length, the crossover and the reasons for `cfg`. `evaluation`: the
    configuration's evaluation when the caller already has it (a search's pick), else it is made."""
    if evaluation is not None and evaluation.cfg != cfg:
        raise ValueError("explain(): the evaluation given is of another configuration")
    ev = evaluation if evaluation is not None else evaluate(comp, cfg, workload, budget)
    ctx = comp.model.max_position_embeddings
    lengths = sorted(
        {L for L in LENGTHS if L <= ctx} | set(workload.prompt_tokens[:: max(1, len(workload.prompt_tokens) // 4)])
    )
    hybrid_cfg = replace(cfg, gpu_prefill_token_threshold=0)
    lw_cfg = replace(cfg, gpu_prefill_token_threshold=1) if comp.method.layerwise else None
    rows = []
    for L in lengths:
        fw = prefill_forwards(comp, cfg, L)
        n_lw = sum(f.path == "layerwise" for f in fw)
        parts = [f"{n_lw} layerwise"] if n_lw else []
        if len(fw) - n_lw:
            parts.append(f"{len(fw) - n_lw} hybrid")
        rows.append(
            LengthRow(
                L,
                prefill_time_ms(comp, hybrid_cfg, L),
                prefill_time_ms(comp, lw_cfg, L) if lw_cfg else None,
                sum(f.total_ms for f in fw),
                " + ".join(parts),
                layerwise_traffic_bytes(comp, cfg, L),
            )
        )
    cross = crossover_tokens(comp, cfg)
    chunk = cfg.chunked_prefill_size
    lh = hybrid_moe_layer(comp, cfg, chunk).total_ms
    ll = layerwise_moe_layer(comp, cfg, chunk) if comp.method.layerwise else None
    reasons = []
    t = cfg.gpu_prefill_token_threshold
    if not comp.method.layerwise:
        reasons.append(
            f"{comp.method.name} has no layerwise path in sglang-kt 0.7.2 (a threshold > 0 crashes it): threshold stays 0"
        )
    elif t == 0:
        reasons.append(
            "layerwise is off (threshold 0): "
            + (
                f"it only beats hybrid from {cross} tokens per forward"
                if cross
                else "it never beats the hybrid path here"
            )
        )
    else:
        reasons.append(f"forwards of >= {t} tokens go layerwise, shorter ones (and every chunk tail) hybrid")
        if cross is not None:
            reasons.append(
                f"the paths cross at {cross} tokens per forward (one MoE layer: layerwise streams "
                f"{comp.model.num_experts} experts, then computes; hybrid is bound by the CPU experts)"
            )
        if t > chunk:
            reasons.append(f"threshold {t} > chunk {chunk}: layerwise can never fire")
    reasons += _kt_switch_reason(comp, cfg)
    reasons += _shape_law_reason(comp, cfg)
    fits = comp.fit_report(cfg.cpuinfer_threads, cfg.threadpool_count)
    loose = [f"{k} {v['rel_rmse']:.0%}" for k, v in fits.items() if v["rel_rmse"] > 0.2]
    notes = list(dict.fromkeys(comp.notes))
    pool = pool_note(cfg.max_total_tokens, cfg.max_running_requests, workload)
    if pool:
        notes.append(pool)
    if loose:
        notes.append("fits with more than 20% relative RMS error on their own measurements: " + ", ".join(loose))
    return Explanation(
        ev,
        tuple(rows),
        cross,
        lh,
        ll.total_ms if ll else None,
        ll.load_ms if ll else None,
        tuple(reasons),
        tuple(notes),
        fits,
    )


def _shape_law_reason(comp: Components, cfg: LaunchConfig) -> list[str]:
    """How much of kt-kernel's matrix-kernel time at the model's expert shape is elementwise work (the
    expert-shape law, docs/cost-model.md#the-expert-shape-law), when the hybrid path runs CPU experts
    and the class that measured the profile has a cost per output element."""
    work = comp.cpu_matrix_work()
    if work <= 1.0 or comp.model.num_experts - cfg.num_gpu_experts <= 0:
        return []
    m = comp.model
    return [
        f"kt-kernel's matrix GEMM at {m.name}'s {m.hidden_size} x {m.moe_intermediate_size} experts spends "
        f"{1 - 1 / work:.0%} of its time on the outputs (converting, activating, combining), not the "
        "multiply-adds: narrower experts run fewer flops per second (docs/cost-model.md#the-expert-shape-law); "
        f"its cost per output element: {comp.cpu_output_flops_source}"
    ]


def _kt_switch_reason(comp: Components, cfg: LaunchConfig) -> list[str]:
    """Where kt-kernel's CPU experts change GEMM kernels, when the hybrid path runs any on the CPU
    (docs/cost-model.md#kt-kernels-two-gemm-kernels): a hybrid forward just past it can be cheaper
    than one at it."""
    above = comp.cpu_matmul_above()
    cpu_experts = comp.model.num_experts - cfg.num_gpu_experts
    if above is None or cpu_experts <= 0:
        return []
    args = (cpu_experts, cfg.cpuinfer_threads, cfg.threadpool_count, tuple(cfg.numa_nodes))
    at, past = comp.cpu_moe_ms(above, *args), comp.cpu_moe_ms(above + 1, *args)
    return [
        f"kt-kernel runs a forward of up to {above} tokens (4 x {comp.model.num_experts} experts / top-"
        f"{comp.model.top_k}) on its vector GEMM, a longer one on its matrix GEMM: the CPU experts of a "
        f"{above}-token forward take {at:.1f} ms a layer, of a {above + 1}-token one {past:.1f} ms"
    ]
