"""A plan on a profile measured on another machine says so, with what that costs and the command
that measures this one; this machine's own profile and derived ones (labelled per curve) do not. A
plan on a profile probed on a busy machine says that too."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from kttune import app
from kttune.app.inputs import busy_profile_note, measured_elsewhere_note, this_machine_inventory
from kttune.hw.fingerprint import fingerprint
from kttune.hw.profile import profile_to_dict
from kttune.hw.registry import load_shipped
from kttune.units import GIB

SHIPPED = "h200-pcie5-xeon-amx-16c"


def _elsewhere(notes) -> list[str]:
    return [n for n in notes if "measured on another machine" in n]


def test_a_shipped_profile_of_another_machine_says_what_it_may_miss():
    here = this_machine_inventory()
    assert here is None or fingerprint(here) != load_shipped(SHIPPED).fingerprint  # this is not the H200 box
    inp = app.resolve_inputs("qwen3-30b-a3b", 32 * GIB, profile=SHIPPED)
    (note,) = _elsewhere(inp.notes)
    assert f"'{SHIPPED}'" in note and "1.9x" in note and "`kttune tune --model qwen3-30b-a3b" in note
    assert "`kttune probe --quick`" in note and "docs/cost-model.md#the-instances-own-quick-probe" in note


def test_this_machines_own_profile_and_derived_ones_do_not(tmp_path):
    here = this_machine_inventory()
    mine = replace(load_shipped(SHIPPED), fingerprint=fingerprint(here)) if here else None
    if mine is not None:
        path = tmp_path / "mine.json"
        path.write_text(json.dumps(profile_to_dict(mine)))
        inp = app.resolve_inputs("qwen3-30b-a3b", 32 * GIB, profile=str(path))
        assert _elsewhere(inp.notes) == []
    derived = load_shipped("datasheet-h200-pcie5-xeon-amx-16c")
    assert measured_elsewhere_note(derived, "datasheet-h200-pcie5-xeon-amx-16c", here, "qwen3-30b-a3b") is None
    # the profile `kttune probe` cached for this machine comes without a name
    assert measured_elsewhere_note(load_shipped(SHIPPED), None, here, "qwen3-30b-a3b") is None


RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def test_a_plan_on_a_busy_machines_profile_says_so_and_a_quiet_ones_does_not():
    """H200 instance f's quick probe (14 of its 166 points disturbed) against the shipped profile (12 of
    625) and H100 instance t's probe of the same day (0 of 166): the note is read from the curves, so
    a profile probed before the probe said so gets it too."""
    busy = RESULTS / "2026-12-06-h200-pcie5-xeon-amx-16c" / "quick-transfer-h200f.profile.json"
    inp = app.resolve_inputs("qwen3-30b-a3b", 32 * GIB, profile=str(busy))
    (note,) = [n for n in inp.notes if "busy machine" in n]
    assert "14 of its 166 readings" in note and "docs/probe.md#a-busy-machine" in note
    assert "`kttune probe --quick --fresh`" in note
    merged = RESULTS / "2026-12-06-computed" / "h200f-merged.profile.json"  # its three probes merged
    inp = app.resolve_inputs("qwen3-30b-a3b", 32 * GIB, profile=str(merged))
    assert [n for n in inp.notes if "busy machine" in n and "36 of its 498 readings" in n]
    quiet = RESULTS / "2026-12-06-h100-pcie5-xeon-amx-16c" / "quick-transfer-h100t.profile.json"
    for profile in (str(quiet), SHIPPED):
        inp = app.resolve_inputs("qwen3-30b-a3b", 32 * GIB, profile=profile)
        assert not [n for n in inp.notes if "busy machine" in n]
    # a derived profile is no probe: its labelled curves say what they are
    assert busy_profile_note(load_shipped("datasheet-h200-pcie5-xeon-amx-16c"), "datasheet") is None
