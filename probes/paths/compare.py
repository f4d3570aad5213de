"""Hold the cost model and the memory model to path-runner records.

- Per forward: the cost model's time of one decoder layer on the path the forward took (MoE layer on
  that path + attention + dense matmuls, `kttune.cost.prefill`) against the runner's mean measured
  layer time. Errors per path, raw and with a calibration (`kttune.cost.calibration`).
- Crossover: the forward size where layerwise becomes no slower than hybrid, measured (from forced
  single-forward runs on both paths, interpolated in log tokens) against `crossover_tokens`.
- Memory: the memory model's terms for what the runner holds on the device (K layers' non-expert
  weights, n resident experts per layer, the prefix cache, the forward's activations, the KT staging
  buffer and, when layerwise fires, the full-layer slot with its MoE activations) against the
  runner's `torch.cuda.max_memory_allocated`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kttune.config import LaunchConfig
from kttune.cost.calibration import Calibration
from kttune.cost.components import Components
from kttune.cost.prefill import hybrid_moe_layer, layerwise_moe_layer
from kttune.memory import vram
from kttune.probes.paths.result import PathRun
from kttune.spec.methods import get_method
from kttune.spec.model_spec import ModelSpec


def launch_config(run: PathRun) -> LaunchConfig:
    return LaunchConfig(method=run.method, tp=run.tp, num_gpu_experts=run.gpu_experts, chunked_prefill_size=run.chunk,
                        gpu_prefill_token_threshold=run.threshold, max_total_tokens=max(65536, run.prompt_tokens),
                        cpuinfer_threads=run.cpuinfer or 1, threadpool_count=1)


@dataclass(frozen=True)
class ForwardPoint:
    """One forward of one run: the features a calibration needs, and the measured and predicted
    per-layer times (ms)."""

    model: str
    method: str
    path: str
    tokens: int
    prefix: int
    gpu_experts: int
    measured_ms: float
    predicted_ms: float  # raw cost model, one decoder layer
    predicted_moe_ms: float
    predicted_other_ms: float

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def forward_points(run: PathRun, c: Components) -> list[ForwardPoint]:
    cfg = launch_config(run)
    out = []
    for f in run.forwards:
        layer = layerwise_moe_layer(c, cfg, f.tokens) if f.path == "layerwise" else hybrid_moe_layer(c, cfg, f.tokens)
        other = c.attention_ms(f.tokens, f.prefix) + c.dense_ms(f.tokens)
        out.append(ForwardPoint(run.model, run.method, f.path, f.tokens, f.prefix, run.gpu_experts,
                                sum(f.layer_ms) / len(f.layer_ms), layer.total_ms + other, layer.total_ms, other))
    return out


def ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas if meas > 0 else float("nan")


def mape(pairs: list[tuple[float, float]]) -> float | None:
    xs = [ape(p, m) for p, m in pairs if m > 0]
    return sum(xs) / len(xs) if xs else None


def held_out_errors(points: list[ForwardPoint]) -> dict:
    """Per path: the raw MAPE over all points and the leave-one-out calibrated MAPE (each point
    predicted by the calibration of its method and path fitted on every other point), pooled over
    methods weighted by points; and per (method, path) the calibration entries themselves."""
    cal = Calibration.fit([p.to_dict() for p in points])
    out: dict = {"entries": cal.to_dicts()}
    for path in sorted({p.path for p in points}):
        es = [e for e in cal.entries if e.path == path]
        n = sum(e.points for e in es)
        held = [e for e in es if e.held_out_mape is not None]
        out[path] = {
            "points": n,
            "mape_raw": mape([(p.predicted_ms, p.measured_ms) for p in points if p.path == path]),
            "mape_calibrated_held_out": (sum(e.held_out_mape * e.points for e in held) / sum(e.points for e in held)) if held else None,
        }
    return out


def measured_crossover(pairs: list[tuple[int, float, float]]) -> int | None:
    """(tokens, hybrid ms, layerwise ms) per forward size -> the size where layerwise - hybrid changes
    sign, interpolated linearly in log(tokens); None when it does not in the range."""
    pairs = sorted(pairs)
    if not pairs:
        return None
    if pairs[0][2] <= pairs[0][1]:
        return pairs[0][0]
    for (m0, h0, l0), (m1, h1, l1) in zip(pairs, pairs[1:]):
        d0, d1 = l0 - h0, l1 - h1
        if d0 > 0 >= d1:
            f = d0 / (d0 - d1)
            return int(round(math.exp(math.log(m0) + f * (math.log(m1) - math.log(m0)))))
    return None


def predicted_crossover(c: Components, run: PathRun, hi: int = 65536) -> int | None:
    """The smallest forward size (1-token resolution) at which the model's layerwise MoE layer is no
    slower than its hybrid one (`crossover_tokens` answers in steps of 64); None if never up to hi."""
    cfg = launch_config(run)

    def lw_wins(m: int) -> bool:
        return layerwise_moe_layer(c, cfg, m).total_ms <= hybrid_moe_layer(c, cfg, m).total_ms

    if not c.method.layerwise or not lw_wins(hi):
        return None
    if lw_wins(1):
        return 1
    a, b = 1, hi
    while b - a > 1:
        mid = (a + b) // 2
        a, b = (a, mid) if lw_wins(mid) else (mid, b)
    return b


def runner_moe_bytes(spec: ModelSpec, backend: str, tokens: int, tp: int = 1) -> int:
    """Bytes the runner's own GPU MoE (kttune.kernels.grouped_moe) holds at its peak for `tokens`
    tokens, from its buffer shapes (M tokens, k = top-k, H hidden, I = moe_intermediate/tp), at the
    final combine where everything below is alive at once:

    - torch-grouped_mm (bf16): the gathered input [M*k, H] bf16, gate/up [M*k, 2I] bf16, the expert
      outputs sorted and unsorted [M*k, H] bf16 each, the combine's fp32 copy and weighted product
      [M*k, H] fp32 each, the fp32 sum [M, H], the expert order [M*k] int64;
    - torch-scaled_grouped_mm (fp8): the same plus the fp8 input [M*k, H], the fp8 intermediate
      [M*k, I] and the per-row scales [M*k] fp32 twice;
    - triton-w4a16 (int4): no gathered input (the kernel reads rows through the sorted ids), gate/up,
      the expert outputs [M*k, H] bf16, the combine's two fp32 [M*k, H], the fp32 sum, the sorted ids.

    SGLang's fused MoE holds far less (`kttune.memory.vram.moe_activation_bytes`: its intermediate
    caches, with gate/up and the down output sharing one buffer); the difference is the runner's own
    temporaries (`runner_moe_temporaries` in `predicted_runner_peak_bytes`)."""
    m, k, h, i = tokens, spec.top_k, spec.hidden_size, spec.moe_intermediate_size // tp
    mk = m * k
    if backend.startswith("triton"):
        return mk * h * (2 + 4 + 4) + mk * 2 * i * 2 + m * h * 4 + mk * 4
    grouped = mk * h * (2 + 2 + 2 + 4 + 4) + mk * 2 * i * 2 + m * h * 4 + mk * 8
    if "scaled" in backend or "fp8" in backend:
        return grouped + mk * h + mk * i + 2 * mk * 4
    return grouped


def predicted_runner_peak_bytes(spec: ModelSpec, run: PathRun) -> dict:
    """What the runner holds on the device at its peak (bytes), term by term; the one source of truth
    for it (`kttune paths` reports it, tests/memory/test_vram_phases.py holds it to the measured peaks).

    SGLang's terms from `kttune.memory.vram`: K layers' non-expert weights (embeddings left out: the
    runner has none), n resident experts per layer, KV for the whole prompt on K layers, the KT staging
    buffer, the full-layer slot (sglang-kt and the runner allocate it at the first layerwise forward and
    keep it: held whenever the method has a layerwise path and the run or an earlier one went
    layerwise), and the activations by phase (`activation_phases(...).peak_bytes`: persistent plus the
    largest phase, never the sum) for the run's largest forward. Runner-only: `runner_moe_temporaries`,
    what its own MoE kernels hold beyond SGLang's fused-MoE caches (`runner_moe_bytes`), when a forward
    ran the GPU MoE over a layer's experts (layerwise) or over the resident ones (hybrid, n > 0)."""
    cfg = launch_config(run)
    method = get_method(run.method)
    k = run.layers_run
    tokens = max((f.tokens for f in run.forwards), default=run.chunk)
    emb = spec.vocab_size * spec.hidden_size * 2 * (1 if spec.tie_word_embeddings else 2)
    per_layer = max(0, spec.non_expert_bytes - emb) / max(1, spec.num_layers)
    resident = k * run.gpu_experts * (vram.gpu_expert_bytes(spec, method, cfg) // max(1, spec.num_moe_layers * max(1, run.gpu_experts)))
    kv_per_layer = vram.kv_cell_bytes(spec, run.tp) / max(1, spec.kv_layer_count)
    layerwise = any(f.path == "layerwise" for f in run.forwards)
    phases = vram.activation_phases(spec, cfg, tokens)
    terms = {
        "layer_weights": int(k * per_layer),
        "resident_experts": int(resident),
        "kv_cache": int(k * kv_per_layer * run.prompt_tokens),
        "staging": vram.staging_bytes(spec, cfg),
        "layerwise_slot": vram.layerwise_slot_bytes(spec, method, run.tp) if method.layerwise else 0,
        "activations": phases.peak_bytes,
    }
    lw_tokens = max((f.tokens for f in run.forwards if f.path == "layerwise"), default=0)
    hy_tokens = max((f.tokens for f in run.forwards if f.path == "hybrid"), default=0) if run.gpu_experts else 0
    backend = run.backends.get("layerwise_moe" if layerwise else "gpu_experts", "") or run.backends.get("layerwise_moe", "")
    m = max(lw_tokens, hy_tokens)
    terms["runner_moe_temporaries"] = (max(0, runner_moe_bytes(spec, backend, m, run.tp) - vram.moe_activation_bytes(spec, m, run.tp))
                                       if m else 0)
    terms["total"] = sum(terms.values())
    return terms
