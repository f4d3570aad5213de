"""What makes two profiles comparable: the fingerprint sees what decides timings, nothing else."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kttune.hw.fingerprint import fingerprint, is_this_machine, legacy_fingerprint
from kttune.hw.registry import load_shipped
from kttune.units import GIB


@pytest.fixture(scope="module")
def inv():
    return load_shipped("h200-pcie5-xeon-amx-16c").inventory


def test_free_memory_hostname_and_notes_do_not_count(inv):
    other = replace(
        inv,
        hostname="elsewhere",
        notes=("x",),
        cpu=replace(inv.cpu, ram_available_bytes=1),
        gpus=tuple(replace(g, vram_free_bytes=0, uuid="GPU-other") for g in inv.gpus),
    )
    assert fingerprint(other) == fingerprint(inv)


def test_ram_counts_in_16_gib_classes(inv):
    assert fingerprint(
        replace(inv, cpu=replace(inv.cpu, ram_total_bytes=inv.cpu.ram_total_bytes + 3 * GIB))
    ) == fingerprint(inv)
    assert fingerprint(
        replace(inv, cpu=replace(inv.cpu, ram_total_bytes=inv.cpu.ram_total_bytes + 64 * GIB))
    ) != fingerprint(inv)


@pytest.mark.parametrize(
    "change",
    [
        lambda i: replace(i, cpu=replace(i.cpu, model="another CPU")),
        lambda i: replace(i, cpu=replace(i.cpu, physical_cores=i.cpu.physical_cores + 1)),
        lambda i: replace(i, cpu=replace(i.cpu, isa=tuple(f for f in i.cpu.isa if not f.startswith("amx")))),
        lambda i: replace(i, gpus=i.gpus[:0]),
        lambda i: replace(i, software=replace(i.software, kt_kernel="9.9.9")),
        lambda i: replace(i, software=replace(i.software, torch="1.0.0")),
    ],
)
def test_what_decides_timings_changes_it(inv, change):
    assert fingerprint(change(inv)) != fingerprint(inv)


def test_irrelevant_isa_flags_and_torch_local_suffix_do_not_count(inv):
    assert fingerprint(replace(inv, cpu=replace(inv.cpu, isa=inv.cpu.isa + ("sse3",)))) == fingerprint(inv)
    sw = inv.software
    if sw.torch:
        assert fingerprint(replace(inv, software=replace(sw, torch=sw.torch.split("+")[0] + "+cu128"))) == fingerprint(
            inv
        )


def test_shape(inv):
    f = fingerprint(inv)
    assert len(f) == 16 and int(f, 16) >= 0


def test_two_cpu_generations_under_one_name_differ(inv):
    """The H100 box's instances all read "Intel(R) Xeon(R) Processor", 16 cores, AMX; two of them ran
    Sapphire Rapids (family 6 model 143), the rest Emerald Rapids (207): their profiles must not pass
    for one another (docs/probe.md#one-name-two-cpus)."""
    spr = replace(inv, cpu=replace(inv.cpu, family=6, model_number=143, stepping=8))
    emr = replace(inv, cpu=replace(inv.cpu, family=6, model_number=207, stepping=2))
    assert fingerprint(spr) != fingerprint(emr)
    assert fingerprint(replace(emr, cpu=replace(emr.cpu, stepping=3))) == fingerprint(emr)  # stepping: no
    # a profile written before the numbers were read matches both by its legacy fingerprint
    assert legacy_fingerprint(spr) == legacy_fingerprint(emr) == fingerprint(inv)
    assert legacy_fingerprint(inv) is None
    assert is_this_machine(emr, fingerprint(inv)) and is_this_machine(emr, fingerprint(emr))
    assert not is_this_machine(emr, fingerprint(spr)) and not is_this_machine(emr, None)


def test_a_profile_cached_before_the_cpuid_numbers_is_still_this_machines(inv, tmp_path, monkeypatch):
    from kttune.hw.profile import save_profile
    from kttune.hw.registry import cached_profile_for_this_machine
    from kttune.paths import profile_cache_path

    monkeypatch.setenv("KTTUNE_CACHE_DIR", str(tmp_path))
    old = load_shipped("h200-pcie5-xeon-amx-16c")  # no family / model number in its inventory
    here = replace(inv, cpu=replace(inv.cpu, family=6, model_number=207))
    assert cached_profile_for_this_machine(here) is None
    save_profile(old, profile_cache_path(old.fingerprint))
    assert cached_profile_for_this_machine(here).fingerprint == old.fingerprint
    other = replace(inv, cpu=replace(inv.cpu, physical_cores=32, family=6, model_number=207))
    assert cached_profile_for_this_machine(other) is None
