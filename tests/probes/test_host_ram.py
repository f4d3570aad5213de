"""The host-RAM probe step: real kt-kernel layers in a fresh process, recorded as a `host_ram`
profile curve that round-trips through the profile format."""

from __future__ import annotations

import pytest

from kttune.hw.profile import profile_from_dict, profile_to_dict
from kttune.hw.registry import load_shipped
from kttune.probes.host_ram import HostRamPoint, host_ram_curve, predicted_bytes


def point(n: int, reserved: int) -> HostRamPoint:
    return HostRamPoint(method="BF16", kernel="AMXBF16_MOE", hidden=1024, inter=512, experts=32, top_k=8, max_len=n,
                        layers=1, threads=1, reserved_bytes=reserved, resident_bytes=reserved, weights_source_bytes=0)


def test_curve_holds_measured_and_predicted_bytes_and_round_trips():
    c = host_ram_curve([point(4096, 700 << 20), point(1024, 250 << 20)])
    assert [p.x for p in c.points] == [1024, 4096]
    assert c.points[0].extra["predicted_bytes"] == predicted_bytes(point(1024, 0))
    from dataclasses import replace

    prof = load_shipped("h200-pcie5-xeon-amx-16c")
    prof = replace(prof, curves=prof.curves + (c,))
    assert profile_from_dict(profile_to_dict(prof)).curves_of("host_ram")[0] == c


@pytest.mark.kt
def test_probe_step_measures_growth_with_max_len():
    from kttune.probes.host_ram import probe_host_ram

    (curve,) = probe_host_ram(["RAWINT4"], 1024, 512, 32, 8, [256, 2048])
    small, big = curve.points
    assert big.extra["reserved_bytes"] > small.extra["reserved_bytes"]
    for p in curve.points:
        assert abs(p.extra["predicted_bytes"] / p.extra["reserved_bytes"] - 1) <= 0.10
