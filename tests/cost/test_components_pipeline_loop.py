"""The layerwise load of a layer the probe did not stream, read from another shape's pipeline curve
(kttune.cost.components.Components.pipeline_layer_ms), in the configuration a server runs: sglang-kt
0.7.2's own loop (SGLANG_KT_PIPELINE).

Held out: the pipeline probes of seven models on one H200 instance (2026-12-03, GPU-5697184c; each
probe streamed its model's whole layer in every configuration). Each layer is predicted from the
representative shape of its method that a probe without a model streams (DeepSeek-V3 for FP8,
Qwen3-30B-A3B for BF16) and compared with that layer's own loop. A curve in the loop carries by bytes
(5-11%); the stream configuration the quick probe timed alone until 2026-12-05 does not (10-28%):
grouping two experts a step helps small experts and hurts large ones (docs/probe.md#the-pipeline)."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from kttune.cost.components import FASTEST_PIPELINE, SGLANG_KT_PIPELINE, Components
from kttune.runner.pipeline_configs import in_config
from kttune.hw.profile import HardwareProfile, load_profile
from kttune.spec.loader import load_model

ONE_INSTANCE = Path(__file__).resolve().parents[2] / "benchmarks/results/2026-12-03-h200-pcie5-xeon-amx-16c"
QUICK_BEFORE = "slots=2,group=2,driver=stream"  # the one configuration the quick probe timed before
THREADS = 11


def probe(name: str) -> HardwareProfile:
    return replace(load_profile(ONE_INSTANCE / f"probe-{name}-one-instance.profile.json"), calibration=())


def full_point(p: HardwareProfile):
    (c,) = [c for c in p.curves if c.kind == "pipeline" and c.params.get("threads") == THREADS]
    return c.points[-1]


TARGETS = [
    ("deepseek-v3", "minimax-m2.1", "FP8"),
    ("deepseek-v3", "qwen3-235b-a22b-fp8", "FP8"),
    ("deepseek-v3", "glm-4.7", "FP8_PERCHANNEL"),  # its twin's curve (PIPELINE_TWIN)
    ("qwen3-30b-a3b", "glm-4.5-air", "BF16"),
]


def _errors(profile_of) -> list[float]:
    out = []
    for rep, name, method in TARGETS:
        own = full_point(probe(name))
        measured = own.extra["configs"][SGLANG_KT_PIPELINE]["layer_ms"]
        c = Components(profile_of(probe(rep)), load_model(name, method), method, 1)
        out.append(c.pipeline_layer_ms(own.extra["experts_streamed"], THREADS) / measured - 1)
    return out


def test_a_layer_the_probe_did_not_stream_is_read_from_the_loops_curve():
    loop = _errors(lambda p: in_config(p, SGLANG_KT_PIPELINE, keep_configs=True))
    before = _errors(lambda p: in_config(p, QUICK_BEFORE, keep_configs=False))
    assert max(abs(e) for e in loop) <= 0.12
    assert statistics.mean(abs(e) for e in loop) < 0.6 * statistics.mean(abs(e) for e in before)
    # the stream configuration alone put every FP8 layer 20-28% slow
    assert min(before[:3]) > 0.15


@pytest.mark.parametrize("rep", ["deepseek-v3", "qwen3-30b-a3b", "kimi-k2-thinking"])
def test_the_load_does_not_depend_on_which_configuration_the_curve_holds(rep):
    """The same measurements with the curve in the fastest configuration (as probed before
    2026-12-05) or in sglang-kt's loop (since): a server's load, the fastest's and each driver's
    best are the same numbers."""
    spec = load_model(rep)
    method = spec.default_method.upper()
    n = full_point(probe(rep)).extra["experts_streamed"]
    fastest = probe(rep)
    loop = in_config(fastest, SGLANG_KT_PIPELINE, keep_configs=True)
    for driver in (None, FASTEST_PIPELINE, "stream", "host"):
        a, b = (Components(p, spec, method, 1, pipeline_driver=driver) for p in (fastest, loop))
        assert b.pipeline_layer_ms(n, THREADS) == pytest.approx(a.pipeline_layer_ms(n, THREADS), rel=1e-3), driver
