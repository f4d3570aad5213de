"""CPU experts at a thread count measured only at small shapes (kttune.cost.components,
`_shape_from_other_threads`), held to measurements no fit saw: the path runner on the H200 box ran
glm-4.5-air BF16 and minimax-m2.1 FP8 at 11 threads (tests/data/paths-transfer-h200.json), while the
shipped H200 profile measured 11 threads only at a 1024x512 expert and 13 threads at wider ones."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import pytest

import kttune.cost.components as components
import kttune.spec.kt_classes as kt_classes
from kttune.cost.components import Components
from kttune.calibration.transfer import mape
from kttune.hw.registry import load_shipped
from kttune.calibration.runner import transfer_points
from kttune.runner.result import runs_in_results
from kttune.spec.loader import load_model

RESULTS = Path(__file__).parents[1] / "data" / "paths-transfer-h200.json"
# qwen3-next-80b-a3b at 11 threads, two instances: its 3.1M-parameter expert is 2x the small shape's
QWEN3_NEXT = [Path(__file__).parents[1] / "data" / f"paths-qwen3-next-h200{s}.json" for s in ("", "-2")]


@lru_cache(maxsize=4)
def errors_at_11_threads(
    reach: float, narrow_reach: float = components.NARROW_REACH, shape_law: bool = True
) -> dict[str, float]:
    old, old_narrow, old_law = components.SHAPE_REACH, components.NARROW_REACH, kt_classes.MATRIX_OUTPUT_FLOPS
    components.SHAPE_REACH, components.NARROW_REACH = reach, narrow_reach
    kt_classes.MATRIX_OUTPUT_FLOPS = old_law if shape_law else {}
    try:
        prof = replace(load_shipped("h200-pcie5-xeon-amx-16c"), calibration=())
        pts = []
        for req, runs in runs_in_results(json.loads(RESULTS.read_text())):
            c = Components(prof, load_model(req["model"], req.get("method")), runs[0].method, 1)
            pts += [p for r in runs if r.cpuinfer == 11 for p in transfer_points(r, c) if p.path == "hybrid"]
    finally:
        components.SHAPE_REACH, components.NARROW_REACH = old, old_narrow
        kt_classes.MATRIX_OUTPUT_FLOPS = old_law
    return {m: mape((p.raw_ms, p.measured_ms) for p in pts if p.model == m) for m in {p.model for p in pts}}


def test_the_shipped_11_thread_curves_are_small_shapes_only():
    prof = load_shipped("h200-pcie5-xeon-amx-16c")
    sizes = {c.shape.params_per_expert for c in prof.curves_of("cpu_moe", method="BF16", threads=11)}
    wider = {c.shape.params_per_expert for c in prof.curves_of("cpu_moe", method="BF16", threads=13)}
    assert max(sizes) * components.SHAPE_REACH < max(wider)


@pytest.mark.parametrize("model", ["glm-4.5-air", "minimax-m2.1"])
def test_hybrid_at_11_threads_holds_on_models_no_curve_measured(model):
    """The shape from 13 threads, scaled by the 11/13 ratio on a shape both measured: within 15%
    (the issue's raw target); extrapolating the 1024x512 curve alone is off by more. By flops alone
    that extrapolation overshoots by over 30%; the expert-shape law (a cost per output element) carries
    the small shape most of the way (docs/cost-model.md#the-expert-shape-law)."""
    borrowed = errors_at_11_threads(components.SHAPE_REACH)[model]
    assert borrowed <= 0.15
    if model == "glm-4.5-air":  # 4096x1408, 11x the small shape's expert
        extrapolated = errors_at_11_threads(float("inf"), float("inf"))[model]
        assert borrowed < extrapolated < 0.25
        assert errors_at_11_threads(float("inf"), float("inf"), shape_law=False)[model] > 0.3


@lru_cache(maxsize=4)
def qwen3_next_hybrid_error(narrow_reach: float, shape_law: bool = True) -> float:
    old, old_law = components.NARROW_REACH, kt_classes.MATRIX_OUTPUT_FLOPS
    components.NARROW_REACH = narrow_reach
    kt_classes.MATRIX_OUTPUT_FLOPS = old_law if shape_law else {}
    try:
        prof = replace(load_shipped("h200-pcie5-xeon-amx-16c"), calibration=())
        pts = []
        for path in QWEN3_NEXT:
            for req, runs in runs_in_results(json.loads(path.read_text())):
                c = Components(prof, load_model(req["model"], req.get("method")), runs[0].method, 1)
                pts += [p for r in runs for p in transfer_points(r, c) if p.path == "hybrid"]
    finally:
        components.NARROW_REACH, kt_classes.MATRIX_OUTPUT_FLOPS = old, old_law
    assert len(pts) == 8
    return mape((p.raw_ms, p.measured_ms) for p in pts)


def test_a_count_measured_only_narrower_borrows_a_nearer_shape():
    """Qwen3-Next's expert is 2x the 11-thread small shape (within SHAPE_REACH of it) and 1.5x
    narrower than the 13-thread Qwen3-30B shape. Extrapolated upward, the small shape's flop rate
    over-predicts its hybrid layer (measured on the H200 box, 1,536-8,192 tokens); taken from the
    nearer 13-thread shape and scaled to 11 threads, the error falls by more than half by flops alone
    (78% -> 27%), and with the expert-shape law it still falls (53% -> 35%: the law charges the
    narrower expert more per flop, which this profile's instance already over-predicted;
    docs/cost-model.md#the-expert-shape-law)."""
    flops_borrowed = qwen3_next_hybrid_error(components.NARROW_REACH, shape_law=False)
    flops_extrapolated = qwen3_next_hybrid_error(float("inf"), shape_law=False)
    assert flops_extrapolated > 0.6 and flops_borrowed < flops_extrapolated / 2
    borrowed, extrapolated = qwen3_next_hybrid_error(components.NARROW_REACH), qwen3_next_hybrid_error(float("inf"))
    assert borrowed < 0.4 and borrowed < extrapolated


def test_a_model_whose_expert_no_curve_came_near_is_told_to_probe_it():
    """Mixtral's 176M-parameter expert against the shipped profile's widest BF16 curve (Qwen3-30B's
    4.7M): its CPU side came out 2-2.75x slow on the H200 box (docs/cost-model.md), so the notes name
    the probe that measures it; a model whose expert the profile measured gets no such note."""
    prof = load_shipped("h200-pcie5-xeon-amx-16c")

    def shape_notes(name: str) -> list[str]:
        spec = load_model(name)
        return [n for n in Components(prof, spec, spec.default_method).notes if n.startswith("CPU MoE: no curve")]

    [note] = shape_notes("mixtral-8x7b")
    assert "176.2M" in note and "`kttune probe --model mixtral-8x7b`" in note
    assert shape_notes("qwen3-30b-a3b") == []


def _thread_law_notes(model: str, method: str, threads: int) -> list[str]:
    spec = load_model(model, method)
    c = Components(load_shipped("h200-pcie5-xeon-amx-16c"), spec, method, 1)
    c.cpu_moe_ms(1024, spec.num_experts, threads)
    return [n for n in c.notes if "of the same probe allows" in n]


def test_a_count_the_thread_law_reads_slow_is_named_in_the_notes():
    """The shipped profile's GLM-4.7 FP8_PERCHANNEL curve at 11 threads took 1.2-1.4x its 13-thread time
    at 8 of its 12 sizes (13/11 x 1.1 allows 1.3): a prediction read from it says so; the 13-thread
    count, one point over, and a curve within the law do not."""
    (note,) = _thread_law_notes("glm-4.7", "FP8_PERCHANNEL", 11)
    assert "11 threads (FP8_PERCHANNEL 5120x1536): 8 of 12 points" in note
    assert _thread_law_notes("glm-4.7", "FP8_PERCHANNEL", 13) == []
    assert _thread_law_notes("deepseek-v3", "FP8", 11) == []
