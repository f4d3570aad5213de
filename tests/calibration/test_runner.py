"""The cost model against the path runner's measurements on the H200 box (tests/data/paths-h200.json,
tests/data/README.md). The profile the predictions come from was fitted on micro-benchmarks, never
on these runs; every calibrated figure is leave-one-out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kttune.calibration.runner import measured_crossover
from tests.helpers import PATHS_H200, PATHS_H200_EARLIER

# the latest grid, and the same grid an hour earlier on the same box (docs/path-runner.md#results: two runs)
RESULTS, EARLIER = PATHS_H200, PATHS_H200_EARLIER


def test_measured_crossover_interpolates_in_log_tokens():
    # layerwise - hybrid = +10 at 64 tokens, -10 at 256: the sign changes at sqrt(64 * 256) = 128
    assert measured_crossover([(64, 10.0, 20.0), (256, 30.0, 20.0)]) == 128
    assert measured_crossover([(64, 30.0, 20.0)]) == 64  # layerwise already wins
    assert measured_crossover([(64, 10.0, 20.0), (256, 11.0, 20.0)]) is None


def _runs(path: Path, model: str) -> tuple[list, object]:
    """The model's runs in a results file, and its spec."""
    from kttune.runner.result import PathRun
    from kttune.spec.loader import load_model

    blob = next(b for b in json.loads(path.read_text())["results"] if b.get("request", {}).get("model") == model)
    return [PathRun.from_dict(r) for r in blob["runs"]], load_model(model, blob["request"]["method"])


def _summary(path: Path, model: str, runs: list | None = None) -> dict:
    """`summarize` of the model's runs in a results file (or of `runs` in their place)."""
    from kttune.hw.registry import resolve_profile
    from kttune.runner.api import summarize

    file_runs, spec = _runs(path, model)
    return summarize(file_runs if runs is None else runs, resolve_profile("h200-pcie5-xeon-amx-16c", None), spec)


MODELS = ["qwen3-30b-a3b", "kimi-k2-thinking", "deepseek-v3"]


_KIMI_EARLIER = pytest.mark.xfail(
    strict=True,
    reason=(
        "Kimi-K2's hybrid layer is 26% slower in the model than in that run (raw target 25%): the box's "
        "kt-kernel times drift 15-25% between runs an hour apart (docs/path-runner.md#results)"
    ),
)


@pytest.mark.parametrize(
    "results,model",
    [(RESULTS, m) for m in MODELS]
    + [pytest.param(EARLIER, m, marks=_KIMI_EARLIER if m == "kimi-k2-thinking" else ()) for m in MODELS],
    ids=[f"latest-{m}" for m in MODELS] + [f"earlier-{m}" for m in MODELS],
)
def test_cost_model_against_the_runner(results, model):
    s = _summary(results, model)
    for path in ("hybrid", "layerwise"):
        e = s["errors"][path]
        assert e["points"] >= 10
        assert e["mape_calibrated_held_out"] <= 0.10, (path, e)
        assert e["mape_raw"] <= 0.25, (path, e)


@pytest.mark.parametrize("model", MODELS)
def test_crossover_calibrated_without_the_runs_that_measure_it(model):
    """Calibrated on the switch runs alone (the forced single forwards that measure the crossover held
    out), the model puts every GPU-expert count's crossover within 15% of the measured one."""
    s = _summary(RESULTS, model)
    assert len(s["crossover"]) == 2
    for n, c in s["crossover"].items():
        assert c["calibration_points"] > 0 and c["measured"], (n, c)
        assert c["error_calibrated"] <= 0.15, (n, c)


def test_held_out_crossover_calibrations_never_see_the_runs_that_measure_it():
    """Slowing the forced hybrid forwards of n=0 moves n=0's measured crossover, but neither of its
    calibrated predictions (fitted on the switch runs, or on the other GPU-expert count's runs); the
    other count's prediction calibrated on n=0's runs does move."""
    from dataclasses import replace

    runs, _ = _runs(RESULTS, "kimi-k2-thinking")

    def slowed(r):
        if r.gpu_experts != 0 or r.forced_path != "hybrid":
            return r
        fw = tuple(
            replace(f, layer_ms=tuple(2 * x for x in f.layer_ms), moe_ms=tuple(2 * x for x in f.moe_ms))
            for f in r.forwards
        )
        return replace(r, forwards=fw)

    before = _summary(RESULTS, "kimi-k2-thinking", runs)["crossover"]
    after = _summary(RESULTS, "kimi-k2-thinking", [slowed(r) for r in runs])["crossover"]
    assert after["0"]["measured"] < before["0"]["measured"]
    assert after["0"]["predicted_calibrated"] == before["0"]["predicted_calibrated"]
    assert after["0"]["predicted_calibrated_other_n"] == before["0"]["predicted_calibrated_other_n"]
    assert after["32"]["predicted_calibrated_other_n"] != before["32"]["predicted_calibrated_other_n"]
    assert after["32"]["measured"] == before["32"]["measured"]
