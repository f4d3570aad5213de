"""Corrections against a law: when every measurement is k x the prediction, the correction is k."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from kttune.cost.components import Components
from kttune.cost.prefill import layerwise_load_ms, prefill_time_ms
from kttune.validate.compare import PromptMeasurement, compare, predicted_paths
from kttune.validate.logs import LayerwiseRecord
from tests.helpers import cfg, model, profile


def _comp():
    return Components(profile("h200-pcie5-xeon-amx-16c"), model("Kimi-K2-Thinking"), "RAWINT4", 1)


@settings(max_examples=25, deadline=None)
@given(st.floats(0.2, 5.0), st.floats(0.2, 5.0), st.floats(0.2, 5.0))
def test_scaled_measurements_give_their_scale(k_hybrid, k_lw, k_load):
    comp = _comp()
    c = cfg("RAWINT4", chunked_prefill_size=4096, gpu_prefill_token_threshold=2048)
    load = layerwise_load_ms(comp, c)[0]
    meas = []
    for n in (512, 1024, 4096, 8192, 5000):
        paths = set(predicted_paths(comp, c, n))
        k = k_hybrid if paths == {"hybrid"} else k_lw if paths == {"layerwise"} else 7.0  # mixed: not fitted
        recs = tuple(LayerwiseRecord(l, "prepare", k_load * load) for l in range(3)) if "layerwise" in paths else ()
        meas.append(PromptMeasurement(n, (k * prefill_time_ms(comp, c, n),) * 2, recs))
    out = {(x.path, x.part): x for x in compare(comp, c, meas).corrections}
    assert abs(out["hybrid", "prefill"].factor - k_hybrid) < 1e-9 * k_hybrid
    assert abs(out["layerwise", "prefill"].factor - k_lw) < 1e-9 * k_lw
    assert abs(out["layerwise", "load"].factor - k_load) < 1e-9 * k_load
    assert all(x.source == "server" and x.method == "RAWINT4" for x in out.values())


def test_no_layerwise_correction_when_layerwise_is_off():
    comp = _comp()
    c = cfg("RAWINT4", chunked_prefill_size=4096, gpu_prefill_token_threshold=0)
    res = compare(comp, c, [PromptMeasurement(4096, (1.0,))])
    assert [(x.path, x.part) for x in res.corrections] == [("hybrid", "prefill")]
