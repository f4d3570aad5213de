"""The cost model on the shipped measured profile predicts measurements it was NOT built from: each
test removes a measured point (or a whole curve) from the profile, builds the model on the rest and
compares the prediction with the removed measurement."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from kttune.cost.components import FASTEST_PIPELINE, SGLANG_KT_PIPELINE, Components
from kttune.cost.prefill import layerwise_load_ms
from kttune.hw.profile import Curve, HardwareProfile
from kttune.hw.registry import load_shipped
from tests.helpers import cfg, model

MEASURED = "h200-pcie5-xeon-amx-16c"


def held_out(
    prof: HardwareProfile, curve: Curve | None = None, x: float | None = None, drop=lambda c: False
) -> HardwareProfile:
    """`prof` without point `x` of `curve` and without every curve `drop` selects."""
    curves = []
    for c in prof.curves:
        if drop(c):
            continue
        if c is curve:
            c = replace(c, points=tuple(p for p in c.points if p.x != x))
            assert len(c.points) == len(curve.points) - 1
        curves.append(c)
    return replace(prof, curves=tuple(curves))


def the_curve(prof: HardwareProfile, kind: str, **params) -> Curve:
    (c,) = prof.curves_of(kind, **params)
    return c


@pytest.mark.parametrize("method", ["BF16", "AMXINT4", "RAWINT4", "FP8"])
def test_cpu_moe_predicts_a_left_out_token_count(method):
    # the Qwen3-30B-A3B expert shape was probed on the box at 15 threads, all 128 experts on the CPU;
    # leave out each inner token count in turn and predict it from the rest
    prof = load_shipped(MEASURED)
    curve = the_curve(prof, "cpu_moe", method=method, threads=15, hidden=2048)
    pts = sorted(curve.points, key=lambda p: p.x)
    errors = {}
    for p in pts[1:-1]:
        c = Components(held_out(prof, curve, p.x), model("qwen3-30b-a3b"), method)
        errors[p.x] = c.cpu_moe_ms(p.x, 128, 15) / p.t_ms - 1
    assert len(errors) >= 8
    assert statistics.median(abs(e) for e in errors.values()) <= 0.08, errors
    # prefill-sized forwards, where the search decides: each within 10%
    assert all(abs(e) <= 0.10 for x, e in errors.items() if x >= 256), errors


@pytest.mark.parametrize("threads,tol", [(13, 0.10), (11, 0.10), (15, 0.25)])
@pytest.mark.parametrize(
    "name,method", [("kimi-k2-thinking", "RAWINT4"), ("deepseek-v3", "FP8"), ("qwen3-30b-a3b", "BF16")]
)
def test_pipeline_predicts_a_left_out_layer_size(name, method, threads, tol):
    # layers of 1/4, 1/2 and all experts streamed A -> B -> C on the box: the half layer is left out
    # and predicted from the other two (15 threads fill 15 of 16 cores and vary more run to run)
    prof = load_shipped(MEASURED)
    curve = the_curve(prof, "pipeline", method=method, threads=threads)
    mid = sorted(curve.points, key=lambda p: p.x)[1]
    c = Components(held_out(prof, curve, mid.x), model(name), method, pipeline_driver=FASTEST_PIPELINE)
    streamed = round(mid.x / c.cpu_bytes_per_expert)
    assert c.pipeline_layer_ms(streamed, threads) == pytest.approx(mid.t_ms, rel=tol)


@pytest.mark.parametrize(
    "name,method", [("kimi-k2-thinking", "RAWINT4"), ("deepseek-v3", "FP8"), ("qwen3-30b-a3b", "BF16")]
)
def test_stages_compose_to_a_left_out_methods_layer_load(name, method):
    # every pipeline measurement of `method` is removed: the model composes stages A, B, C measured
    # alone with the overlap ratio measured on the OTHER methods, and must land on the full layer:
    # the fastest configuration's with that configuration's overlap, sglang-kt's own loop's with its
    # overlap (a server's prediction)
    prof = load_shipped(MEASURED)
    full = max(the_curve(prof, "pipeline", method=method, threads=13).points, key=lambda p: p.x)
    sglang_ms = full.extra["configs"][SGLANG_KT_PIPELINE]["layer_ms"]
    dropped = held_out(prof, drop=lambda cv: cv.kind == "pipeline" and cv.params.get("method") == method)
    for driver, want in ((FASTEST_PIPELINE, full.t_ms), (None, sglang_ms)):
        c = Components(dropped, model(name), method, pipeline_driver=driver)
        assert c.pipeline_layer_ms(c.model.num_experts, 13) is None  # really composed
        load, *_ = layerwise_load_ms(c, cfg(method, gpu_prefill_token_threshold=1024, cpuinfer_threads=13))
        assert load == pytest.approx(want, rel=0.10), driver


def test_measured_pipeline_meets_the_overlap_target():
    # a property of the shipped measurements (not of the model): at the best stage A thread count the
    # layer is within 15% of its slowest stage alone, and of the best stage-alone times of every config
    prof = load_shipped(MEASURED)
    for method in ("RAWINT4", "FP8", "BF16"):
        fulls = [
            max(the_curve(prof, "pipeline", method=method, threads=t).points, key=lambda p: p.x) for t in (15, 13, 11)
        ]
        best = min(fulls, key=lambda p: p.t_ms)
        assert best.extra["overlap"] <= 1.15 and best.extra["overlap_vs_best_stages"] <= 1.15, method


def test_the_full_core_pool_is_predicted_slow_from_other_points():
    # 16 kt-kernel workers on 16 cores starve the driving thread (docs/sglang-kt.md#the-cpuinfer-thread-cliff):
    # with the 1-token point of the 16-thread curve left out, the model still predicts the cliff
    prof = load_shipped(MEASURED)
    curve = the_curve(prof, "cpu_moe", method="AMXINT4", threads=16)
    c = Components(held_out(prof, curve, 1), model("qwen3-30b-a3b"), "AMXINT4")
    assert c.cpu_thread_options() == [11, 13, 15, 16]
    assert c.cpu_moe_ms(1, 128, 16) > 10 * c.cpu_moe_ms(1, 128, 15)
