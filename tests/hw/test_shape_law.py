"""The expert-shape law's fit (kttune.hw.shape_law), held to a law it must recover and to the measured
runs the cost model's constants (kttune.spec.kt_classes.MATRIX_OUTPUT_FLOPS) are read from."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from kttune.hw import shape_law
from kttune.hw.registry import load_shipped
from kttune.hw.shape_law import (
    constants_measured_elsewhere,
    shape_law_probe_advice,
    ShapeSlope,
    fit_shape_law,
    judge_shape_law,
    measured_shape_law,
    output_flops,
    output_flops_for,
    resampled_output_flops,
    slope,
    slopes_of_curves,
)
from kttune.spec.kt_classes import MATRIX_OUTPUT_FLOPS, MATRIX_OUTPUT_FLOPS_RUNS

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
RUNS = MATRIX_OUTPUT_FLOPS_RUNS
SHAPES = [(2048, 512), (2048, 768), (1024, 2048), (4096, 1408), (2048, 3072), (7168, 2048), (4096, 14336)]


def run_slopes(path: str, key: tuple[str, str]) -> list[ShapeSlope]:
    return shape_law.run_slopes(RESULTS / path, key)


@given(  # kt-kernel, once loaded in the process, flushes subnormals: none drawn
    a=st.floats(1e-11, 1e-9, allow_subnormal=False),
    r=st.floats(0.0, 5000.0, allow_subnormal=False),
    k=st.integers(1, 8),
)
def test_the_fit_recovers_the_ratio_of_a_law_it_is_given(a, r, k):
    slopes = [ShapeSlope(h, i, k, k * (6.0 * h * i + r * (2.0 * i + h)) * a) for h, i in SHAPES]
    assert output_flops(slopes) == pytest.approx(r, rel=1e-6, abs=1e-3)
    # and the flops alone describe it no better than the two terms
    assert fit_shape_law(slopes).rel_rmse <= fit_shape_law(slopes, with_outputs=False).rel_rmse + 1e-12


def test_a_slope_is_the_time_per_token_past_the_fixed_cost():
    assert slope([(512, 3.0 + 512 * 0.01), (1024, 3.0 + 1024 * 0.01), (2048, 3.0 + 2048 * 0.01)]) == pytest.approx(0.01)
    with pytest.raises(ValueError):
        slope([(512, 1.0)])


def test_every_constant_is_the_median_of_its_measured_runs():
    assert set(RUNS) == set(MATRIX_OUTPUT_FLOPS)
    for key, paths in RUNS.items():
        runs = [run_slopes(p, key) for p in paths]
        assert all(len(r) >= 5 for r in runs), key  # every run holds its class's set
        measured = statistics.median(output_flops(r) for r in runs)
        assert MATRIX_OUTPUT_FLOPS[key] == pytest.approx(measured, rel=0.005, abs=1.0), key


def test_on_amx_tiles_the_law_predicts_a_held_out_shape_better_than_flops_alone():
    """Each shape from the others, in every AMX-tile run: the two terms' mean error is under a third of
    the flops alone's in the benchmark's seven-shape runs, under half in the probe's five-shape sets
    (each shape then read from four; docs/cost-model.md#the-expert-shape-law)."""
    for key in (("amx", "AMXBF16_MOE"), ("amx", "AMXInt4_MOE"), ("amx", "AMXInt8_MOE")):
        for path in RUNS[key]:
            rows = run_slopes(path, key)
            share = 1 / 2 if path.endswith(".profile.json") else 1 / 3
            errs = {True: [], False: []}
            for j, held in enumerate(rows):
                for law in errs:
                    fit = fit_shape_law(rows[:j] + rows[j + 1 :], with_outputs=law)
                    pred = fit((held.flops, held.outputs) if law else (held.flops,))
                    errs[law].append(abs(pred / held.ms_per_token - 1))
            assert statistics.mean(errs[True]) < statistics.mean(errs[False]) * share, path


# ---- a profile's own shape sets (probes/cpu_moe_shape.py) --------------------------------------------

PROBE_SHAPES = [(1024, 512), (2048, 512), (1024, 2048), (2048, 1536), (4096, 2048)]


def shape_set(r: float, noise: float = 0.0, rounds: int = 5, backend: str = "kt-kernel:amx", threads: int = 11):
    """`cpu_moe_shape` curves of a kernel that costs its flops plus r flop-equivalents per output
    element (a = 0.1 ns per flop, 2 ms fixed per call), each round's sample drawn with `noise`."""
    import random

    from kttune.hw.profile import Curve, Point

    rng = random.Random(7)
    curves = []
    for h, i in PROBE_SHAPES:
        pts = []
        for n in (1024, 2048, 4096):
            t = 2.0 + n * 4 * (6.0 * h * i + r * (2.0 * i + h)) * 1e-10
            xs = [t * (1 + rng.gauss(0, noise)) for _ in range(rounds)]
            pts.append(Point(n, statistics.median(xs), min(xs), max(xs), rounds, {"samples_ms": xs}))
        params = dict(method="BF16", threads=threads, hidden=h, inter=i, experts=16, top_k=4, kernel="AMXBF16_MOE")
        curves.append(Curve("cpu_moe_shape", "tokens", tuple(pts), params, backend=backend))
    return curves


def test_a_probe_set_recovers_the_law_it_was_drawn_from_and_is_kept():
    fit = measured_shape_law(shape_set(3000.0, noise=0.01), "kt-kernel:amx", "AMXBF16_MOE")
    assert fit.kept and fit.output_flops == pytest.approx(3000.0, rel=0.15)
    assert fit.r_p10 < 3000.0 < fit.r_p90 and fit.held_out_law < fit.held_out_flops / 3


def test_a_set_without_the_term_reads_flops_alone():
    """A kernel whose time is its flops alone, timed with 5% noise: the term is either no better held
    out or not above 0 over resampled rounds; the profile then uses the constant, or flops alone."""
    curves = shape_set(0.0, noise=0.05)
    fit = measured_shape_law(curves, "kt-kernel:amx", "AMXBF16_MOE")
    assert not fit.kept and fit.output_flops == 0.0
    r, source = output_flops_for(curves, "kt-kernel:amx", "AMXBF16_MOE")
    assert r == MATRIX_OUTPUT_FLOPS[("amx", "AMXBF16_MOE")] and "this profile's probe: flops alone" in source
    r, source = output_flops_for(
        [replace(c, backend="kt-kernel:avx2") for c in curves], "kt-kernel:avx2", "AMXBF16_MOE"
    )
    assert r == 0.0 and "flops alone" in source


def test_a_kept_probe_set_replaces_the_constant_for_its_build_and_class_only():
    curves = shape_set(6000.0, noise=0.01)
    r, source = output_flops_for(curves, "kt-kernel:amx", "AMXBF16_MOE")
    assert r == pytest.approx(6000.0, rel=0.15) and source.startswith("measured by this profile's probe")
    # another class, another build, a curve derived to another ISA: the set says nothing of them
    assert output_flops_for(curves, "kt-kernel:amx", "AMXInt8_MOE")[0] == MATRIX_OUTPUT_FLOPS[("amx", "AMXInt8_MOE")]
    assert output_flops_for(curves, "kt-kernel:avx2", "AMXBF16_MOE")[0] == 0.0
    derived = [replace(c, backend="derived for avx2 from kt-kernel:amx") for c in curves]
    assert output_flops_for(derived, "derived for avx2 from kt-kernel:amx", "AMXBF16_MOE")[0] == 0.0


def test_fewer_than_three_shapes_are_not_judged_and_the_largest_thread_set_is_read():
    curves = shape_set(3000.0, noise=0.01)
    assert measured_shape_law(curves[:2], "kt-kernel:amx", "AMXBF16_MOE") is None
    with pytest.raises(ValueError):
        judge_shape_law(slopes_of_curves(curves[:2]))
    # a second set at another thread count with two shapes only: the five-shape set is read
    other = [replace(c, params={**c.params, "threads": 15}) for c in shape_set(0.0)[:2]]
    fit = measured_shape_law(curves + other, "kt-kernel:amx", "AMXBF16_MOE")
    assert fit.shapes == 5 and fit.kept


def test_rounds_resampled_keep_a_round_s_shapes_together():
    """A round slow on every shape alike (the host's drift) moves no slope ratio: r's interval over
    resampled rounds stays narrow although one round in five is 30% slow."""
    curves = shape_set(3000.0)
    slow = []
    for c in curves:
        pts = [
            replace(
                p, extra={"samples_ms": [t * (1.3 if j == 2 else 1.0) for j, t in enumerate(p.extra["samples_ms"])]}
            )
            for p in c.points
        ]
        slow.append(replace(c, points=tuple(pts)))
    lo, hi = resampled_output_flops(slow)
    assert 2900 < lo <= hi < 3100
    assert (
        resampled_output_flops([replace(c, points=tuple(replace(p, extra={}) for p in c.points)) for c in curves])
        is None
    )


def test_a_probe_without_the_law_advises_it_on_a_cpu_the_constants_were_not_measured_on():
    """The H100 box's instances ran two generations under one name; the AMX build's constants were
    measured on Emerald Rapids (docs/probe.md#one-name-two-cpus): a quick probe on Sapphire Rapids says
    `--shape-law` measures r there, on Emerald Rapids or an unknown CPU it says nothing."""
    emr = replace(load_shipped("h200-pcie5-xeon-amx-16c").inventory.cpu, family=6, model_number=207)
    spr = replace(emr, model_number=143)
    assert constants_measured_elsewhere("kt-kernel:amx", emr) is None
    assert shape_law_probe_advice("kt-kernel:amx", emr) is None
    where, here = constants_measured_elsewhere("kt-kernel:amx", spr)
    assert where == "Emerald Rapids" and "Sapphire Rapids" in here
    line = shape_law_probe_advice("kt-kernel:amx", spr)
    assert "kt-kernel amx's constants (r) were measured on Emerald Rapids" in line
    assert "`kttune probe --shape-law`" in line and "#one-name-two-cpus" in line
    # the CPUID numbers unknown (a profile written before the inventory read them), or a build the
    # project has no constants' CPU for: nothing to compare
    assert shape_law_probe_advice("kt-kernel:amx", replace(spr, model_number=None)) is None
    assert shape_law_probe_advice("kt-kernel:avx2", spr) is None
    assert shape_law_probe_advice(None, spr) is None
