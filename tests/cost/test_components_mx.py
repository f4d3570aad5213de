"""MX methods in the cost model: a profile's own MXFP4 / MXFP8 CPU curves are read where the probe
timed them; without them the stand-in of the same bits is named, with what the MX classes measured
against such stand-ins (docs/probe.md#mx-methods)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kttune.cost.components import Components
from kttune.hw.profile import load_profile
from kttune.hw.registry import load_shipped
from tests.helpers import model

VM = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "2026-12-07-xeon-amx-2c"
SHIPPED = "h200-pcie5-xeon-amx-16c"


def _with_cpu_of(path: Path):
    """The shipped profile's GPU curves with the VM's measured CPU MoE curves (gpt-oss-20b's experts)."""
    shipped = load_shipped(SHIPPED)
    cpu = tuple(c for c in load_profile(path).curves if c.kind == "cpu_moe")
    return replace(shipped, curves=tuple(c for c in shipped.curves if c.kind not in ("cpu_moe", "cpu_moe_shape")) + cpu)


@pytest.mark.parametrize("method", ["MXFP4", "MXFP8"])
def test_the_probes_mx_curves_are_read_and_their_absence_is_named(method):
    m = model("gpt-oss-20b")
    own = Components(_with_cpu_of(VM / "mx-gpt-oss-20b-0.profile.json"), m, method)
    assert own._cpu_method == method and not any("not measured on this profile" in n for n in own.notes)
    stand_in = Components(load_shipped(SHIPPED), m, method)
    assert stand_in._cpu_method != method
    assert any("docs/probe.md#mx-methods" in n and "likely fast" in n for n in stand_in.notes)
    # what the note warns of: the MX curve is slower than the stand-in's at the same shape
    assert own.cpu_moe_ms(256, m.num_experts, 1) > Components(
        _with_cpu_of(VM / "mx-gpt-oss-20b-0.profile.json"), m, {"MXFP4": "RAWINT4", "MXFP8": "AMXINT8"}[method]
    ).cpu_moe_ms(256, m.num_experts, 1)
