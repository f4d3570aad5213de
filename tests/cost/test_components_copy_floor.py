"""The layerwise load read off a fit is no faster than its copies (kttune.cost.components,
`Components._copy_floor_ms`; docs/cost-model.md#the-copy-floor).

H100 instance am's late quick probe (2026-12-07) timed its narrow BF16 layer at 110 ms where the
instance's other probe and every other instance took 29-39 ms. The step fit over its two BF16 layers
then charged the time to the steps and none to the bytes, and read Mixtral-8x7B's layer (six 352 MB
experts streamed) at 2 ms: faster than the 2.1 GB could cross the link at any rate the instance's
host-to-device curve measured. The reference here is that curve's raw points, not the fit the floor
reads."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kttune.calibration.runner import launch_config
from kttune.cost.components import Components
from kttune.cost.prefill import layerwise_load_ms
from kttune.hw.profile import load_profile
from kttune.hw.registry import load_shipped, shipped_names
from kttune.runner.result import runs_in_results
from kttune.spec.loader import load_model

H100 = Path(__file__).parents[2] / "benchmarks/results/2026-12-07-h100-pcie5-xeon-amx-16c"
DISTURBED = H100 / "quick-transfer-h100am-late.profile.json"


def _fastest_link_bytes_per_ms(profile) -> float:
    """The fastest pinned host-to-device rate any of the profile's copies reached (bytes per ms)."""
    return max(pt.x / pt.t_ms for c in profile.curves_of("h2d") if c.params.get("pinned") for pt in c.points)


def test_a_disturbed_fit_does_not_read_a_layer_faster_than_its_bytes_cross_the_link():
    prof = replace(load_profile(DISTURBED), calibration=())
    spec = load_model("mixtral-8x7b", "BF16")
    c = Components(prof, spec, "BF16", 1)
    assert c._pipeline_step_fits and not c._pipeline_own[11]  # read off the fit: Mixtral's layer was not streamed
    streamed = 6
    fitted = c._pipeline_step_fits[11]((1.0, streamed, streamed * c.cpu_bytes_per_expert))
    link_ms = streamed * c.gpu_bytes_per_expert / _fastest_link_bytes_per_ms(prof)
    assert fitted < 0.25 * link_ms  # what the fit alone promised
    assert c.pipeline_layer_ms(streamed, 11) >= link_ms


def test_the_floor_moves_the_disturbed_probes_reading_towards_the_runners():
    """Held out: the instance's own runner sweep of Mixtral-8x7B (layerwise forwards, measured MoE
    part), against the load read from the disturbed probe. Floored, it stays fast (the narrow layer's
    step cost still stands in for stage A's write) but no longer reads a 2.1 GB layer in 2 ms."""
    prof = replace(load_profile(DISTURBED), calibration=())
    doc = json.loads((H100 / "quick-transfer-crossover-mixtral-8x7b-h100am.json").read_text())
    errs = []
    for req, runs in runs_in_results(doc):
        spec = load_model(req["model"], req.get("method"))
        c = Components(prof, spec, runs[0].method, 1, pipeline_driver=runs[0].pipeline_driver)
        for r in runs:
            load, *_ = layerwise_load_ms(c, launch_config(r))
            for f in r.forwards:
                if f.path == "layerwise":
                    errs.append(load / f.mean_moe_ms - 1)
    assert len(errs) >= 4
    assert all(-0.5 < e < 0 for e in errs), errs


@pytest.mark.parametrize("name", shipped_names())
@pytest.mark.parametrize(
    ("model", "method"), [("qwen3-next-80b-a3b", "BF16"), ("mixtral-8x7b", "BF16"), ("deepseek-v3", "FP8")]
)
def test_no_shipped_profile_reads_a_layer_below_its_copies(name, model, method):
    """A law over every shipped profile: whatever the profile streamed, the layer's load at TP 1 is at
    least its experts' copies at the fastest rate the profile's link reached."""
    prof = replace(load_shipped(name), calibration=())
    if not prof.curves_of("h2d") or not prof.curves_of("pipeline"):
        pytest.skip(f"{name}: no host-to-device or pipeline curves")
    spec = load_model(model, method)
    c = Components(prof, spec, method, 1)
    link = _fastest_link_bytes_per_ms(prof)
    for streamed in (2, 32, spec.num_experts - 8):
        got = c.pipeline_layer_ms(streamed, 11)
        if got is None:
            continue
        assert got >= streamed * c.gpu_bytes_per_expert / link * 0.999, (streamed, got)
