"""The cost model on the shipped measured profile reproduces the measurements it was built from."""

from __future__ import annotations

import pytest

from kttune.cost.components import Components
from kttune.cost.prefill import layerwise_load_ms
from kttune.hw.registry import load_shipped
from tests.helpers import cfg, model

MEASURED = "h200-pcie5-xeon-amx-16c"


def measured_point(kind: str, x: float, **params):
    prof = load_shipped(MEASURED)
    for c in prof.curves_of(kind, **params):
        for p in c.points:
            if p.x == x:
                return p.t_ms
    raise LookupError((kind, x, params))


@pytest.mark.parametrize("method,tokens", [("BF16", 4096), ("AMXINT4", 1024), ("RAWINT4", 256), ("FP8", 64)])
def test_cpu_moe_at_the_models_own_shape(method, tokens):
    # the Qwen3-30B-A3B expert shape was probed on the box at 15 threads: all 128 experts on the CPU
    c = Components(load_shipped(MEASURED), model("qwen3-30b-a3b"), method)
    want = measured_point("cpu_moe", tokens, method=method, threads=15, hidden=2048)
    assert c.cpu_moe_ms(tokens, 128, 15) == pytest.approx(want, rel=0.02)


@pytest.mark.parametrize("name,method,layer_ms", [("kimi-k2-thinking", "RAWINT4", 384.2), ("deepseek-v3", "FP8", 275.4),
                                                  ("qwen3-30b-a3b", "BF16", 39.7)])
def test_layer_load_matches_the_measured_pipeline(name, method, layer_ms):
    # full layers streamed A -> B -> C on the box (issue 4): the layerwise load the model predicts
    c = Components(load_shipped(MEASURED), model(name), method)
    load, *_ = layerwise_load_ms(c, cfg(method, gpu_prefill_token_threshold=1024))
    assert load == pytest.approx(layer_ms, rel=0.05)


def test_the_full_core_pool_is_predicted_slow_as_measured():
    c = Components(load_shipped(MEASURED), model("qwen3-30b-a3b"), "AMXINT4")
    assert c.cpu_thread_options() == [15, 16]
    assert c.cpu_moe_ms(1, 128, 16) > 10 * c.cpu_moe_ms(1, 128, 15)
