"""Corrections that must transfer: shrinkage pulls toward no correction, a correction every model
shares is found and transfers to a held-out model, one that hurts a held-out model is not shipped,
and on the path runner's real results the shipped correction makes no held-out model worse."""

from __future__ import annotations

import math
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kttune.calibration.transfer import (
    SHRINKAGES,
    TransferPoint,
    by_model,
    choose_shrinkage,
    fit_terms,
    held_out,
    mape,
    nested_held_out,
    no_group_worse,
    per_method_predictor,
    raw_predictor,
    terms_predictor,
)


def point(
    model: str,
    path: str,
    experts: float,
    copies: float,
    measured: float,
    method: str = "BF16",
    threads: int = 13,
    tokens: int = 1024,
) -> TransferPoint:
    terms = (
        {"fixed_ms": 1.0, "experts": experts, "copies": copies}
        if path == "hybrid"
        else {"fixed_ms": 1.0, "load": experts, "gpu_moe": copies}
    )
    return TransferPoint(model, method, path, tokens, 0, 0, threads, measured, 1.0, terms)


def shared_factor_points(factor: float, models=("a", "b", "c", "d")) -> list[TransferPoint]:
    """Every model's measured time is its raw expert time x `factor` (+ copies + other)."""
    pts = []
    for i, m in enumerate(models):
        for j, e in enumerate((5.0, 20.0, 80.0)):
            e2 = e * (1 + i)
            pts.append(point(m, "hybrid", e2, 1.0 + j, 1.0 + factor * e2 + 1.0 + j, method=f"M{i}"))
    return pts


@settings(max_examples=30, deadline=None)
@given(factor=st.floats(0.5, 2.0), s=st.sampled_from([x for x in SHRINKAGES if not math.isinf(x)]))
def test_shrinkage_pulls_toward_no_correction(factor, s):
    """Ridge laws: more shrinkage never enlarges a lone coefficient and never fits the training
    points better; infinite shrinkage is the raw model."""
    pts = shared_factor_points(factor)
    weak, strong = fit_terms(pts, s, "dominant"), fit_terms(pts, 10 * s + 1.0, "dominant")
    assert abs(strong.deltas["hybrid"]["experts"]) <= abs(weak.deltas["hybrid"]["experts"]) + 1e-12

    def sse(c):
        return sum(((c.predict(p) - p.measured_ms) / p.measured_ms) ** 2 for p in pts)

    assert sse(fit_terms(pts, s)) <= sse(fit_terms(pts, 10 * s + 1.0)) + 1e-12
    none = fit_terms(pts, math.inf)
    assert all(none.predict(p) == p.raw_ms for p in pts)


def test_a_correction_every_model_shares_transfers_to_the_held_out_model():
    pts = shared_factor_points(1.3)
    table = held_out(pts, by_model, terms_predictor(0.0, "dominant"))
    assert all(r["held_out"] < 0.01 < r["raw"] for r in table.values())
    s, _ = choose_shrinkage(pts, by_model, variant="dominant")
    assert not math.isinf(s)


def test_a_correction_that_hurts_a_held_out_model_is_not_shipped():
    """Two models run 30% slow, two 30% fast: fitted on any three, the correction moves the held-out
    model the wrong way; no shrinkage keeps every held-out model at or below raw but none at all."""
    slow = shared_factor_points(1.3, ("a", "b"))
    fast = [p for p in shared_factor_points(0.7, ("c", "d"))]
    pts = slow + fast
    s, tables = choose_shrinkage(pts, by_model, variant="dominant")
    assert math.isinf(s)
    assert not no_group_worse(tables[0.0])


def test_the_held_out_model_never_chooses_its_own_shrinkage():
    pts = shared_factor_points(1.3) + [point("odd", "hybrid", e, 1.0, 1.0 + 0.5 * e + 1.0) for e in (5, 20, 80)]
    nested = nested_held_out(pts, by_model, variant="dominant")
    for (m, _), r in nested.items():
        s, _ = choose_shrinkage([p for p in pts if p.model != m], by_model, variant="dominant")
        assert r["shrinkage"] == (None if math.isinf(s) else s)


def test_the_per_method_calibration_says_nothing_about_an_unseen_method():
    pts = shared_factor_points(1.3)
    table = held_out(pts, by_model, per_method_predictor)  # each model its own method
    raw = held_out(pts, by_model, raw_predictor)
    assert all(table[k]["held_out"] == pytest.approx(raw[k]["held_out"]) for k in table)


# ---- the path runner's results (tests/data/paths-h200.json, the H200 box) ------------------------------


@lru_cache(maxsize=1)
def real_points() -> tuple[TransferPoint, ...]:
    import json
    from dataclasses import replace

    from kttune.cost.components import Components
    from kttune.hw.registry import load_shipped
    from kttune.calibration.runner import transfer_points
    from kttune.runner.result import runs_in_results
    from kttune.spec.loader import load_model
    from tests.helpers import PATHS_H200

    prof = replace(load_shipped("h200-pcie5-xeon-amx-16c"), calibration=())
    pts = []
    for req, runs in runs_in_results(json.loads(PATHS_H200.read_text())):
        c = Components(prof, load_model(req["model"], req.get("method")), runs[0].method, 1)
        pts += [p for r in runs for p in transfer_points(r, c)]
    return tuple(pts)


def test_on_the_runner_results_the_shipped_correction_makes_no_held_out_model_worse():
    pts = list(real_points())
    assert len({p.model for p in pts}) >= 3
    for variant in ("full", "dominant"):
        s, tables = choose_shrinkage(pts, by_model, variant=variant)
        assert no_group_worse(tables[s])
        # the raw prediction is the terms' sum: the correction at infinite shrinkage is exactly raw
        assert mape((p.raw_ms, p.measured_ms) for p in pts) == pytest.approx(
            mape((fit_terms(pts, math.inf, variant).predict(p), p.measured_ms) for p in pts)
        )
