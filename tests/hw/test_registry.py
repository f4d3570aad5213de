"""Which profile `kttune search` uses: a file, a shipped name, or this machine's cached probe
completed with the shipped GPU curves."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kttune.errors import UserError
from kttune.hw.fingerprint import fingerprint
from kttune.hw.profile import save_profile
from kttune.hw.registry import CPU_KINDS, GPU_KINDS, default_shipped_name, load_shipped, resolve_profile, shipped_names
from kttune.paths import profile_cache_path
from kttune.probes.inventory import collect_inventory


def test_a_measured_profile_ships_and_is_the_default():
    assert "h200-pcie5-xeon-amx-16c" in shipped_names()
    p = load_shipped(default_shipped_name())
    assert p.provenance.kind == "measured"
    assert "H200" in p.provenance.machine
    for kind in ("cpu_moe", "stage_a_write", "h2d", "gpu_moe", "attention", "pipeline"):
        assert p.has(kind), kind


def test_datasheet_profiles_say_so():
    for name in shipped_names():
        p = load_shipped(name)
        if name.startswith("datasheet-"):
            assert p.provenance.kind == "datasheet"
            assert any("NOT MEASURED" in n for n in p.provenance.notes)
            assert all(c.params.get("label") in ("measured", "scaled", "datasheet") for c in p.curves)


def test_unprobed_machine_gets_the_shipped_default():
    assert resolve_profile(None, collect_inventory()).fingerprint == load_shipped(default_shipped_name()).fingerprint


def test_this_machines_probe_is_used_with_shipped_gpu_parts():
    inv = collect_inventory()
    shipped = load_shipped(default_shipped_name())
    cpu_only = replace(
        shipped,
        inventory=inv,
        fingerprint=fingerprint(inv),
        curves=tuple(c for c in shipped.curves if c.kind in CPU_KINDS),
    )
    save_profile(cpu_only, profile_cache_path(cpu_only.fingerprint))  # what `kttune probe` writes here
    p = resolve_profile(None, inv)
    assert p.fingerprint == fingerprint(inv)
    assert p.provenance.kind == "measured"  # both parts measured (this test borrows the shipped CPU curves)
    assert any("taken from" in n for n in p.provenance.notes)
    assert {c.kind for c in p.curves} >= set(CPU_KINDS) | {k for k in GPU_KINDS if shipped.has(k)}
    assert p.inventory.cpu.model == inv.cpu.model  # the budget's host RAM is this machine's


def test_unknown_profile_name_suggests():
    with pytest.raises(UserError, match="did you mean"):
        resolve_profile("h200-pcie5-xeon-amx", None)
