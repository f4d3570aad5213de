"""The one table from the library's parameter names to the command line's flags. The library
raises errors naming parameters (`{vram_bytes}`, kttune.errors); `kttune.cli.common.run_app`
spells each as its flag here, for every command at once. A parameter a core error names must be
in FLAGS (tests/test_error_parameters.py)."""

from __future__ import annotations

FLAGS = {
    # the request (kttune.app.inputs.resolve_inputs)
    "model": "--model",
    "vram_bytes": "--vram",
    "gpus": "--gpus",
    "tp": "--gpus",
    "profile": "--profile",
    "workload": "--workload",
    "method": "--kt-method",
    "host_ram_bytes": "--host-ram",
    "vram_margin": "--vram-margin",
    "model_path": "--model-path",
    "weight_path": "--kt-weight-path",
    "chunks": "--chunks",
    # the search
    "trials": "--trials",
    "seed": "--seed",
    "storage": "--storage",
    "storage_password_file": "--storage-password-file",
    "rate_per_s": "--rate",
    "ttft_s": "--ttft-slo",
    "tbt_ms": "--tbt-slo",
    "budget_s": "--budget",
    "evaluator": "--evaluator",
    # a flag set (explain, validate, simulate)
    "gpu_experts": "--gpu-experts",
    "chunk": "--chunk",
    "threshold": "--threshold",
    "max_total_tokens": "--max-total-tokens",
    "cpuinfer": "--cpuinfer",
    "max_running_requests": "--max-running-requests",
    "command": "--command",
    # simulate
    "from_search": "--from-search",
    "rate": "--rate",
    "requests": "--requests",
    "groups": "--groups",
    "large_chunk": "--large-chunk",
    "router_skew": "--router-skew",
    "ttft_slo_s": "--ttft-slo",
    "tbt_slo_ms": "--tbt-slo",
    # validate, paths, tune
    "repeats": "--repeats",
    "python": "--python",
    "layers": "--layers",
    # profile derive
    "gpu": "--gpu",
    "link": "--link",
    "cpu_cores": "--cpu-cores",
    "cpu_isa": "--cpu-isa",
    "cpu_vendor": "--cpu-vendor",
    "numa_nodes": "--numa",
    "mem_channels": "--mem-channels",
}


def flag(param: str) -> str:
    """The flag of a library parameter (a name the table lacks is shown as it is)."""
    return FLAGS.get(param, param)


def spelled(err):
    """An error (or a result holding one: `named`) with its parameters spelled as flags."""
    named = getattr(err, "named", None)
    return named(flag) if named is not None else err
