"""The memory model held to the path runner: what the runner holds on the device (K layers' non-expert
weights, n resident experts per layer, the prefix cache, the forward's activations, the KT staging
buffer and, when layerwise fires, the full-layer slot with its MoE activations) in
`kttune.memory.vram`'s terms, plus the runner-only terms its own kernels add, against the runner's
`torch.cuda.max_memory_allocated` (tests/memory/test_vram_phases.py).
"""

from __future__ import annotations

from dataclasses import replace

from kttune.calibration.runner import launch_config
from kttune.memory import vram
from kttune.runner.result import ForwardRecord, PathRun
from kttune.kernels.attention_shape import attention_shape
from kttune.spec.methods import REPACKED_METHODS, get_method
from kttune.spec.model_spec import ModelSpec


# The attention backend whose MLA prefill the runner's attention mirrors: the prefix is expanded with
# the new tokens at once, as SGLang's one-shot form on fa3 / flashinfer (kttune.memory.vram.mla_attention_form).
RUNNER_ATTENTION_BACKEND = "flashinfer"
# torch's default cuBLAS workspace on one stream (CUBLAS_WORKSPACE_CONFIG ":4096:8", 8 x 4 MiB), a
# block the caching allocator holds from the first GEMM on.
CUBLAS_WORKSPACE_BYTES = 32 * 2**20


def _on_cuda(run: PathRun) -> bool:
    """Whether the run's device was a GPU (`PathRun.device` names it)."""
    return run.device.lower().startswith("nvidia")


def forward_phases(spec: ModelSpec, run: PathRun, f: ForwardRecord) -> vram.ActivationPhases:
    """SGLang's activation phases (`kttune.memory.vram.activation_phases`) for one forward of the run,
    on the path that forward took, after the forward's own prefix, on `RUNNER_ATTENTION_BACKEND`, a
    linear-attention layer's as its projections alone (the runner does not run the recurrence)."""
    lw = f.path == "layerwise"
    cfg = replace(
        launch_config(run),
        chunked_prefill_size=max(run.chunk, f.tokens),
        gpu_prefill_token_threshold=f.tokens if lw else 0,
    )
    return vram.activation_phases(
        spec, cfg, f.tokens, prefix=f.prefix, attention_backend=RUNNER_ATTENTION_BACKEND, linear_recurrence=False
    )


def runner_only_bytes(spec: ModelSpec, run: PathRun, f: ForwardRecord) -> dict[str, int]:
    """What the runner holds beyond SGLang's buffers in one forward, by phase, from its own code (each
    a named, bounded term; docs/path-runner.md#memory):

    - attention: MLA expands every prefix (SGLang absorbs prefixes under
      `vram.MLA_CHUNKED_PREFIX_THRESHOLD` tokens), and on CUDA pads the values to the key head dim
      for flash attention (the padded values [T, heads, qk] and output [M, heads, qk]); the attention
      output made contiguous for the o projection [M, heads*v]; Qwen3's q/k norms as new tensors;
      the elementwise ops' fp32 pieces (kttune.kernels.decoder.PIECE_ELEMENTS, up to six temporaries);
    - MoE (either path, when a GPU fused MoE runs): one expert run's gathered input and GEMM output
      (kttune.kernels.grouped_moe.fused_layout_transient_bytes).
    """
    from kttune.kernels.decoder import PIECE_ELEMENTS
    from kttune.kernels.grouped_moe import fused_layout_transient_bytes

    m, p, tp = f.tokens, f.prefix, run.tp
    heads = max(1, spec.num_attention_heads // tp)
    attention = m * heads * spec.v_head_dim * vram.BF16  # the output made contiguous
    if spec.attention == "mla":
        sglang = vram.attention_phase_bytes(spec, m, tp, prefix=p, backend=RUNNER_ATTENTION_BACKEND)
        form = "expanded" if p == 0 else "one_shot"
        expand = vram.attention_phase_bytes(spec, m, tp, prefix=p, backend=RUNNER_ATTENTION_BACKEND, form=form) - sglang
        if spec.v_head_dim != spec.head_dim and _on_cuda(run):
            # padded values and output during flash attention; the padded values are freed before
            # the output is made contiguous, so the larger of the two moments counts
            pad = ((p + m) * heads * spec.head_dim + m * heads * (spec.head_dim - spec.v_head_dim)) * vram.BF16
            attention = max(pad, m * heads * spec.head_dim * vram.BF16)
        attention += expand
    elif attention_shape(spec, 0).qk_norm:
        attention += m * (heads + max(1, spec.num_kv_heads // tp)) * spec.head_dim * vram.BF16
    attention += min(6 * PIECE_ELEMENTS, 6 * m * spec.hidden_size) * vram.FP32
    fused = f.path == "layerwise" or run.gpu_experts > 0
    method = get_method(run.method)
    fp8 = vram.w8a8_activations(method)
    i_tp = spec.moe_intermediate_size // tp
    moe = fused_layout_transient_bytes(m, spec.top_k, spec.hidden_size, i_tp, fp8) if fused else 0
    if fused and method.name == "FP8" and _on_cuda(run):
        # the block scales as one fp32 scale per row, made at each call (kernels/gpu_experts.py)
        experts = spec.num_experts if f.path == "layerwise" else run.gpu_experts
        moe += experts * (2 * i_tp + spec.hidden_size) * vram.FP32
    return {"attention": int(attention), "moe": int(moe)}


def pipeline_ring_bytes(spec: ModelSpec, run: PathRun) -> int:
    """The runner's GPU staging ring for methods its pipeline repacks (RAWINT4's and MXFP4's stage C
    reads raw experts from it; probes/gpu_pipeline.py `GpuLayer`): 2 x post_batch entries of `group` experts,
    allocated with the full-layer slot and kept. sglang-kt repacks through per-expert transients
    instead (`vram.layerwise_transient_bytes`). Read from the run's pipeline label."""
    from kttune.kernels.expert_weights import kinds_nbytes, slot_kinds

    label = run.backends.get("layerwise_pipeline", "")
    if run.method not in REPACKED_METHODS or not label:
        return 0
    fields = dict(kv.split("=", 1) for kv in label.split(",") if "=" in kv)
    group, post = int(fields.get("group", 1)), int(fields.get("post_batch", 1))
    return 2 * post * group * kinds_nbytes(slot_kinds(run.method, spec.hidden_size, spec.moe_intermediate_size, run.tp))


def runner_phases(spec: ModelSpec, run: PathRun, f: ForwardRecord) -> vram.ActivationPhases:
    """The runner's activation phases for one forward: SGLang's (`forward_phases`) plus what only the
    runner holds (`runner_only_bytes`)."""
    sg = forward_phases(spec, run, f)
    extra = runner_only_bytes(spec, run, f)
    lw = f.path == "layerwise"
    return replace(
        sg,
        attention=sg.attention + extra["attention"],
        layerwise_moe=sg.layerwise_moe + (extra["moe"] if lw else 0),
        hybrid_moe=sg.hybrid_moe + (0 if lw else extra["moe"]),
    )


def layerwise_slot_held(runs: list[PathRun]) -> list[bool]:
    """Per run of one `kttune paths` request (in the order they ran), whether the full-layer slot was
    on the device: allocated at the first layerwise forward and kept until the GPU/CPU split or the
    thread count changes (the stack then drops its pipeline, `set_gpu_experts` / `set_threads`), as
    sglang-kt keeps it for the server's life once allocated. A run measured in interleaved rounds
    reports the largest peak of its rounds (`kttune.runner.api.measure_jobs`), so it holds the slot
    when any run of its split is layerwise."""
    held, last, out = False, None, []
    # a run measured in interleaved rounds (`timing` over 2+ samples) reports its peak over every round:
    # from the second on, every layerwise run of its split has run before it
    with_slot = {(r.gpu_experts, r.cpuinfer) for r in runs if "layerwise" in r.paths}
    for r in runs:
        if (r.gpu_experts, r.cpuinfer) != last:
            held, last = False, (r.gpu_experts, r.cpuinfer)
        held = held or "layerwise" in r.paths
        rounds = (r.timing or {}).get("measured_ms", {}).get("n", 1)
        out.append(held or (rounds > 1 and (r.gpu_experts, r.cpuinfer) in with_slot))
    return out


def static_runner_bytes(spec: ModelSpec, run: PathRun, slot_held: bool | None = None) -> dict[str, int]:
    """What the runner holds through a whole prompt (SGLang's terms for K layers; see
    `predicted_runner_peak_bytes`). `slot_held`: whether the layerwise slot was allocated
    (`layerwise_slot_held`); None: whenever the method has a layerwise path (the larger answer, for
    a run whose history is unknown)."""
    cfg = launch_config(run)
    method = get_method(run.method)
    slot = method.layerwise if slot_held is None else (slot_held and method.layerwise)
    k = run.layers_run
    emb = spec.vocab_size * spec.hidden_size * 2 * (1 if spec.tie_word_embeddings else 2)
    per_layer = max(0, spec.non_expert_bytes - emb) / max(1, spec.num_layers)
    if method.cpu_format == "mxfp4":
        # runner-only layout: one repacked copy of each resident expert and one full-layer slot, with
        # bf16 scales as stage A writes them (sglang-kt holds raw and Marlin-prepared copies,
        # `vram.gpu_expert_bytes` / `vram.layerwise_slot_bytes`; docs/path-runner.md#mxfp4)
        from kttune.kernels.expert_weights import kinds_nbytes, slot_kinds

        per_expert = kinds_nbytes(slot_kinds(run.method, spec.hidden_size, spec.moe_intermediate_size, run.tp))
        resident, slot_bytes = k * run.gpu_experts * per_expert, spec.num_experts * per_expert
    else:
        resident = (
            k
            * run.gpu_experts
            * (vram.gpu_expert_bytes(spec, method, cfg) // max(1, spec.num_moe_layers * max(1, run.gpu_experts)))
        )
        slot_bytes = vram.layerwise_slot_bytes(spec, method, run.tp)
    kv_per_layer = vram.kv_cell_bytes(spec, run.tp) / max(1, spec.kv_layer_count)
    return {
        # as the runner holds them when recorded (bf16 projections, where a checkpoint such as
        # DeepSeek-V3's keeps them in fp8); else the model's per-layer average
        "layer_weights": int(run.layer_weight_bytes or k * per_layer),
        "resident_experts": int(resident),
        "kv_cache": int(k * kv_per_layer * run.prompt_tokens),
        "staging": vram.staging_bytes(spec, replace(cfg, chunked_prefill_size=run.buffer_tokens or run.chunk)),
        "layerwise_slot": slot_bytes if slot else 0,
        # torch's cuBLAS workspace for the main stream's GEMMs (in SGLang's figures, part of
        # vram.CUDA_CONTEXT_BYTES)
        "cublas_workspace": CUBLAS_WORKSPACE_BYTES if _on_cuda(run) else 0,
        # runner-only: the pipeline's staging ring, kept with the slot
        "pipeline_ring": pipeline_ring_bytes(spec, run) if slot else 0,
    }


def predicted_phase_peaks(spec: ModelSpec, run: PathRun, slot_held: bool | None = None) -> list[dict[str, int]]:
    """Per forward, the predicted device peak of its attention block (with the router) and of its MoE
    block: the static terms, the persistent activations and that phase (SGLang's plus the runner's
    own); what the runner's `attn_peak_bytes` / `moe_peak_bytes` measure."""
    static = sum(static_runner_bytes(spec, run, slot_held).values())
    out = []
    for f in run.forwards:
        ph = runner_phases(spec, run, f)
        moe = ph.layerwise_moe if f.path == "layerwise" else ph.hybrid_moe
        out.append({"attn": static + ph.persistent + max(ph.attention, ph.router), "moe": static + ph.persistent + moe})
    return out


def predicted_runner_peak_bytes(spec: ModelSpec, run: PathRun, slot_held: bool | None = None) -> dict:
    """What the runner holds on the device at its peak (bytes), term by term; the one source of truth
    for it (`kttune paths` reports it, tests/memory/test_vram_phases.py holds it to the measured peaks).

    SGLang's terms from `kttune.memory.vram`: K layers' non-expert weights (embeddings left out: the
    runner has none), n resident experts per layer, KV for the whole prompt on K layers, the KT staging
    buffer (the runner's device copy of the CPU experts' output plays its part, sized for the stack's
    largest forward, `buffer_tokens`, rather than the chunk), the full-layer slot (sglang-kt and the runner allocate it at the first layerwise forward and
    keep it while the configuration's split and threads stay: `slot_held`, from
    `layerwise_slot_held` over the request's runs), and the activations by phase (`activation_phases(...).peak_bytes`: persistent plus the
    largest phase, never the sum) for the worst forward of the run, each forward after its own prefix.
    Runner-only, named: `runner_activation_difference`, the runner's activation peak (`runner_phases`)
    less SGLang's, a few percent (`runner_only_bytes`)."""
    terms = static_runner_bytes(spec, run, slot_held)
    sglang = max(forward_phases(spec, run, f).peak_bytes for f in run.forwards)
    terms["activations"] = sglang
    terms["runner_activation_difference"] = max(runner_phases(spec, run, f).peak_bytes for f in run.forwards) - sglang
    terms["total"] = sum(terms.values())
    return terms
