"""The calibration's typed entries (kttune.calibration.entries) as `kttune validate` writes them and the
profile keeps them: the JSON form round-trips, a server entry replaces only its own kind, bad ones are
refused."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from kttune.calibration.entries import Calibration, CalibrationEntry, entry_factor, server_entry
from kttune.hw.profile import load_profile, save_profile
from tests.helpers import profile

RUNNER = {
    "method": "RAWINT4",
    "path": "layerwise",
    "a": 0.1,
    "b": 0.02,
    "points": 6,
    "raw_mape": 0.2,
    "held_out_mape": 0.08,
    "source": "runs/kimi.json",
}


def test_profile_round_trip_keeps_the_calibration_list(tmp_path):
    e = server_entry(
        "rawint4", "layerwise", 1.12, 24, 0.3, "Kimi-K2-Thinking", detail={"config": {"chunked_prefill_size": 8192}}
    )
    p = replace(profile("h200-pcie5-xeon-amx-16c"), calibration=(RUNNER, e.to_dict()))
    back = load_profile(save_profile(p, tmp_path / "p.json"))
    assert back.calibration == p.calibration
    cal = Calibration.from_dicts(back.calibration)
    assert cal.server_entries() == (e,) and e.method == "RAWINT4"
    assert cal.to_dicts() == [RUNNER, e.to_dict()]  # a runner entry's dict has no server keys
    assert math.isclose(e.factor(123456), 1.12) and math.isclose(entry_factor(e.to_dict(), 7), 1.12)  # b = 0


def test_merge_replaces_server_entries_only_and_puts_them_after_the_runner():
    old = server_entry("FP8", "hybrid", 1.5, 4)
    other_model = server_entry("FP8", "hybrid", 1.3, 4, model="M")
    merged = Calibration((old, CalibrationEntry.from_dict(RUNNER), other_model)).with_server_entries(
        [server_entry("FP8", "hybrid", 0.9, 6)]
    )
    assert [(e.source, round(e.factor(), 3)) for e in merged.entries] == [
        ("runs/kimi.json", 1.105),
        ("server", 1.3),
        ("server", 0.9),
    ]


def test_bad_entries_are_refused():
    with pytest.raises(ValueError):
        server_entry("FP8", "hybrid", 0.0, 1)
    with pytest.raises(ValueError):
        server_entry("FP8", "sideways", 1.0, 1)
