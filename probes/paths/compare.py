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
from dataclasses import dataclass, replace

from kttune.config import LaunchConfig
from kttune.cost.calibration import Calibration
from kttune.cost.components import Components
from kttune.cost.prefill import hybrid_moe_layer, layerwise_moe_layer
from kttune.memory import vram
from kttune.probes.paths.result import ForwardRecord, PathRun
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
    temporaries (`runner_phases`, `predicted_runner_peak_bytes`)."""
    m, k, h, i = tokens, spec.top_k, spec.hidden_size, spec.moe_intermediate_size // tp
    mk = m * k
    if backend.startswith("triton"):
        return mk * h * (2 + 4 + 4) + mk * 2 * i * 2 + m * h * 4 + mk * 4
    grouped = mk * h * (2 + 2 + 2 + 4 + 4) + mk * 2 * i * 2 + m * h * 4 + mk * 8
    if "scaled" in backend or "fp8" in backend:
        return grouped + mk * h + mk * i + 2 * mk * 4
    return grouped


def forward_phases(spec: ModelSpec, run: PathRun, f: ForwardRecord) -> vram.ActivationPhases:
    """SGLang's activation phases (`kttune.memory.vram.activation_phases`) for one forward of the run,
    on the path that forward took."""
    lw = f.path == "layerwise"
    cfg = replace(launch_config(run), chunked_prefill_size=max(run.chunk, f.tokens),
                  gpu_prefill_token_threshold=f.tokens if lw else 0)
    return vram.activation_phases(spec, cfg, f.tokens)


def runner_attention_bytes(spec: ModelSpec, tokens: int, prefix: int, tp: int) -> int:
    """The runner's MLA attention (kernels/attention.py `mla_prefill`): the normed input, q_a, q, the
    new latent and the output projection for the new tokens, as SGLang's expanded form; but the latent
    of the whole prefix plus the new tokens expanded at once by kv_b_proj (k_nope and v, [T, heads,
    nope + v]), the key with the rope part broadcast ([T, heads, qk]), v zero-padded to the qk head dim
    for flash attention ([T, heads, qk]), and the padded output ([M, heads, qk])."""
    m, t, h = tokens, prefix + tokens, spec.hidden_size
    heads = max(1, spec.num_attention_heads // tp)
    rope, lora, qk = spec.qk_rope_head_dim, spec.kv_lora_rank, spec.head_dim
    nope = qk - rope
    per_new = 2 * h + spec.q_lora_rank + heads * qk + (lora + rope) + heads * qk + (h if tp > 1 else 0)
    pad = qk if spec.v_head_dim != qk else 0
    return (m * per_new + t * heads * (nope + spec.v_head_dim + qk + pad)) * vram.BF16


def runner_phases(spec: ModelSpec, run: PathRun, f: ForwardRecord) -> vram.ActivationPhases:
    """The runner's activation phases for one forward: SGLang's (`forward_phases`) where the runner
    allocates alike, and where it does not, its own from its buffer shapes:

    - attention: MLA runs only the expanded (non-absorbed) form, over prefix and new tokens at once
      (`runner_attention_bytes`);
    - layerwise MoE: its GPU MoE (`runner_moe_bytes`) in place of SGLang's fused-MoE caches;
    - hybrid MoE (probes/paths/runner.py `_hybrid`): the GPU experts' fp32 [M, H] output (zeros when
      n = 0), the CPU output in fp32 and their fp32 sum, in place of SGLang's bf16 gpu_out and cpu_out;
      with n > 0 (`gpu_subset_moe`, kernels/gpu_experts.py) the rows routed to the n resident experts,
      gathered and run with k = 1 through the same GPU MoE (the expected M*k*n/E rows: the runner's
      random router spreads tokens evenly) with their fp32 copy, in place of SGLang's fused-MoE caches
      over M*k rows.
    """
    sg = forward_phases(spec, run, f)
    m = f.tokens
    attention = runner_attention_bytes(spec, m, f.prefix, run.tp) if spec.attention == "mla" else sg.attention
    layerwise, hybrid = sg.layerwise_moe, sg.hybrid_moe
    if f.path == "layerwise":
        layerwise += runner_moe_bytes(spec, run.backends.get("layerwise_moe", ""), m, run.tp) - vram.moe_activation_bytes(spec, m, run.tp)
    else:
        h = spec.hidden_size
        runner = 3 * m * h * 4  # the fp32 GPU-expert output (zeros when n = 0), cpu_out in fp32, their sum
        sglang = 2 * m * h * vram.BF16  # gpu_out and cpu_out
        if run.gpu_experts:
            rows = m * spec.top_k * run.gpu_experts // spec.num_experts
            backend = run.backends.get("gpu_experts", "") or run.backends.get("layerwise_moe", "")
            runner += runner_moe_bytes(replace(spec, top_k=1), backend, rows, run.tp) + rows * h * (2 + 4)
            sglang += vram.moe_activation_bytes(spec, m, run.tp)
        hybrid += runner - sglang
    return replace(sg, attention=attention, layerwise_moe=max(0, layerwise), hybrid_moe=max(0, hybrid))


def predicted_runner_peak_bytes(spec: ModelSpec, run: PathRun) -> dict:
    """What the runner holds on the device at its peak (bytes), term by term; the one source of truth
    for it (`kttune paths` reports it, tests/memory/test_vram_phases.py holds it to the measured peaks).

    SGLang's terms from `kttune.memory.vram`: K layers' non-expert weights (embeddings left out: the
    runner has none), n resident experts per layer, KV for the whole prompt on K layers, the KT staging
    buffer (the runner's device copy of the CPU experts' output plays its part, sized for the stack's
    largest forward, `buffer_tokens`, rather than the chunk), the full-layer slot (sglang-kt and the runner allocate it at the first layerwise forward and
    keep it: held whenever the method has a layerwise path and the run or an earlier one went
    layerwise), and the activations by phase (`activation_phases(...).peak_bytes`: persistent plus the
    largest phase, never the sum) for the run's largest forward. Runner-only, named:
    `runner_activation_difference`, the runner's activation peak (`runner_phases`: its own MoE
    temporaries, MLA's expanded form only) less SGLang's."""
    cfg = launch_config(run)
    method = get_method(run.method)
    k = run.layers_run
    tokens = max((f.tokens for f in run.forwards), default=run.chunk)
    emb = spec.vocab_size * spec.hidden_size * 2 * (1 if spec.tie_word_embeddings else 2)
    per_layer = max(0, spec.non_expert_bytes - emb) / max(1, spec.num_layers)
    resident = k * run.gpu_experts * (vram.gpu_expert_bytes(spec, method, cfg) // max(1, spec.num_moe_layers * max(1, run.gpu_experts)))
    kv_per_layer = vram.kv_cell_bytes(spec, run.tp) / max(1, spec.kv_layer_count)
    sglang = max(forward_phases(spec, run, f).peak_bytes for f in run.forwards)
    terms = {
        "layer_weights": int(k * per_layer),
        "resident_experts": int(resident),
        "kv_cache": int(k * kv_per_layer * run.prompt_tokens),
        "staging": vram.staging_bytes(spec, replace(cfg, chunked_prefill_size=run.buffer_tokens or run.chunk)),
        "layerwise_slot": vram.layerwise_slot_bytes(spec, method, run.tp) if method.layerwise else 0,
        "activations": sglang,
        "runner_activation_difference": max(runner_phases(spec, run, f).peak_bytes for f in run.forwards) - sglang,
    }
    terms["total"] = sum(terms.values())
    return terms
