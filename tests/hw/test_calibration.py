from __future__ import annotations

import pytest

from kttune.hw.calibration import Calibration, calibration_factor, merge_calibrations, with_calibrations
from kttune.hw.profile import load_profile, save_profile
from tests.helpers import profile


def test_profile_round_trip_keeps_calibrations(tmp_path):
    p = with_calibrations(profile("h200-pcie5-xeon-amx-16c"),
                          [Calibration("layerwise", "RAWINT4", 1.12, "server", part="load", n=24, model="Kimi-K2-Thinking",
                                       detail={"config": {"chunked_prefill_size": 8192}})])
    back = load_profile(save_profile(p, tmp_path / "p.json"))
    assert back.calibrations == p.calibrations
    assert calibration_factor(back.calibrations, "layerwise", "RAWINT4", "load", "Kimi-K2-Thinking") == 1.12
    assert calibration_factor(back.calibrations, "hybrid", "RAWINT4") == 1.0


def test_merge_replaces_the_same_key_and_keeps_others():
    a = Calibration("hybrid", "FP8", 1.5, "server")
    b = Calibration("hybrid", "FP8", 1.5, "runner")
    merged = merge_calibrations([a, b], [Calibration("hybrid", "FP8", 0.9, "server")])
    assert sorted((c.source, c.factor) for c in merged) == [("runner", 1.5), ("server", 0.9)]
    # the model's own entry before a generic one; the runner before the server
    cs = [Calibration("hybrid", "FP8", 2.0, "server", model="M"), Calibration("hybrid", "FP8", 3.0, "runner")]
    assert calibration_factor(cs, "hybrid", "FP8", model="M") == 2.0
    assert calibration_factor(cs, "hybrid", "FP8", model="other") == 3.0


def test_bad_entries_are_refused():
    with pytest.raises(ValueError):
        Calibration("hybrid", "FP8", 0.0, "server")
    with pytest.raises(ValueError):
        Calibration("sideways", "FP8", 1.0, "server")
