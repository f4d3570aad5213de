"""The host-RAM probe step: real kt-kernel layers in a fresh process, recorded as a `host_ram`
profile curve that round-trips through the profile format."""

from __future__ import annotations

import pytest

from kttune.hw.profile import profile_from_dict, profile_to_dict
from kttune.hw.registry import load_shipped
from kttune.probes.common import NullReporter
from kttune.probes.host_ram import HostRamPoint, host_ram_curve, plan_host_ram, predicted_bytes, run_host_ram_step
from kttune.spec.moe_shape import MoeLayerShape


def point(n: int, reserved: int) -> HostRamPoint:
    return HostRamPoint(
        shape=MoeLayerShape(hidden=1024, inter=512, experts=32, top_k=8, method="BF16"),
        kernel="AMXBF16_MOE",
        max_len=n,
        layers=1,
        threads=1,
        reserved_bytes=reserved,
        resident_bytes=reserved,
        weights_source_bytes=0,
    )


def test_curve_holds_measured_and_predicted_bytes_and_round_trips():
    c = host_ram_curve([point(4096, 700 << 20), point(1024, 250 << 20)])
    assert [p.x for p in c.points] == [1024, 4096]
    assert c.points[0].extra["predicted_bytes"] == predicted_bytes(point(1024, 0))
    from dataclasses import replace

    prof = load_shipped("h200-pcie5-xeon-amx-16c")
    prof = replace(prof, curves=prof.curves + (c,))
    assert profile_from_dict(profile_to_dict(prof)).curves_of("host_ram")[0] == c


@pytest.mark.kt
def test_probe_step_measures_growth_with_max_len():
    from kttune.probes.host_ram import probe_host_ram

    (curve,) = probe_host_ram(["RAWINT4"], MoeLayerShape(hidden=1024, inter=512, experts=32, top_k=8), [256, 2048])
    small, big = curve.points
    assert big.extra["reserved_bytes"] > small.extra["reserved_bytes"]
    for p in curve.points:
        assert abs(p.extra["predicted_bytes"] / p.extra["reserved_bytes"] - 1) <= 0.10


TINY = MoeLayerShape(hidden=256, inter=128, experts=16, top_k=4, name="tiny")


def test_probe_plan_includes_the_step_when_kt_kernel_imports_and_not_when_skipped():
    from kttune.kernels.kt_ext import load_kt_kernel
    from kttune.probes.inventory import collect_inventory, numa_nodes_with_cpus, usable_cores
    from kttune.probes.run import ProbeOptions, plan_probe

    cpu = collect_inventory().cpu
    args = (cpu, usable_cores(cpu), list(numa_nodes_with_cpus(cpu)))
    plan = plan_probe(ProbeOptions(quick=True, threads=(1,), host_ram=True), *args)
    if load_kt_kernel() is None:
        assert plan["host_ram"].steps == 0 and "kt-kernel is not importable" in plan["host_ram"].notes[0]
    else:
        assert plan["host_ram"].steps == len(plan["host_ram"].chunks) == 2 and len(plan["host_ram"].methods) == 1
    assert plan_probe(ProbeOptions(quick=True, threads=(1,), host_ram=False), *args)["host_ram"] is None
    # by default a full probe runs the step and a quick one (which must stay under a minute) does not
    assert plan_probe(ProbeOptions(quick=True, threads=(1,)), *args)["host_ram"] is None
    assert plan_probe(ProbeOptions(quick=False, threads=(1,)), *args)["host_ram"] is not None


def test_plan_shrinks_a_large_model_layer_and_says_so():
    big = MoeLayerShape(hidden=7168, inter=2048, experts=384, top_k=8, name="Kimi-K2 experts")
    plan = plan_host_ram(big, ("BF16", "RAWINT4"), quick=True)
    if not plan.methods:
        pytest.skip("kt-kernel is not importable")
    assert plan.methods == ("RAWINT4",)
    assert 16 <= plan.shape.experts < 384 and (plan.shape.hidden, plan.shape.inter) == (7168, 2048)
    assert any("of 384 experts" in n for n in plan.notes)
    full = plan_host_ram(big, ("BF16", "RAWINT4"), quick=False)
    assert full.methods == ("BF16", "RAWINT4") and plan.shape.experts < full.shape.experts < 384
    assert plan_host_ram(TINY, ("BF16",), quick=False).shape == TINY  # a small layer is built whole


@pytest.mark.kt
def test_step_records_a_curve_whose_reservation_grows_with_max_len():
    rep = NullReporter()
    plan = plan_host_ram(TINY, ("RAWINT4",), quick=False, threads=1, chunks=(64, 512))
    (curve,) = run_host_ram_step(plan, rep)
    assert curve.kind == "host_ram" and curve.x_unit == "tokens"
    assert {k: curve.params[k] for k in ("method", "hidden", "inter", "experts", "top_k", "layers")} == {
        "method": "RAWINT4",
        "hidden": 256,
        "inter": 128,
        "experts": 16,
        "top_k": 4,
        "layers": 1,
    }
    small, big = curve.points
    assert (small.x, big.x) == (64, 512)
    assert big.extra["reserved_bytes"] > small.extra["reserved_bytes"] > 0
    assert big.extra["resident_bytes"] > small.extra["resident_bytes"]
    assert not curve.skipped and not rep.notes


def test_points_that_do_not_fit_in_ram_are_skipped_with_one_line_notes():
    from dataclasses import replace

    plan = plan_host_ram(TINY, ("RAWINT4",), quick=False, chunks=(64, 512))
    if not plan.methods:
        pytest.skip("kt-kernel is not importable")
    rep = NullReporter()
    assert run_host_ram_step(replace(plan, ram_fraction=0.0), rep) == []
    assert len(rep.notes) == 2 and all("skipped: needs about" in n and "\n" not in n for n in rep.notes)
