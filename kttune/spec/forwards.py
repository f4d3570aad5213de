"""Which forwards a prompt runs and which prefill path each takes, as sglang-kt 0.7.2 schedules them
(docs/sglang-kt.md#the-per-forward-switch): a prompt of L tokens runs floor(L/C) forwards of C tokens
(`--chunked-prefill-size`) and a tail of L mod C, and each forward picks its path by its own token
count against `--kt-gpu-prefill-token-threshold`. The one source for the cost model
(kttune.cost.prefill), the simulator (kttune.sim.costs), the comparisons (kttune.calibration) and the
path runner, which runs these forwards for real. Pure.
"""

from __future__ import annotations

# A forward: (path, tokens, prefix tokens already in the KV cache).
Forward = tuple[str, int, int]


def switch_path(method_layerwise: bool, tokens: int, threshold: int) -> str:
    """sglang-kt's per-forward switch: layerwise when the method has that path and
    0 < threshold <= tokens, else hybrid."""
    return "layerwise" if method_layerwise and 0 < threshold <= tokens else "hybrid"


def chunks_of(prompt_tokens: int, chunk: int) -> list[int]:
    """Forward sizes SGLang runs for one prompt: floor(L/C) chunks of C, then the tail."""
    full, tail = divmod(prompt_tokens, chunk)
    return [chunk] * full + ([tail] if tail else [])


def forward_plan(
    method_layerwise: bool, prompt_tokens: int, chunk: int, threshold: int, force: str | None = None
) -> tuple[Forward, ...]:
    """The forwards a prompt runs: (path, tokens, prefix) per chunk (`force`: every one on that path)."""
    out, prefix = [], 0
    for m in chunks_of(prompt_tokens, chunk):
        out.append((force or switch_path(method_layerwise, m, threshold), m, prefix))
        prefix += m
    return tuple(out)
