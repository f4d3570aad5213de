"""Corrections against a law: when the MoE part of every measurement is k x the predicted MoE time,
the correction is k."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from kttune.cost.components import Components
from kttune.cost.prefill import layerwise_load_ms, layerwise_moe_layer, prefill_forwards
from kttune.calibration.entries import entry_factor
from kttune.calibration.server import PromptMeasurement, compare, predicted_paths
from kttune.validate.logs import LayerwiseRecord
from tests.helpers import cfg, model, profile

CHUNK, THRESHOLD = 4096, 2048


def _comp():
    return Components(profile("h200-pcie5-xeon-amx-16c"), model("Kimi-K2-Thinking"), "RAWINT4", 1)


def _ttft(comp, c, n, k_moe):
    """A TTFT whose MoE part is k_moe x the prediction and whose other parts are as predicted."""
    fw = prefill_forwards(comp, c, n)
    return sum(f.total_ms - f.moe_ms for f in fw) + k_moe * sum(f.moe_ms for f in fw)


@settings(max_examples=25, deadline=None)
@given(st.floats(0.3, 5.0), st.floats(0.3, 5.0), st.floats(0.3, 5.0), st.floats(0.3, 5.0))
def test_scaled_measurements_give_their_scale(k_hybrid, k_lw_ttft, k_load, k_compute):
    comp = _comp()
    c = cfg("RAWINT4", chunked_prefill_size=CHUNK, gpu_prefill_token_threshold=THRESHOLD)
    load = layerwise_load_ms(comp, c)[0]
    gpu = layerwise_moe_layer(comp, c, CHUNK).gpu_ms
    meas = []
    for n in (512, 1024, 4096, 8192, 5000):
        paths = set(predicted_paths(comp, c, n))
        k = k_hybrid if paths == {"hybrid"} else k_lw_ttft if paths == {"layerwise"} else 7.0  # mixed: not fitted
        recs = ()
        if "layerwise" in paths:
            recs = tuple(
                r
                for layer in range(3)
                for r in (
                    LayerwiseRecord(layer, "prepare", k_load * load),
                    LayerwiseRecord(layer, "compute", k_compute * gpu),
                )
            )
        meas.append(PromptMeasurement(n, (_ttft(comp, c, n, k),) * 2, recs))
    out = {e["path"]: e for e in compare(comp, c, meas).corrections}
    assert abs(entry_factor(out["hybrid"]) / k_hybrid - 1) < 1e-9
    assert abs(entry_factor(out["layerwise:load"]) / k_load - 1) < 1e-9
    assert abs(entry_factor(out["layerwise:compute"]) / k_compute - 1) < 1e-9
    # the layerwise MoE factor comes from KT's per-layer lines: (k_load load + k_compute gpu) / (load + gpu)
    want = (k_load * load + k_compute * gpu) / (load + gpu)
    assert abs(entry_factor(out["layerwise"]) / want - 1) < 1e-9
    assert all(e["source"] == "server" and e["method"] == "RAWINT4" and e["b"] == 0.0 for e in out.values())


def test_layerwise_from_ttft_when_the_log_has_no_kt_lines():
    comp = _comp()
    c = cfg("RAWINT4", chunked_prefill_size=CHUNK, gpu_prefill_token_threshold=THRESHOLD)
    res = compare(comp, c, [PromptMeasurement(8192, (_ttft(comp, c, 8192, 1.7),))])
    (e,) = res.corrections
    assert e["path"] == "layerwise" and abs(entry_factor(e) - 1.7) < 1e-9


def test_no_layerwise_correction_when_layerwise_is_off():
    comp = _comp()
    c = cfg("RAWINT4", chunked_prefill_size=CHUNK, gpu_prefill_token_threshold=0)
    res = compare(comp, c, [PromptMeasurement(4096, (_ttft(comp, c, 4096, 2.0),))])
    assert [e["path"] for e in res.corrections] == ["hybrid"]
