"""Evaluate one launch configuration against a workload with the cost and memory models: the
objectives the search optimises and the constraints it must respect. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.cost.decode import decode_step_ms
from kttune.cost.prefill import prefill_time_ms
from kttune.memory.host import HostRamBreakdown, host_ram_breakdown
from kttune.search.admission import requests_the_pool_holds
from kttune.memory.vram import (
    DEFAULT_VRAM_MARGIN,
    VramBreakdown,
    usable_vram_bytes,
    vram_breakdown,
    with_linear_state_slots,
)
from kttune.search.workload import Workload
from kttune.units import GIB


@dataclass(frozen=True)
class HostRamSource:
    """Where a budget's host RAM comes from, so that a message that cites it says whose RAM it is
    and how to change it. Its texts name parameters as `{host_ram_bytes}` and `{profile}`
    (kttune.errors: `PARAMS` lists them for the error that carries them)."""

    kind: str = "profile"  # "profile": a shipped profile or file; "probe": this machine's `kttune probe`; "given": host_ram_bytes
    profile: str = ""  # the profile's name (kind "profile"); "probe": the shipped profile to plan with instead

    PARAMS = ("host_ram_bytes", "profile")

    def has(self, gib: float) -> str:
        """'the profile's machine (h200-pcie5-xeon-amx-16c) has 126 GiB'."""
        if self.kind == "given":
            return f"{{host_ram_bytes}} gives {gib:.0f} GiB"
        if self.kind == "probe":
            return f"this machine has {gib:.0f} GiB (its `kttune probe` profile)"
        return f"the profile's machine{f' ({self.profile})' if self.profile else ''} has {gib:.0f} GiB"

    def fix(self) -> str:
        if self.kind == "given":
            return "raise {host_ram_bytes} to the target machine's RAM, or pick a smaller model or method"
        if self.kind == "probe":
            other = self.profile or "NAME"
            return (
                f"to plan for a bigger machine pass {{profile}} {other} (or another of `kttune profiles`) or "
                "{host_ram_bytes} (e.g. 512G), or pick a smaller model or method"
            )
        return (
            "pass {host_ram_bytes} with the target machine's RAM (e.g. 512G), {profile} for another machine, "
            "or pick a smaller model or method"
        )


@dataclass(frozen=True)
class Budget:
    vram_bytes_per_gpu: int
    host_ram_bytes: int
    vram_margin: float = DEFAULT_VRAM_MARGIN  # kttune.memory.vram.usable_vram_bytes
    # Words only: not part of what is searched (kttune.search.study.study_key leaves it out).
    host_ram_source: HostRamSource = field(default_factory=HostRamSource, compare=False)

    @property
    def usable_vram_bytes(self) -> int:
        return usable_vram_bytes(self.vram_bytes_per_gpu, self.vram_margin)


@dataclass(frozen=True)
class Evaluation:
    cfg: LaunchConfig
    mean_ttft_ms: float  # request-weighted mean prefill time over the workload's prompts
    ttft_ms: tuple[tuple[int, float], ...]  # (prompt tokens, prefill ms) per representative length
    decode_batch: int  # requests decoded at once (concurrency capped by the flag and the KV pool)
    tbt_ms: float  # decode step time at that batch
    decode_tok_s: float  # decode_batch / tbt: the batch's total (decode_tok_s_per_request: each request's)
    vram: VramBreakdown
    host: HostRamBreakdown
    constraints: dict[str, float] = field(default_factory=dict)  # each <= 0 when satisfied

    @property
    def decode_tok_s_per_request(self) -> float:
        """What one request of the batch sees: one token per decode step."""
        return 1e3 / self.tbt_ms

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.constraints.values())

    @property
    def violated(self) -> list[str]:
        return [k for k, v in self.constraints.items() if v > 0]


def decode_context(workload: Workload) -> float:
    """Average context of a decoding request: its prompt plus half its output."""
    return workload.mean_prompt_tokens + workload.output_tokens / 2


def evaluate(comp: Components, cfg: LaunchConfig, workload: Workload, budget: Budget) -> Evaluation:
    model = comp.model
    cfg = with_linear_state_slots(model, cfg)  # the states the launch command sizes, spelled out
    ttft = tuple((p, prefill_time_ms(comp, cfg, p)) for p in workload.prompt_tokens)
    mean_ttft = sum(w * t for (_, t), w in zip(ttft, workload.weights))
    ctx = decode_context(workload)
    # SGLang runs no more requests than the pool admits at their prompt + output (kttune.search.admission)
    batch = min(workload.concurrency, cfg.max_running_requests, requests_the_pool_holds(cfg.max_total_tokens, workload))
    tbt = decode_step_ms(comp, cfg, max(1, batch), ctx)
    vram = vram_breakdown(model, cfg)
    host = host_ram_breakdown(model, cfg)
    longest = workload.max_prompt_tokens + workload.output_tokens
    cons = {
        # the first chunk-sized prompt allocates the layerwise slot lazily: check the runtime peak
        "vram": (vram.runtime_peak_bytes - budget.usable_vram_bytes) / GIB,
        "host_ram": (host.total_bytes - budget.host_ram_bytes) / GIB,
        # layerwise can only fire when a forward reaches the threshold, and the chunk caps a forward
        "threshold_le_chunk": float(cfg.gpu_prefill_token_threshold - cfg.chunked_prefill_size)
        if cfg.gpu_prefill_token_threshold > 0
        else -1.0,
        # the KV pool must hold the workload's longest request
        "kv_holds_longest": float(longest - cfg.max_total_tokens) / 1024,
    }
    if workload.tbt_slo_ms is not None:
        cons["tbt_slo"] = tbt - workload.tbt_slo_ms
    return Evaluation(cfg, mean_ttft, ttft, max(1, batch), tbt, max(1, batch) / (tbt / 1e3), vram, host, cons)
