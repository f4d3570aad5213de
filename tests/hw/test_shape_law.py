"""The expert-shape law's fit (kttune.hw.shape_law), held to a law it must recover and to the measured
runs the cost model's constants (kttune.spec.kt_classes.MATRIX_OUTPUT_FLOPS) are read from."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from kttune.hw.shape_law import ShapeSlope, fit_shape_law, output_flops, slope, slopes_of
from kttune.spec.kt_classes import MATRIX_OUTPUT_FLOPS

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
H200, EPYC = "2026-12-04-h200-pcie5-xeon-amx-16c", "2026-12-04-epyc-avx512-2c"
# each constant's runs (`benchmarks/bench_cpu_moe_shapes.py --interleaved`); the constant is their median
RUNS = {
    ("amx", "AMXBF16_MOE"): [
        f"{H200}/cpu-moe-shapes-interleaved.json",
        f"{H200}/cpu-moe-shapes-interleaved-bf16-11t.json",
        f"{H200}/cpu-moe-shapes-interleaved-bf16-15t.json",
        f"{H200}/cpu-moe-shapes-interleaved-bf16-6t.json",
    ],
    ("amx", "AMXInt4_MOE"): [f"{H200}/cpu-moe-shapes-interleaved-amxint4-11t.json"],
    ("amx", "AMXInt8_MOE"): [f"{H200}/cpu-moe-shapes-interleaved-amxint8-11t.json"],
    ("amx", "AMXFP8_MOE"): [f"{H200}/cpu-moe-shapes-interleaved-fp8-11t.json"],
    ("amx", "AMXFP8PerChannel_MOE"): [f"{H200}/cpu-moe-shapes-interleaved-fp8-perchannel-11t.json"],
    ("amx", "AMXInt4_KGroup_MOE"): [f"{H200}/cpu-moe-shapes-interleaved-rawint4-11t.json"],
    ("avx512_bf16", "AMXBF16_MOE"): [f"{EPYC}/cpu-moe-shapes-interleaved-bf16-1t.json"],
    ("avx512_bf16", "AMXInt8_MOE"): [f"{EPYC}/cpu-moe-shapes-interleaved-amxint8-1t.json"],
}
SHAPES = [(2048, 512), (2048, 768), (1024, 2048), (4096, 1408), (2048, 3072), (7168, 2048), (4096, 14336)]


def run_slopes(path: str) -> list[ShapeSlope]:
    return slopes_of(json.loads((RESULTS / path).read_text()))


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
        measured = statistics.median(output_flops(run_slopes(p)) for p in paths)
        assert MATRIX_OUTPUT_FLOPS[key] == pytest.approx(measured, rel=0.005, abs=1.0), key


def test_on_amx_tiles_the_law_predicts_a_held_out_shape_better_than_flops_alone():
    """Each shape from the other six, in every AMX-tile run: the two terms' mean error is under a third
    of the flops alone's (docs/cost-model.md#the-expert-shape-law)."""
    for key in (("amx", "AMXBF16_MOE"), ("amx", "AMXInt4_MOE"), ("amx", "AMXInt8_MOE")):
        for path in RUNS[key]:
            rows = run_slopes(path)
            errs = {True: [], False: []}
            for j, held in enumerate(rows):
                for law in errs:
                    fit = fit_shape_law(rows[:j] + rows[j + 1 :], with_outputs=law)
                    pred = fit((held.flops, held.outputs) if law else (held.flops,))
                    errs[law].append(abs(pred / held.ms_per_token - 1))
            assert statistics.mean(errs[True]) < statistics.mean(errs[False]) / 3, path
