"""The curve-kind table (kttune/hw/curve_kinds.py) is what the profile reader, the cost model's fits
and derive read: shipped curves hold to it, the cost model fits each kind by its row's features,
and the typed views read what the probes write."""

from __future__ import annotations

import pytest

from kttune.cost.components import Components, fit_curves
from kttune.hw.curve_kinds import CURVE_KINDS, DERIVE_RULES, KINDS, MoeCurveShape, check_curve, curve_shape
from kttune.hw.registry import load_shipped, shipped_names
from kttune.spec.loader import load_model


@pytest.mark.parametrize("name", shipped_names())
def test_every_shipped_curve_holds_to_its_row(name):
    for c in load_shipped(name).curves:
        check_curve(c.kind, c.x_unit, c.params)
        row = KINDS[c.kind]
        assert (c.shape is None) == (row.shape is None)
        if row.fit is not None:
            assert len(row.fit.row(c, c.points[0].x)) == len(row.fit.names)


def test_the_cost_model_fits_each_kind_by_its_rows_features():
    p = load_shipped("h200-pcie5-xeon-amx-16c")
    comps = Components(p, load_model("qwen3-30b-a3b"), "BF16")
    report = comps.fit_report(comps.cpu_thread_options()[-1])
    for part, kind in (
        ("cpu_moe", "cpu_moe"),
        ("gpu_moe", "gpu_moe"),
        ("attention", "attention"),
        ("gemm", "gpu_gemm"),
        ("h2d", "h2d"),
        ("stage_a", "stage_a_write"),
    ):
        assert tuple(report[part]["features"]) == KINDS[kind].fit.names
    assert fit_curves(p.curves_of("gpu_gemm")).names == KINDS["gpu_gemm"].fit.names


def test_the_moe_view_reads_what_the_cpu_probe_writes():
    params = {
        "method": "BF16",
        "threads": 3,
        "threadpools": 1,
        "hidden": 2048,
        "inter": 768,
        "experts": 128,
        "top_k": 8,
        "cpu_experts": 120,
        "kernel": "AMXBF16_MOE",
    }
    s = curve_shape("cpu_moe", params)
    assert (
        s == MoeCurveShape(hidden=2048, inter=768, experts=128, top_k=8, method="BF16", cpu_experts=120)
        and s.routed_experts == 120
    )
    assert curve_shape("gpu_moe", {k: v for k, v in params.items() if k != "cpu_experts"}).routed_experts == 128
    assert s.params_per_expert == 3 * 2048 * 768


def test_rows_are_complete():
    assert set(CURVE_KINDS) == set(KINDS) and all(k == row.name for k, row in KINDS.items())
    assert all(row.derive in DERIVE_RULES for row in KINDS.values())
    # every kind the cost model times has a fit; host_ram holds bytes, not a time to predict, and the
    # cpu_moe_shape sets are read as a ratio (kttune.hw.shape_law), not fitted as times
    assert sorted(k for k, row in KINDS.items() if row.fit is None) == ["cpu_moe_shape", "host_ram"]


@pytest.mark.parametrize(
    "kind, x_unit, params, says",
    [
        ("warp_drive", "bytes", {}, "unknown curve kind"),
        ("gpu_gemm", "bytes", {"hidden": 8, "out": 8}, "x is in tokens"),
        ("gpu_gemm", "tokens", {"hidden": 8}, "lack 'out'"),
        ("attention", "context", {"attention": "gqa", "heads": 0, "head_dim": 8, "v_head_dim": 8}, "heads = 0"),
        ("stage_a_write", "bytes", {"method": 4}, "method = 4 is not a string"),
    ],
)
def test_a_curve_off_its_row_is_refused(kind, x_unit, params, says):
    with pytest.raises(ValueError, match=says):
        check_curve(kind, x_unit, params)
