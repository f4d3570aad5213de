"""The cost model against the path runner's measurements on the H200 box
(benchmarks/results/paths-h200-pcie5-xeon-amx-16c.json). The profile the predictions come from was
fitted on micro-benchmarks, never on these runs; every calibrated figure is leave-one-out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kttune.probes.paths.compare import measured_crossover

RESULTS = Path(__file__).parents[3] / "benchmarks" / "results" / "paths-h200-pcie5-xeon-amx-16c.json"


def test_measured_crossover_interpolates_in_log_tokens():
    # layerwise - hybrid = +10 at 64 tokens, -10 at 256: the sign changes at sqrt(64 * 256) = 128
    assert measured_crossover([(64, 10.0, 20.0), (256, 30.0, 20.0)]) == 128
    assert measured_crossover([(64, 30.0, 20.0)]) == 64  # layerwise already wins
    assert measured_crossover([(64, 10.0, 20.0), (256, 11.0, 20.0)]) is None


@pytest.fixture(scope="module")
def results():
    return json.loads(RESULTS.read_text())["results"]


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "kimi-k2-thinking", "deepseek-v3"])
def test_cost_model_against_the_runner(results, model):
    from kttune.hw.registry import resolve_profile
    from kttune.probes.paths.api import summarize
    from kttune.probes.paths.result import PathRun
    from kttune.spec.loader import load_model

    blob = next(b for b in results if b.get("request", {}).get("model") == model)
    runs = [PathRun.from_dict(r) for r in blob["runs"]]
    s = summarize(runs, resolve_profile("h200-pcie5-xeon-amx-16c", None), load_model(model, blob["request"]["method"]))
    for path in ("hybrid", "layerwise"):
        e = s["errors"][path]
        assert e["points"] >= 10
        assert e["mape_raw"] <= 0.25, (path, e)
        assert e["mape_calibrated_held_out"] <= 0.15, (path, e)
    # the crossover calibrated on the switch runs alone (the forced runs that measure it held out)
    errs = [c["error_calibrated"] for c in s["crossover"].values()]
    assert min(errs) <= 0.15, s["crossover"]
