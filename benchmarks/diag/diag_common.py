"""What the diagnostics share: the runner's stack built as they all build it (kt-kernel's console
output sent to stderr, the model's own router unless given), so each script says only its shape.

    from diag_common import diag_stack   # the scripts run as `python benchmarks/diag/x.py`
    st = diag_stack(spec, "BF16", layers=1, threads=11, max_tokens=3072)
"""

from __future__ import annotations

from typing import Any


def diag_stack(
    spec: Any,
    method: str,
    *,
    router: Any = None,
    layers: int = 2,
    gpu_experts: int = 0,
    threads: int = 13,
    max_tokens: int,
    cpu_max_tokens: int | None = None,
    device: str = "cuda",
) -> Any:
    """`kttune.runner.stack.build_stack` of `layers` decoder layers of `spec` in `method`, `threads`
    kt-kernel workers, device buffers for `max_tokens` and kt-kernel's max_len `cpu_max_tokens`
    (default `max_tokens`)."""
    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.runner.stack import StackOptions, build_stack

    opts = StackOptions(
        layers=layers,
        gpu_experts=gpu_experts,
        cpuinfer=threads,
        max_tokens=max_tokens,
        cpu_max_tokens=cpu_max_tokens if cpu_max_tokens is not None else max_tokens,
        device=device,
    )
    with quiet_stdout(to_stderr=True):
        return build_stack(spec, router if router is not None else spec.router, method, opts)
