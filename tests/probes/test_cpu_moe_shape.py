"""The expert-shape law's probe (probes/cpu_moe_shape.py) on this machine's real kt-kernel: one curve
per shape with each round's sample, the RAM plan that drops the largest layers first, and the record
that runs it (in a full probe without a model, or when asked)."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from kttune.hw.profile import load_profile, save_profile
from kttune.hw.registry import load_shipped
from kttune.hw.shape_law import measured_shape_law
from kttune.probes import cpu_moe_shape as cs
from kttune.probes.common import NullReporter
from kttune.probes.inventory import collect_cpu
from kttune.probes.run import ProbeOptions, shape_law_runs

TINY = ((256, 128), (512, 128), (256, 512))


@pytest.mark.kt
def test_each_shape_is_one_curve_of_the_rounds_medians(kt, tmp_path):
    cpu = collect_cpu()
    opts = cs.ShapeLawOptions(threads=1, methods=("BF16",), shapes=TINY, tokens=(64, 256), rounds=3)
    rep = NullReporter()
    plan = cs.plan_shape_law(opts, cpu)
    assert plan.shapes == {"BF16": TINY} and plan.steps == len(TINY) + 3
    curves = cs.probe_shape_law(plan, cpu, rep)
    assert [(c.params["hidden"], c.params["inter"]) for c in curves] == list(TINY)
    for c in curves:
        assert c.kind == "cpu_moe_shape" and c.backend == kt.backend and c.params["kernel"]
        assert c.params["rounds"] == 3 and c.params["threads"] == 1 and c.params["top_k"] == 4
        for p in c.points:
            s = p.extra["samples_ms"]
            assert len(s) == 3 and p.t_ms == statistics.median(s) and p.t_ms_p10 <= p.t_ms <= p.t_ms_p90
    # judged, or said why not (on a busy host a tiny shape's time may not grow with the tokens), once
    said = [n for n in rep.notes if n.startswith("expert-shape law BF16")]
    assert said == [cs.shape_law_verdict("BF16", curves)]
    judged = measured_shape_law(curves, kt.backend, curves[0].params["kernel"]) is not None
    assert ("not judged" in said[0]) is not judged
    # a profile keeps them through its file
    save_profile(replace(load_shipped("h200-pcie5-xeon-amx-16c"), curves=tuple(curves)), tmp_path / "p.json")
    back = load_profile(tmp_path / "p.json").curves_of("cpu_moe_shape")
    assert [c.points[0].extra["samples_ms"] for c in back] == [c.points[0].extra["samples_ms"] for c in curves]


@pytest.mark.kt
def test_the_plan_drops_the_largest_layers_first_and_a_method_under_three_shapes(kt):
    cpu = collect_cpu()
    opts = cs.ShapeLawOptions(threads=1, methods=("bf16",))
    sizes = {s: cs._layer_bytes("BF16", *s, opts) for s in cs.SHAPES}
    all_but_largest = sum(sizes.values()) - max(sizes.values())
    plan = cs.plan_shape_law(opts, cpu, ram_bytes=int(all_but_largest / opts.ram_fraction) + 1)
    assert plan.shapes["BF16"] == tuple(s for s in cs.SHAPES if s != max(sizes, key=sizes.get))
    assert any("4096x2048 left out" in n for n in plan.notes)
    plan = cs.plan_shape_law(opts, cpu, ram_bytes=int(min(sizes.values()) * 2.5 / opts.ram_fraction))
    assert "BF16" not in plan.shapes and any("fewer than 3 shapes" in n for n in plan.notes)


def _shape_set(times: dict[tuple[int, int], tuple[float, float]]) -> list:
    from kttune.hw.profile import Curve, Point

    params = dict(method="BF16", threads=11, experts=16, top_k=4, kernel="AMXBF16_MOE", rounds=5)
    return [
        Curve(
            "cpu_moe_shape",
            "tokens",
            (Point(1024, t1), Point(4096, t4)),
            {**params, "hidden": h, "inter": i},
            backend="kt-kernel:amx",
        )
        for (h, i), (t1, t4) in times.items()
    ]


def test_the_verdict_says_why_a_set_was_not_judged():
    """Three shapes whose time grows with the tokens are judged; where one of three did not grow (a
    busy host), the law is not judged and the line says so and what to do."""
    grows = {(1024, 512): (1.0, 3.5), (2048, 1024): (3.2, 12.0), (4096, 2048): (11.0, 43.0)}
    judged = cs.shape_law_verdict("BF16", _shape_set(grows))
    assert judged.startswith("expert-shape law BF16 (AMXBF16_MOE): ") and "not judged" not in judged
    flat = {**grows, (2048, 1024): (3.2, 3.1)}
    line = cs.shape_law_verdict("BF16", _shape_set(flat))
    assert "not judged, fewer than 3 shapes took longer at more tokens" in line and "--shape-law" in line


def test_a_full_probe_without_a_model_measures_it_unless_told():
    assert shape_law_runs(ProbeOptions())
    assert not shape_law_runs(ProbeOptions(quick=True))
    assert not shape_law_runs(ProbeOptions(model=object()))  # the model's own shape is measured
    assert shape_law_runs(ProbeOptions(quick=True, shape_law=True))
    assert not shape_law_runs(ProbeOptions(shape_law=False))


def test_a_new_set_replaces_the_cached_one_whole():
    """A re-probe that measures four of five shapes (the fifth left out for RAM) drops the cached set's
    fifth too: its rounds were another run's. Other methods' sets and other kinds stay."""
    from kttune.hw.profile import Curve, Point
    from kttune.probes.run import curves_not_remeasured

    def curve(kind, method, h, threads=11):
        params = dict(method=method, threads=threads, hidden=h, inter=512, experts=16, top_k=4, kernel=f"K{method}")
        return Curve(kind, "tokens", (Point(1024, 1.0), Point(2048, 2.0)), params, backend="kt-kernel:amx")

    old = [curve("cpu_moe_shape", "BF16", h) for h in (1024, 2048, 3072, 4096, 5120)]
    old += [curve("cpu_moe_shape", "FP8", 1024), curve("cpu_moe_shape", "BF16", 1024, threads=13)]
    old += [curve("cpu_moe", "BF16", 1024)]
    new = [curve("cpu_moe_shape", "BF16", h) for h in (1024, 2048, 3072, 4096)]
    kept = curves_not_remeasured(old, new)
    assert kept == old[5:]
