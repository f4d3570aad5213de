"""Per-path corrections from path-runner points: the fit recovers a known law, each point is judged
by a fit that never saw it, an outlier does not move the others' correction, and the cost model uses
the entries a profile carries."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from kttune.calibration.entries import Calibration


def _points(a=0.3, b=-0.1, noise=0.03, seed=0, path="hybrid", method="BF16"):
    rnd = random.Random(seed)
    pts = []
    for m in (64, 128, 256, 512, 1024, 2048, 4096, 8192):
        moe, other = 0.05 * m + 5.0, 0.01 * m
        true = moe * math.exp(a + b * math.log(m)) * (1 + rnd.uniform(-noise, noise))
        pts.append(
            {
                "method": method,
                "path": path,
                "tokens": m,
                "measured_ms": true + other,
                "predicted_moe_ms": moe,
                "predicted_other_ms": other,
            }
        )
    return pts


def test_fit_recovers_the_law_and_judges_each_point_held_out():
    cal = Calibration.fit(_points())
    e = cal.entry("BF16", "hybrid")
    assert e.a == pytest.approx(0.3, abs=0.05) and e.b == pytest.approx(-0.1, abs=0.01)
    assert e.raw_mape > 0.15  # the raw model is off by 20-60% on these points
    assert e.held_out_mape < 0.05  # each point predicted by the fit on the 7 others
    assert cal.apply("BF16", "layerwise", 10.0, 512) == 10.0  # no entry: unchanged
    assert cal.apply("BF16", "hybrid", 10.0, 512) == pytest.approx(10.0 * e.factor(512))


def test_held_out_error_is_larger_than_in_sample_when_points_disagree():
    pts = _points(noise=0.3, seed=4)
    e = Calibration.fit(pts).entry("BF16", "hybrid")
    in_sample = sum(
        abs(
            p["predicted_other_ms"]
            + Calibration.fit(pts).apply("BF16", "hybrid", p["predicted_moe_ms"], p["tokens"])
            - p["measured_ms"]
        )
        / p["measured_ms"]
        for p in pts
    ) / len(pts)
    assert e.held_out_mape > in_sample


def test_one_outlier_does_not_move_the_correction():
    pts = _points(noise=0.01)
    pts[3] = dict(pts[3], measured_ms=pts[3]["measured_ms"] * 40)
    e = Calibration.fit(pts).entry("BF16", "hybrid")
    assert e.a == pytest.approx(0.3, abs=0.05) and e.b == pytest.approx(-0.1, abs=0.01)


def test_the_cost_model_uses_the_profiles_calibration():
    from kttune.config import LaunchConfig
    from kttune.cost.components import Components
    from kttune.cost.prefill import hybrid_moe_layer, layerwise_moe_layer
    from kttune.hw.registry import load_shipped
    from kttune.calibration.runner import predicted_crossover
    from kttune.runner.result import PathRun
    from kttune.spec.loader import load_model

    prof = load_shipped("h200-pcie5-xeon-amx-16c")
    spec = load_model("kimi-k2-thinking", "RAWINT4")
    cfg = LaunchConfig("RAWINT4", 1, 0, 4096, 1024, 65536, 13)
    raw = Components(prof, spec, "RAWINT4")
    entry = {"method": "RAWINT4", "path": "hybrid", "a": math.log(2.0), "b": 0.0, "points": 5, "held_out_mape": 0.07}
    cal = Components(replace(prof, calibration=(entry,)), spec, "RAWINT4")
    assert hybrid_moe_layer(cal, cfg, 512).total_ms == pytest.approx(2 * hybrid_moe_layer(raw, cfg, 512).total_ms)
    assert layerwise_moe_layer(cal, cfg, 512).total_ms == layerwise_moe_layer(raw, cfg, 512).total_ms
    run = PathRun("k", "RAWINT4", 1, 2, 61, 60, 0, 4096, 1024, 13, 4096, ())
    assert predicted_crossover(cal, run) < predicted_crossover(raw, run)  # hybrid slower: layerwise wins earlier
    assert any("held out" in n for n in cal.notes)


def test_calibration_survives_the_profile_file(tmp_path):
    from kttune.hw.profile import load_profile, save_profile
    from kttune.hw.registry import load_shipped

    entries = Calibration.fit(_points()).to_dicts()
    p = save_profile(replace(load_shipped("h200-pcie5-xeon-amx-16c"), calibration=tuple(entries)), tmp_path / "p.json")
    assert list(load_profile(p).calibration) == entries
