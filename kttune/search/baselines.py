"""Known launch flags that people use without tuning, measured beside the search's picks so a
measured search shows what tuning gained. Each states its source (docs/measured-search.md quotes
them). Pure.

Values that a machine cannot take as written are fitted to it and the fitting is recorded: the
thread count becomes the nearest measured `--kt-cpuinfer` below the core count, GPU experts are
capped at what the search space allows, the KV pool is clipped into the space, and the threshold
is 0 for methods without a layerwise path (sglang-kt crashes when it fires for them)."""

from __future__ import annotations

from dataclasses import dataclass

from kttune.config import LaunchConfig
from kttune.search.space import KV_UNIT, SearchSpace
from kttune.search.user_flags import usable_threads


@dataclass(frozen=True)
class Baseline:
    name: str
    source: str  # where these flags come from
    chunk: int  # --chunked-prefill-size
    threshold: int  # --kt-gpu-prefill-token-threshold
    gpu_experts: int  # --kt-num-gpu-experts
    max_total_tokens: int
    cpuinfer: int | None = None  # absolute thread count; None = share x cores
    cpuinfer_share: float | None = None  # of the machine's threads
    # --attention-backend (LaunchConfig.attention_backend): "auto" where the flags leave it to SGLang
    attention_backend: str = ""


KT_RUN_DEFAULTS = Baseline(
    name="kt run defaults",
    source="kt-kernel 0.7.2 `kt run` non-interactive defaults (kt_kernel/cli/commands/run.py): gpu_experts 1, "
    "chunked_prefill_size 4096, threshold 4096, max_total_tokens 40000, cpu_threads 0.8 x threads, "
    "attention_backend flashinfer",
    chunk=4096,
    threshold=4096,
    gpu_experts=1,
    max_total_tokens=40000,
    cpuinfer_share=0.8,
    attention_backend="flashinfer",
)

KT_LAYERWISE_DOC_EXAMPLE = Baseline(
    name="KT layerwise doc example",
    source="KTransformers layerwise prefill documentation, launch example: --kt-cpuinfer 64 --kt-num-gpu-experts 32 "
    "--chunked-prefill-size 16384 --kt-gpu-prefill-token-threshold 2048 (no --attention-backend: SGLang's pick)",
    chunk=16384,
    threshold=2048,
    gpu_experts=32,
    max_total_tokens=65536,
    cpuinfer=64,
    attention_backend="auto",
)

KT_RUN_INTERACTIVE = Baseline(
    name="kt run interactive defaults",
    source="kt-kernel 0.7.2 `kt run` interactive-mode defaults (kt_kernel/cli/commands/run.py): gpu_experts min(8, E), "
    "chunked_prefill_size 32768, threshold 500, max_total_tokens 32768, cpu_threads 0.8 x threads, "
    "attention_backend flashinfer",
    chunk=32768,
    threshold=500,
    gpu_experts=8,
    max_total_tokens=32768,
    cpuinfer_share=0.8,
    attention_backend="flashinfer",
)

BASELINES = (KT_RUN_DEFAULTS, KT_RUN_INTERACTIVE, KT_LAYERWISE_DOC_EXAMPLE)


def kt_run_default(space: SearchSpace, cores: int) -> LaunchConfig:
    """`KT_RUN_DEFAULTS` in `space`, as `search` measures it beside its pick (the first trial it
    enqueues): the thread count nearest share x cores among the space's, the chunk if searched (else
    the space's largest), the threshold if searched (else 0: methods without a layerwise path crash
    when it fires), at most the space's GPU experts, the KV pool clipped into the space."""
    b = KT_RUN_DEFAULTS
    want = int((b.cpuinfer_share or 0.8) * cores)
    th = _nearest(space.threads, want)
    chunk = b.chunk if b.chunk in space.chunks else space.chunks[-1]
    thr = b.threshold if b.threshold in space.thresholds else 0
    kv = max(space.kv_units_min, min(space.kv_units_max, b.max_total_tokens // KV_UNIT))
    return space.config(chunk, thr, min(b.gpu_experts, space.gpu_experts_max), kv, th, _backend(b, space))


def _backend(b: Baseline, space: SearchSpace) -> str:
    """The baseline's --attention-backend where the model has a choice of backends (MLA), else the
    space's one: for other attention kinds it changes neither the times nor the memory."""
    return b.attention_backend if len(space.backends) > 1 else space.backends[0]


def _nearest(options, want: int) -> int:
    return min(options, key=lambda o: (abs(o - want), o))


def baseline_config(b: Baseline, space: SearchSpace, cores: int) -> tuple[LaunchConfig, tuple[str, ...]]:
    """The baseline on this machine and space, and what had to change to get there."""
    notes = []
    want_threads = b.cpuinfer if b.cpuinfer is not None else int((b.cpuinfer_share or 0.8) * cores)
    usable = usable_threads(space.threads, cores)
    threads = _nearest(usable, min(want_threads, max(usable)))
    if threads != want_threads:
        notes.append(f"--kt-cpuinfer {want_threads} -> {threads} (measured counts below {cores} cores)")
    chunk = b.chunk if b.chunk in space.chunks else _nearest(space.chunks, b.chunk)
    if chunk != b.chunk:
        notes.append(f"chunk {b.chunk} -> {chunk}")
    threshold = b.threshold if len(space.thresholds) > 1 else 0
    if threshold and threshold not in space.thresholds:
        threshold = _nearest([t for t in space.thresholds if t], threshold)
    if threshold != b.threshold:
        notes.append(
            f"threshold {b.threshold} -> {threshold}"
            + (" (no layerwise path for this method)" if not threshold else "")
        )
    n = min(b.gpu_experts, space.gpu_experts_max)
    if n != b.gpu_experts:
        notes.append(f"GPU experts {b.gpu_experts} -> {n} (the most that fit)")
    kv_units = max(space.kv_units_min, min(space.kv_units_max, b.max_total_tokens // KV_UNIT))
    if kv_units * KV_UNIT != b.max_total_tokens:
        notes.append(f"--max-total-tokens {b.max_total_tokens} -> {kv_units * KV_UNIT}")
    return space.config(chunk, threshold, n, kv_units, threads, _backend(b, space)), tuple(notes)
