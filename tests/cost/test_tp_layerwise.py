"""The layerwise load at TP 2 against the path runner on two H200s (tests/data/tp2-x2: sglang-kt's loop,
rank 0's kt-kernel writing both ranks' shares, a barrier per expert; 28 kt-kernel threads on the box's
32 cores), each predicted from the `kttune probe --model X` taken in the same device call. Six models
of the three streaming methods (BF16, FP8, RAWINT4 with its per-rank repack) whose experts span 6 MB
to 352 MB: the composition must follow what TP changes in each step (the copy over 1/tp of the bytes
per link, a barrier per expert), from the loop measured at TP 1.

Mixtral, Qwen3-Next, DeepSeek-V3 and Kimi-K2 were measured after the composition was written from
the first two models, and held it out."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from kttune.calibration.runner import forward_points
from kttune.cost.components import Components
from kttune.hw.profile import load_profile
from kttune.runner.result import PathRun
from kttune.spec.loader import load_model

DATA = Path(__file__).parents[1] / "data" / "tp2-x2"
MODELS = ("qwen3-30b-a3b", "glm-4.5-air", "mixtral-8x7b", "qwen3-next-80b-a3b", "deepseek-v3", "kimi-k2-thinking")


def _layerwise(model: str, tp: int) -> tuple[dict, dict]:
    """{tokens: measured per-layer ms} and {tokens: predicted} of the TP job's forced layerwise forwards."""
    profile = replace(load_profile(DATA / f"probe-{model}-x2.profile.json"), calibration=())
    runs = [PathRun.from_dict(r) for r in json.loads((DATA / f"{model}-tp{tp}-1.json").read_text())["runs"]]
    runs = [r for r in runs if r.forced_path == "layerwise"]
    c = Components(
        profile, load_model(model, runs[0].method), runs[0].method, tp, pipeline_driver=runs[0].pipeline_driver
    )
    meas, pred = {}, {}
    for r in runs:
        for p in forward_points(r, c):
            meas[p.tokens], pred[p.tokens] = p.measured_ms, p.predicted_ms
    return meas, pred


@pytest.mark.parametrize("model", MODELS)
def test_tp2_layerwise_forwards_within_20_percent(model):
    meas, pred = _layerwise(model, 2)
    assert len(meas) >= 3
    err = statistics.mean(abs(pred[m] - meas[m]) / meas[m] for m in meas)
    assert err <= 0.20, (model, err)


@pytest.mark.parametrize(
    "model,faster",
    [("mixtral-8x7b", True), ("qwen3-next-80b-a3b", False), ("deepseek-v3", True), ("kimi-k2-thinking", True)],
)
def test_tp2_against_tp1_goes_the_measured_way(model, faster):
    """Copy-bound at TP 1 (Mixtral's 352 MB experts, DeepSeek-V3's and Kimi-K2's whole layers of 11
    and 8.5 GB): half the bytes per link makes the load faster. Qwen3-Next streams 448 experts of
    6 MB: a barrier per expert makes it slower. Measured 0.83-0.87x, 0.63-0.66x, 0.64-0.66x and
    1.16-1.32x; the prediction must say which, and by about as much (within 0.1)."""
    m1, p1 = _layerwise(model, 1)
    m2, p2 = _layerwise(model, 2)
    for m in sorted(set(m1) & set(m2)):
        measured, predicted = m2[m] / m1[m], p2[m] / p1[m]
        assert (measured < 1) == faster and (predicted < 1) == faster, (model, m, measured, predicted)
        assert abs(predicted - measured) <= 0.1, (model, m, measured, predicted)


def test_all_links_copy_counts_each_gpus_bytes_once():
    """The all-GPU copy curve's x is bytes per GPU: at TP 2 a rank's half of an expert costs no more
    than the whole expert over one link, and no less than its half over one link alone."""
    profile = load_profile(DATA / "probe-glm-4.5-air-x2.profile.json")
    spec = load_model("glm-4.5-air", "BF16")
    c2 = Components(profile, spec, "BF16", 2)
    half = c2.gpu_bytes_per_expert
    assert c2.h2d_ms(half) <= c2.h2d_all_ranks_ms(half) < c2.h2d_ms(2 * half)


def test_the_hosts_aggregate_copy_rate_is_shared_by_the_ranks():
    """Measured with two GPUs copying at once; four ranks share the same host rate: a large shard
    (bandwidth-bound) takes twice as long each at TP 4 as at TP 2."""
    profile = load_profile(DATA / "probe-glm-4.5-air-x2.profile.json")
    spec = load_model("glm-4.5-air", "BF16")
    gib = 2.0**30
    two, four = Components(profile, spec, "BF16", 2), Components(profile, spec, "BF16", 4)
    assert four.h2d_all_ranks_ms(gib) / two.h2d_all_ranks_ms(gib) == pytest.approx(2.0, rel=0.02)


def test_kttune_calibrate_reads_a_tp_run_at_its_tp_size():
    """A TP 2 results file (benchmarks/bench_tp_paths.py writes `kttune paths`'s form) is predicted at
    TP 2 by what `kttune calibrate` fits on: its layerwise forwards are the TP 2 model's, not TP 1's."""
    from kttune.runner.api import calibration_points

    profile = load_profile(DATA / "probe-deepseek-v3-x2.profile.json")
    doc = json.loads((DATA / "deepseek-v3-tp2-1.json").read_text())
    got = {(p["path"], p["tokens"]): p["predicted_ms"] for p in calibration_points(doc, profile)}
    _, want = _layerwise("deepseek-v3", 2)
    _, tp1 = _layerwise("deepseek-v3", 1)
    for m, v in want.items():
        assert got[("layerwise", m)] == pytest.approx(v) and abs(v - tp1[m]) > 0.2 * tp1[m]
