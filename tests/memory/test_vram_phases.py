"""VRAM by phase: laws of the phase model, and the check against the path runner's measured device
peaks (benchmarks/results/paths-*.json from `kttune paths --out`, on the GPU box) when present:
at every chunk, measured <= predicted <= 1.15 x measured."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from kttune.config import LaunchConfig
from kttune.memory import vram
from kttune.spec.methods import get_method
from kttune.spec.loader import load_model
from kttune.units import GIB
from tests.helpers import cfg, model

RESULTS = sorted(Path(__file__).resolve().parents[2].glob("benchmarks/results/paths-*.json"))


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["kimi-k2-thinking", "deepseek-v3", "qwen3-30b-a3b", "minimax-m2"]),
       chunk=st.sampled_from([1024, 4096, 16384, 65536, 131072]), tp=st.sampled_from([1, 2, 4, 8]),
       thr=st.sampled_from([0, 1024, 4096]), n=st.sampled_from([0, 8]))
def test_peak_is_persistent_plus_the_largest_phase_never_the_sum(name, chunk, tp, thr, n):
    m = model(name)
    c = cfg(m.default_method, tp=tp, chunked_prefill_size=chunk, gpu_prefill_token_threshold=thr, num_gpu_experts=n)
    ph = vram.activation_phases(m, c)
    phases = (ph.attention, ph.router, ph.hybrid_moe, ph.layerwise_moe)
    assert ph.peak_bytes == ph.persistent + max(phases)
    assert ph.peak_bytes < ph.persistent + sum(phases) or sum(1 for p in phases if p) <= 1
    b = vram.vram_breakdown(m, c)
    assert b.runtime_peak_bytes == b.startup_bytes + b.layerwise_slot + ph.peak_bytes
    # twice the chunk never needs less
    b2 = vram.vram_breakdown(m, replace(c, chunked_prefill_size=2 * chunk))
    assert b2.prefill_activations >= b.prefill_activations


def test_margin_rule_round_trips():
    assert vram.vram_needed_bytes(vram.usable_vram_bytes(100 * GIB, 0.05), 0.05) == pytest.approx(100 * GIB, rel=1e-9)


def _runs():
    for f in RESULTS:
        d = json.loads(f.read_text())
        for r in d.get("runs", d if isinstance(d, list) else []):
            if r.get("peak_allocated_bytes"):
                yield f.name, r


def predicted_runner_peak(r: dict) -> int:
    """What the runner holds at its peak, with the phase model for the activations: K layers'
    non-expert weights, n resident experts per layer, the prompt's KV for K layers, the KT staging
    buffer, the full-layer slot when layerwise ran, and persistent activations plus the largest phase."""
    spec = load_model(r["model"], r["method"])
    c = LaunchConfig(method=r["method"], tp=r["tp"], num_gpu_experts=r["gpu_experts"], chunked_prefill_size=r["chunk"],
                     gpu_prefill_token_threshold=r["threshold"], max_total_tokens=max(65536, r["prompt_tokens"]),
                     cpuinfer_threads=max(1, r.get("cpuinfer") or 1), threadpool_count=1)
    k = r["layers_run"]
    emb = spec.vocab_size * spec.hidden_size * 2 * (1 if spec.tie_word_embeddings else 2)
    per_layer = max(0, spec.non_expert_bytes - emb) / max(1, spec.num_layers)
    per_expert = vram.gpu_expert_bytes(spec, get_method(r["method"]), replace(c, num_gpu_experts=1)) // spec.num_moe_layers
    kv = vram.kv_cell_bytes(spec, r["tp"]) / max(1, spec.kv_layer_count) * k * r["prompt_tokens"]
    layerwise = any(f.get("path") == "layerwise" for f in r.get("forwards", ()))
    slot = vram.layerwise_slot_bytes(spec, get_method(r["method"]), r["tp"]) if layerwise else 0
    return int(k * per_layer + k * r["gpu_experts"] * per_expert + kv + vram.staging_bytes(spec, c) + slot
               + vram.activation_phases(spec, c, r["chunk"]).peak_bytes)


@pytest.mark.skipif(not RESULTS, reason="no benchmarks/results/paths-*.json: run `kttune paths --out` on the GPU box")
def test_phase_model_bounds_the_runners_measured_peak():
    rows = list(_runs())
    assert rows, "the results files hold no run with a measured peak"
    for name, r in rows:
        pred, meas = predicted_runner_peak(r), r["peak_allocated_bytes"]
        assert meas <= pred <= 1.15 * meas, (name, r["model"], r["chunk"], pred / meas)
