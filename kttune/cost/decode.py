"""Decode step time (always the hybrid path: one token per request, docs/sglang-kt.md#the-per-forward-switch)."""

from __future__ import annotations

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.cost.prefill import hybrid_moe_layer


def decode_step_ms(c: Components, cfg: LaunchConfig, batch: int, context: float) -> float:
    """One decode iteration of `batch` requests at an average `context` tokens: every MoE layer on
    the hybrid path with M = batch, plus the HBM-bound non-expert weights and KV reads. The GPU
    experts matter here: the CPU handles (E - n)/E of the routed pairs."""
    moe = c.model.num_moe_layers * hybrid_moe_layer(c, cfg, batch).total_ms
    return moe + c.decode_dense_ms(batch, context, cfg.attention_backend or None)
