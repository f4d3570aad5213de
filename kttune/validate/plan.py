"""What a validation run sends and how long it waits. Pure."""

from __future__ import annotations

import random

from kttune.config import LaunchConfig
from kttune.units import GIB

# Readiness: SGLang loads the weights, profiles memory and captures CUDA graphs before /health
# answers 200. Kimi-K2 takes minutes (KT's docs: "2~3 minutes"); kt's own tuner waited 60 s and
# failed every probe of a large model. The timeout grows with the bytes to load.
READY_BASE_S = 120.0
READY_LOAD_GBPS = 1.0  # a pessimistic read + convert rate for the weights (GiB/s)


def readiness_timeout_s(weight_bytes: int, base_s: float = READY_BASE_S, load_gbps: float = READY_LOAD_GBPS) -> float:
    """Seconds to wait for a server holding `weight_bytes` of weights (GPU and CPU) to become ready."""
    return base_s + weight_bytes / (load_gbps * GIB)


def prompt_lengths(
    workload_lengths: tuple[int, ...], cfg: LaunchConfig, context_len: int, max_new_tokens: int = 1
) -> list[int]:
    """The prompt lengths to send, in order: first exactly the chunk size (KT's docs: test with an
    input of length chunked-prefill-size; the layerwise slot is allocated lazily at the first forward
    that reaches the threshold, so a short probe cannot show the OOM), then the workload's lengths,
    shortest first. Lengths are clipped to what the context holds with the generated tokens."""
    cap = max(1, context_len - max_new_tokens - 1)
    chunk = min(cfg.chunked_prefill_size, cap)
    rest = sorted({min(p, cap) for p in workload_lengths} - {chunk})
    return [chunk] + rest


def prompt_token_ids(length: int, vocab_size: int, seed: int) -> list[int]:
    """Random token ids (no shared prefix between prompts, so SGLang's radix cache cannot shorten a
    prefill), drawn away from the low ids where tokenizers keep special tokens."""
    lo = min(1000, max(1, vocab_size // 10))
    hi = max(lo + 1, min(vocab_size - 1, 100_000))
    rng = random.Random(seed)
    return [rng.randrange(lo, hi) for _ in range(length)]


def server_argv(emitted: list[str], python: str, module: str, host: str, port: int) -> list[str]:
    """The emitted `python -m sglang.launch_server ...` with this interpreter, this module (the real
    one or a stand-in) and this host and port."""
    if emitted[:2] != ["python", "-m"]:
        raise ValueError("expected an emitted `python -m <module> ...` command")
    flags = list(emitted[3:])
    for name, value in (("--port", str(port)), ("--host", host)):
        if name in flags:
            i = flags.index(name)
            del flags[i : i + 2]
        flags += [name, value]
    return [python, "-m", module] + flags
