"""kt-kernel's two GEMM kernels in the cost model (docs/cost-model.md#kt-kernels-two-gemm-kernels):
the rule that names the switch, the fit that keeps the two kernels' flop rates apart, and both held
to measurements on the H200 box that neither was fitted on."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from kttune.calibration.runner import transfer_points
from kttune.cost.components import Components, fit_curves
from kttune.cost.fit import interp_loglog
from kttune.hw.features import kt_gemm_split
from kttune.hw.profile import load_profile
from kttune.hw.registry import load_shipped
from kttune.runner.result import runs_in_results
from kttune.spec.kt_classes import kt_matmul_above
from kttune.spec.loader import load_model

BOX = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "2026-12-04-h200-pcie5-xeon-amx-16c"


def test_the_switch_follows_experts_over_top_k_for_the_classes_that_have_one():
    assert kt_matmul_above("AMXInt4_KGroup_MOE", 384, 8) == 192  # Kimi-K2
    assert kt_matmul_above("AMXBF16_MOE", 128, 8) == 64  # Qwen3-30B-A3B, GLM-4.5-Air
    assert kt_matmul_above("AMXBF16_MOE", 160, 8) == 80
    assert kt_matmul_above("AMXInt8_MOE", 10, 3) == 13  # C++ integer division: 40 / 3
    for one_kernel in ("AMXFP8_MOE", "AMXFP8PerChannel_MOE", "AVX2BF16_MOE", "AVX2RawInt4_MOE", None):
        assert kt_matmul_above(one_kernel, 384, 8) is None


def test_flops_go_to_the_kernel_the_length_selects():
    row = (1.0, 5.0, 7.0)
    assert kt_gemm_split(row, 192, 192) == (1.0, 5.0, 7.0, 0.0)
    assert kt_gemm_split(row, 193, 192) == (1.0, 5.0, 0.0, 7.0)
    assert kt_gemm_split(row, 1, None) == (1.0, 5.0, 0.0, 7.0)


def _kimi_probe():
    return load_profile(BOX / "probe-kimi-k2-thinking-switch.profile.json")


def _without(profile, xs):
    curves = tuple(
        replace(c, points=tuple(p for p in c.points if p.x not in xs)) if c.kind == "cpu_moe" else c
        for c in profile.curves
    )
    return replace(profile, curves=curves)


def test_the_lengths_the_probe_left_out_are_predicted_on_their_own_kernel():
    """The box's Kimi-K2 probe with its points at the switch (192: the last on the vector kernel,
    240: past it) held out: the fit on the powers of two predicts both within 10%, where reading the
    curve across the switch (log-log between 128 and 256) misses 192 by over 25%."""
    probe = _kimi_probe()
    (curve,) = probe.curves_of("cpu_moe", method="RAWINT4")
    measured = {p.x: p.t_ms for p in curve.points}
    assert {192, 240} <= set(measured)
    comp = Components(_without(probe, {192, 240}), load_model("kimi-k2-thinking"), "RAWINT4")
    for x in (192, 240):
        assert comp.cpu_moe_ms(x, 384, 11) == pytest.approx(measured[x], rel=0.10), x
    across = interp_loglog([128, 256], [measured[128], measured[256]], 192)
    assert abs(across - measured[192]) / measured[192] > 0.25


def test_one_kernel_measured_leaves_one_flop_rate():
    """A curve with points on one side of the switch only fits one flop rate for both kernels, so a
    length on the other side is not predicted as free of compute."""
    probe = _kimi_probe()
    (curve,) = probe.curves_of("cpu_moe", method="RAWINT4")
    above_only = replace(curve, points=tuple(p for p in curve.points if p.x > 192))
    fit = fit_curves([above_only])
    coef = dict(zip(fit.names, fit.coef))
    assert coef["ms_per_flop_vector"] == coef["ms_per_flop"]


def test_the_runners_hybrid_forwards_across_the_switch_held_out():
    """Runner forwards of Kimi-K2 at 160-288 tokens (none a length the probe measured) predicted from
    the probe of the same device call: each length's hybrid MoE layer within 15%, the mean error under
    10%, and 176 -> 200 faster, as measured (the call past 192 runs the other kernel)."""
    spec = load_model("kimi-k2-thinking")
    profile = load_shipped("h200-pcie5-xeon-amx-16c")
    probe = _kimi_probe()
    kinds = {c.kind for c in probe.curves}
    profile = replace(
        profile, calibration=(), curves=tuple(c for c in profile.curves if c.kind not in kinds) + probe.curves
    )
    (req, runs), *_ = runs_in_results(json.loads((BOX / "crossover-kimi-k2-thinking-switch.json").read_text()))
    comp = Components(profile, spec, runs[0].method, runs[0].tp, pipeline_driver=runs[0].pipeline_driver)
    by: dict[int, list[tuple[float, float]]] = {}
    for r in runs:
        for p in transfer_points(r, comp):
            if p.path == "hybrid":
                by.setdefault(p.tokens, []).append((p.raw_ms, p.measured_ms))
    assert set(by) >= {176, 200, 224, 288}
    pred = {n: statistics.median(a for a, _ in pairs) for n, pairs in by.items()}
    meas = {n: statistics.median(b for _, b in pairs) for n, pairs in by.items()}
    errs = {n: (pred[n] - meas[n]) / meas[n] for n in by}
    assert all(abs(e) <= 0.15 for e in errs.values()), errs
    assert statistics.mean(abs(e) for e in errs.values()) < 0.10, errs
    assert meas[200] < meas[176] and pred[200] < pred[176]
