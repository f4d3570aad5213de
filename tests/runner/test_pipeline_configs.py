"""`kttune.runner.pipeline_configs.in_config` on a quick probe that timed sglang-kt's loop and the stream
configuration (H100 instance h100f, 2026-12-05)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kttune.cost.components import SGLANG_KT_PIPELINE
from kttune.runner.pipeline_configs import in_config
from kttune.hw.profile import load_profile

QUICK = (
    Path(__file__).resolve().parents[2]
    / "benchmarks/results/2026-12-05-h100-pcie5-xeon-amx-16c/quick-transfer-h100f.profile.json"
)
STREAM = "slots=2,group=2,driver=stream"


def _pipelines(p):
    return [c for c in p.curves if c.kind == "pipeline"]


def test_the_curves_move_to_the_configurations_full_layer_and_keep_their_slope():
    probed = load_profile(QUICK)
    moved = in_config(probed, STREAM)
    assert len(_pipelines(moved)) == len(_pipelines(probed)) == 6
    for a, b in zip(_pipelines(probed), _pipelines(moved)):
        full = a.points[-1].extra["configs"]
        assert b.points[-1].t_ms == pytest.approx(full[STREAM]["layer_ms"], rel=1e-3)
        k = b.points[-1].t_ms / a.points[-1].t_ms
        for p, q in zip(a.points, b.points):
            assert q.x == p.x and q.t_ms == pytest.approx(k * p.t_ms) and q.t_ms_p90 == pytest.approx(k * p.t_ms_p90)
            assert (q.extra["slots"], q.extra["group"], q.extra["driver"]) == (2, 2, "stream")
        assert b.points[-1].extra["configs"] == full
    # the other curves are untouched; the loop the probe timed is the identity
    assert [c for c in moved.curves if c.kind != "pipeline"] == [c for c in probed.curves if c.kind != "pipeline"]
    same = in_config(probed, SGLANG_KT_PIPELINE)
    for a, b in zip(_pipelines(probed), _pipelines(same)):
        assert [q.t_ms for q in b.points] == pytest.approx([p.t_ms for p in a.points], rel=1e-3)


def test_a_probe_that_timed_one_configuration_forgets_the_others():
    alone = in_config(load_profile(QUICK), STREAM, keep_configs=False)
    assert all("configs" not in p.extra for c in _pipelines(alone) for p in c.points)


def test_a_configuration_the_probe_did_not_time_is_refused():
    with pytest.raises(KeyError):
        in_config(load_profile(QUICK), "slots=3,group=1,post_batch=4,driver=stream")
