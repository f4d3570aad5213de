"""The sglang-kt launch argv for a configuration (docs/sglang-kt.md#the-launch-command-kttune-emits). Every flag that must be
set is set: `--kt-weight-path` and `--kt-num-gpu-experts` always (either missing silently turns KT
off), the threshold explicitly (0 = off), `--max-total-tokens` so the lazily allocated layerwise
slot keeps its headroom, `--max-mamba-cache-size` for models with linear-attention layers (unset,
SGLang takes their states' room from the KV pool), and `--kt-cpuinfer` / `--kt-threadpool-count` as
chosen."""

from __future__ import annotations

from dataclasses import dataclass

from kttune.config import LaunchConfig
from kttune.memory.vram import (
    VramBreakdown,
    kv_start_room,
    launch_attention_backend,
    linear_state_slots,
    mem_fraction_static,
)
from kttune.spec.launch_args import PROGRAMS, flag_name
from kttune.spec.methods import get_method
from kttune.spec.model_spec import ModelSpec

# the environment the command runs under (kttune.emit.launch prints it before the argv)
ENV = {"PYTORCH_ALLOC_CONF": "expandable_segments:True", "SGLANG_ENABLE_JIT_DEEPGEMM": "0"}


@dataclass(frozen=True)
class LaunchPaths:
    model_path: str
    weight_path: str
    notes: tuple[str, ...] = ()


def default_paths(model: ModelSpec, method_name: str, model_path: str | None, weight_path: str | None) -> LaunchPaths:
    """Where the weights are: given paths, else placeholders named after the model."""
    method = get_method(method_name)
    notes = []
    repo = model.name
    if model.source.startswith("catalog:") and "(" in model.source:
        repo = model.source.split("(", 1)[1].split(",")[0].split(")")[0].strip()  # "Org/Repo"
    mp = model_path or f"/path/to/{repo.split('/')[-1]}"
    if not model_path:
        notes.append(f"replace {mp} with the model's directory")
    if weight_path:
        wp = weight_path
    elif method.native:
        wp = mp  # native methods read the experts from the model directory itself
    else:
        wp = f"/path/to/{repo.split('/')[-1]}-CPU-weight-{method.name}"
        notes.append(
            f"{method.name} needs converted CPU weights (kt-kernel scripts/convert_cpu_weights.py); replace {wp}"
        )
    return LaunchPaths(mp, wp, tuple(notes))


def launch_argv(
    model: ModelSpec,
    cfg: LaunchConfig,
    vram: VramBreakdown,
    vram_budget_bytes: int,
    paths: LaunchPaths,
    port: int = 30000,
) -> list[str]:
    """The argv, every flag named as kttune.spec.launch_args.FLAGS writes it (the table
    `kttune explain -- COMMAND` reads it back with)."""
    method = get_method(cfg.method)
    f = flag_name
    slots = linear_state_slots(model, cfg)
    argv = [
        "python",
        "-m",
        PROGRAMS[0],
        f("model_path"),
        paths.model_path,
        f("trust_remote_code"),
        f("weight_path"),
        paths.weight_path,
        f("method"),
        method.name,
        f("cpuinfer_threads"),
        str(cfg.cpuinfer_threads),
        f("threadpool_count"),
        str(cfg.threadpool_count),
        *([f("numa_nodes"), *map(str, cfg.numa_nodes)] if cfg.numa_nodes else []),
        f("num_gpu_experts"),
        str(cfg.num_gpu_experts),
        f("gpu_prefill_token_threshold"),
        str(cfg.gpu_prefill_token_threshold if method.layerwise else 0),
        f("chunked_prefill_size"),
        str(cfg.chunked_prefill_size),
        f("max_total_tokens"),
        str(cfg.max_total_tokens),
        f("max_running_requests"),
        str(cfg.max_running_requests),
        f("cuda_graph_max_bs"),
        str(cfg.cuda_graph_max_bs),
        *([f("linear_state_slots"), str(slots)] if slots else []),
        f("mem_fraction_static"),
        f"{mem_fraction_static(vram, vram_budget_bytes, kv_start_room(model, cfg)):g}",
        f("tp"),
        str(cfg.tp),
        f("attention_backend"),
        launch_attention_backend(model, cfg),
        f("disable_shared_experts_fusion"),
        f("enable_mixed_chunk"),
        f("watchdog_timeout"),
        "3000",
        f("port"),
        str(port),
    ]
    if "FP8" in method.name:
        argv += [f("fp8_gemm_backend"), "triton"]
    if model.sparse_attention:
        # sglang-kt picks fp8 for a sparse-attention model's KV from compute capability 10 on; kttune
        # sizes and launches the bf16 cell on every GPU, as KT's GLM-5 tutorial does
        # (docs/memory.md#kv-bytes-per-token-kv_cell_bytes)
        argv += [f("kv_cache_dtype"), "bfloat16"]
    if model.compressed_attention is not None:
        # SGLang runs DeepSeek-V4's cache in fp8 only (and forces it); said here so the command reads as it runs
        argv += [f("kv_cache_dtype"), "fp8_e4m3"]
    return argv
