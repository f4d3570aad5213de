"""The cost model says when a profile timed kt-kernel only on layers a last-level cache holds and the
model's layer is read from DRAM (`Components._note_layers_in_cache`, docs/cost-model.md#the-instances-own-quick-probe)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kttune.cost.components import PAST_CACHE_BYTES, Components, _layer_bytes
from kttune.hw.profile import load_profile
from kttune.hw.registry import load_shipped
from kttune.spec.loader import load_model

# a real quick probe of the H100 box: the 1,024 x 512 layer of 32 experts only
QUICK = (
    Path(__file__).parents[2]
    / "benchmarks/results/2026-12-05-h100-pcie5-xeon-amx-16c/quick-transfer-h100k.profile.json"
)


def _cache_notes(profile, model: str, method: str) -> list[str]:
    return [n for n in Components(profile, load_model(model, method), method).notes if "last-level cache" in n]


@pytest.mark.parametrize(
    "model,method", [("glm-4.5-air", "BF16"), ("deepseek-v3", "FP8"), ("kimi-k2-thinking", "RAWINT4")]
)
def test_a_quick_profile_says_the_models_layer_was_never_timed_past_the_cache(model, method):
    [note] = _cache_notes(load_profile(QUICK), model, method)
    assert model in note and "GiB a layer" in note and f"kttune probe --model {model}" in note


def test_a_profile_that_timed_a_layer_past_the_cache_says_nothing():
    # the shipped profile timed Qwen3-30B-A3B's 1.1 GiB layer (BF16) and DeepSeek-V3's (FP8)
    shipped = load_shipped("h200-pcie5-xeon-amx-16c")
    assert not _cache_notes(shipped, "glm-4.5-air", "BF16")
    assert not _cache_notes(shipped, "deepseek-v3", "FP8")


def test_a_cold_curve_counts_the_copies_it_cycled_over():
    quick = load_profile(QUICK)
    assert all(_layer_bytes(c) < PAST_CACHE_BYTES for c in quick.curves_of("cpu_moe", method="BF16"))
    cold = tuple(
        replace(
            c,
            points=tuple(replace(p, extra={**(p.extra or {}), "source_bytes": 2 * PAST_CACHE_BYTES}) for p in c.points),
        )
        if c.kind == "cpu_moe"
        else c
        for c in quick.curves
    )
    assert not _cache_notes(replace(quick, curves=cold), "glm-4.5-air", "BF16")


def test_a_model_whose_layer_a_cache_holds_gets_no_note():
    # Qwen3-30B-A3B's layer at AMXINT4 is 0.3 GiB: below PAST_CACHE_BYTES, as a cache may hold it
    assert not _cache_notes(load_profile(QUICK), "qwen3-30b-a3b", "AMXINT4")


H100_6 = Path(__file__).parents[2] / "benchmarks/results/2026-12-06-h100-pcie5-xeon-amx-16c"


@pytest.mark.parametrize(
    "tag,llc_mib,says",
    [
        ("h100ac", 300, "fits in this host's last-level cache (the largest 96 of 300 MiB)"),  # Emerald Rapids
        ("h100aa", 105, "about fills this host's last-level cache (the largest 96 of 105 MiB"),  # Sapphire Rapids
    ],
)
def test_the_note_reads_the_hosts_own_cache(tag, llc_mib, says):
    """The profile records CPU 0's largest cache; a quick BF16 layer of 96 MiB sits well inside an
    Emerald Rapids instance's 300 MiB and about fills a Sapphire Rapids one's 105 MiB."""
    prof = load_profile(H100_6 / f"quick-transfer-{tag}.profile.json")
    assert round(prof.inventory.cpu.last_level_cache_bytes / 2**20) == llc_mib
    [note] = _cache_notes(prof, "glm-4.5-air", "BF16")
    assert says in note


def test_without_a_recorded_cache_the_note_says_a_cache():
    prof = load_profile(H100_6 / "quick-transfer-h100aa.profile.json")
    cpu = replace(prof.inventory.cpu, last_level_cache_bytes=None)
    prof = replace(prof, inventory=replace(prof.inventory, cpu=cpu))
    [note] = _cache_notes(prof, "glm-4.5-air", "BF16")
    assert "fits in a last-level cache (the largest 96 MiB)" in note


def test_a_host_cache_smaller_than_the_layer_is_not_said_to_hold_it():
    prof = load_profile(H100_6 / "quick-transfer-h100aa.profile.json")
    cpu = replace(prof.inventory.cpu, last_level_cache_bytes=64 * 2**20)
    prof = replace(prof, inventory=replace(prof.inventory, cpu=cpu))
    [note] = _cache_notes(prof, "glm-4.5-air", "BF16")
    assert "at most 96 MiB, past this host's 64 MiB last-level cache" in note
    assert "fits in" not in note
