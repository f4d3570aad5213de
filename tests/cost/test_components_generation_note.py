"""The cost model says when the expert-shape law's constant r it charges was measured on another CPU
generation than the profile's (`Components._note_shape_law_cpu`, docs/probe.md#one-name-two-cpus): the
H100 box's instances all named their CPU "Intel(R) Xeon(R) Processor", two were Sapphire Rapids and
read the BF16 models' hybrid paths +23%, the constants were measured on Emerald Rapids."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kttune.cost.components import SHAPE_LAW_NOTE_SHARE, Components
from kttune.hw.features import matrix_work_per_flop
from kttune.hw.profile import load_profile
from kttune.hw.registry import load_shipped
from kttune.spec.kt_classes import MATRIX_OUTPUT_FLOPS
from kttune.spec.loader import load_model

# a real quick probe of one H100 instance that ran Sapphire Rapids (its machine file: family 6 model 143),
# written before the inventory read the numbers; and a probe that measured its own shape-law sets
H100 = Path(__file__).parents[2] / "benchmarks/results/2026-12-05-h100-pcie5-xeon-amx-16c"
SETS = (
    Path(__file__).parents[2]
    / "benchmarks/results/2026-12-04-h200-pcie5-xeon-amx-16c/shape-law-probe-b-probe-quick-shape-law.profile.json"
)


def _on(profile, family, model_number):
    cpu = replace(profile.inventory.cpu, family=family, model_number=model_number)
    return replace(profile, inventory=replace(profile.inventory, cpu=cpu))


def _notes(profile, model: str, method: str) -> list[str]:
    return [n for n in Components(profile, load_model(model, method), method).notes if "per output element" in n]


@pytest.mark.parametrize("model,method", [("glm-4.5-air", "BF16"), ("qwen3-235b-a22b", "AMXINT4")])
def test_a_sapphire_rapids_profile_says_r_was_measured_on_emerald_rapids(model, method):
    spr = _on(load_profile(H100 / "quick-transfer-h100k.profile.json"), 6, 143)
    [note] = _notes(spr, model, method)
    assert "measured on Emerald Rapids" in note and "Sapphire Rapids, family 6 model 143" in note
    assert "kttune probe --shape-law" in note and f"kttune probe --model {model}" in note and "no one r" in note


def test_no_note_on_the_generation_r_was_measured_on_or_where_the_cpu_is_unknown():
    p = load_profile(H100 / "quick-transfer-h100k.profile.json")
    assert not _notes(_on(p, 6, 207), "glm-4.5-air", "BF16")
    assert not _notes(p, "glm-4.5-air", "BF16")  # written before the inventory read the CPUID numbers
    assert not _notes(_on(load_shipped("h200-pcie5-xeon-amx-16c"), 6, 207), "glm-4.5-air", "BF16")


@pytest.mark.parametrize("model,method", [("deepseek-v3", "FP8"), ("kimi-k2-thinking", "RAWINT4")])
def test_no_note_where_r_is_a_small_part_of_the_work(model, method):
    """FP8's and RAWINT4's classes compute without AMX tiles: their r is a few percent of the work."""
    spr = _on(load_profile(H100 / "quick-transfer-h100k.profile.json"), 6, 143)
    assert not _notes(spr, model, method)
    m = load_model(model, method)
    kernel = {"FP8": "AMXFP8_MOE", "RAWINT4": "AMXInt4_KGroup_MOE"}[method]
    extra = matrix_work_per_flop(m.hidden_size, m.moe_intermediate_size, MATRIX_OUTPUT_FLOPS[("amx", kernel)]) - 1
    assert extra / (1 + extra) < SHAPE_LAW_NOTE_SHARE


def test_no_note_where_the_profiles_probe_measured_r_itself():
    """A probe that measured a kept shape-law set for the class charges its own r, whatever the CPU."""
    from kttune.hw.registry import complete_with

    # a CPU-only probe (--cpu-only): the shipped profile lends it GPU curves, as `search` does
    sets = _on(complete_with(load_profile(SETS), load_shipped("h200-pcie5-xeon-amx-16c")), 6, 143)
    c = Components(sets, load_model("glm-4.5-air", "BF16"), "BF16")
    assert c.cpu_output_flops_source.startswith("measured by this profile's probe")  # BF16's set was kept
    assert not _notes(sets, "glm-4.5-air", "BF16")
