"""The options several commands share, declared once (typer `Annotated` aliases): a command
writes `model: Model` (required) or `model: Model = None`, with its own default in its signature
where commands differ (typer shows a concrete default in `--help`). Numbers go through the bounds
layer (kttune.cli.bounds.bounded). An option with one name but another meaning in another command
(`--rate`: an SLO's load in `search`, the arrival rate in `simulate`) is declared apart, beside
its command.

Flags of a flag set that sglang-kt spells otherwise (`--kt-num-gpu-experts`, `--chunked-prefill-size`,
`--kt-cpuinfer`, `--tp`, ...) are accepted under both names, in every command that takes them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kttune import bounds
from kttune.app.names import sglang_names
from kttune.cli.bounds import bounded

# ---- help of the options several commands share (one wording everywhere) ---------------------------
MODEL_HELP = "Catalog name (`kttune models`), HF repo id, or a directory holding config.json (+ safetensors)."
VRAM_HELP = "VRAM budget per GPU: 32G, 32GiB, 24GB or 32000M (binary units; a bare number is GiB)."
PROFILE_HELP = (
    "Hardware profile: a file from `kttune probe`, or a shipped name (`kttune profiles`). Default: this "
    "machine's probe, else the shipped default."
)
MARGIN_HELP = (
    "Share of the VRAM budget kept free for what the model does not see (the same rule in search and explain)."
)
WORKLOAD_HELP = (
    "Workload preset (`kttune workloads`), a JSON file of prompt lengths, or a trace (.csv / .jsonl of "
    "arrival_s, prompt_tokens, output_tokens)."
)
JSON_HELP = "Print the result as JSON on stdout (anything else goes to stderr)."
REPORT_HELP = (
    "Also write DIR/report.md with PNG figures, and the JSON documents they come from "
    "(`kttune report DIR` rebuilds it). No display needed."
)


def _report_dir(value: Optional[Path]) -> Optional[Path]:
    from kttune.documents import check_report_dir

    return None if value is None else check_report_dir(value)  # refused before the command's work


# ---- the request ------------------------------------------------------------------------------------
Model = Annotated[str, typer.Option("--model", "-m", help=MODEL_HELP)]
Vram = Annotated[str, typer.Option("--vram", help=VRAM_HELP)]
GPUS_HELP = "GPUs (tensor-parallel size; default 1); --vram is per GPU."
Gpus = Annotated[int, bounded("--gpus", rule=bounds.GPUS, help=GPUS_HELP)]
Profile = Annotated[str, typer.Option("--profile", help=PROFILE_HELP)]
Workload = Annotated[str, typer.Option("--workload", "-w", help=WORKLOAD_HELP)]
KtMethod = Annotated[
    str,
    typer.Option(
        *sglang_names("method"), help="Override the KT method detected from the checkpoint (its quantization_config)."
    ),
]
HostRam = Annotated[str, typer.Option("--host-ram", help="Host RAM of the target machine (default: the profile's).")]
VramMargin = Annotated[float, bounded("--vram-margin", rule=bounds.VRAM_MARGIN, help=MARGIN_HELP)]
ModelPath = Annotated[
    str,
    typer.Option(
        "--model-path",
        help="Model directory to put in the launch command (`kttune validate` needs it to launch the real server).",
    ),
]
WeightPath = Annotated[
    str,
    typer.Option(
        *sglang_names("weight_path"),
        help="CPU weight directory for the launch command (converted weights for AMX methods).",
    ),
]
Chunks = Annotated[
    str,
    typer.Option(
        "--chunks",
        help="Chunk sizes to choose from instead of the defaults (1024..131072), e.g. 8192,65536; multiples of 64.",
    ),
]
Seed = Annotated[
    int,
    bounded(
        "--seed",
        rule=bounds.SEED,
        help="Seed, for a reproducible run (the search's sampler; "
        "simulate: the request sample; tune: its searches and "
        "the rounds' order).",
    ),
]
Json = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
Report = Annotated[Optional[Path], typer.Option("--report", help=REPORT_HELP, callback=_report_dir)]

# ---- a flag set (explain, validate, simulate): sglang-kt's spellings accepted too ---------------------
TpGpus = Annotated[int, bounded("--gpus", *sglang_names("tp"), rule=bounds.GPUS, help=GPUS_HELP)]
GpuExperts = Annotated[
    int,
    bounded(
        "--gpu-experts",
        *sglang_names("num_gpu_experts"),
        rule=bounds.GPU_EXPERTS,
        help="GPU experts per MoE layer (simulate: default 0).",
    ),
]
Chunk = Annotated[
    int,
    bounded(
        "--chunk",
        *sglang_names("chunked_prefill_size"),
        rule=bounds.FORWARD_TOKENS,
        help="Tokens per prefill forward (default 8192).",
    ),
]
Threshold = Annotated[
    int,
    bounded(
        "--threshold",
        *sglang_names("gpu_prefill_token_threshold"),
        rule=bounds.THRESHOLD_TOKENS,
        help="Forwards of at least this many tokens go layerwise (tokens; 0 = layerwise off; "
        "default 0, simulate: min(4096, chunk) for layerwise methods).",
    ),
]
KvTokens = Annotated[
    int,
    bounded(
        *sglang_names("max_total_tokens"),
        rule=bounds.KV_TOKENS,
        help="KV pool size in tokens (default 65536, simulate: 262144).",
    ),
]
Cpuinfer = Annotated[
    int,
    bounded(
        "--cpuinfer",
        *sglang_names("cpuinfer_threads"),
        rule=bounds.THREADS,
        help="kt-kernel threads (default: the most measured below the core count).",
    ),
]
MaxRunning = Annotated[
    int,
    bounded(
        *sglang_names("max_running_requests"),
        rule=bounds.RUNNING_REQUESTS,
        help="Requests run at once, at most (default: the workload's concurrency).",
    ),
]

# ---- measuring (search --measure, paths, tune) ----------------------------------------------------
Budget = Annotated[
    str,
    typer.Option(
        "--budget",
        help="Wall-clock budget, e.g. 10m, 90s, 1h: the work stops at it and "
        "decides on what was measured (rerun to resume).",
    ),
]
Layers = Annotated[
    int,
    bounded("--layers", rule=bounds.LAYER_COUNT, help="Consecutive MoE decoder layers the runner builds and runs (K)."),
]
