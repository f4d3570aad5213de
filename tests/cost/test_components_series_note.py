"""The cost model says when a profile timed kt-kernel's matrix kernel at too few rows an expert for a
model's long hybrid forwards (`Components._note_short_series`,
docs/probe.md#the-quick-layers-series-how-far-up-in-tokens)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kttune.cost.components import Components
from kttune.hw.profile import load_profile
from kttune.spec.loader import load_model

H100 = Path(__file__).parents[2] / "benchmarks/results/2026-12-07-h100-pcie5-xeon-amx-16c"
SHORT = H100 / "quick-transfer-h100af.profile.json"  # a real quick probe timed to 256 tokens (Sapphire Rapids)
LONG = H100 / "quick-transfer-h100ah.profile.json"  # one timed to 1,024 tokens, the default since (Emerald Rapids)


def _series_notes(profile, model: str, method: str) -> list[str]:
    return [n for n in Components(profile, load_model(model, method), method).notes if "rows an expert" in n]


def _cut(profile, max_tokens: int):
    return replace(
        profile,
        curves=tuple(
            replace(c, points=tuple(p for p in c.points if p.x <= max_tokens)) if c.kind == "cpu_moe" else c
            for c in profile.curves
        ),
    )


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "mixtral-8x7b", "qwen3-next-80b-a3b"])
def test_a_quick_probe_timed_to_256_tokens_says_so(model):
    [note] = _series_notes(load_profile(SHORT), model, "BF16")
    assert model in note and "kttune probe --quick" in note and f"kttune probe --model {model}" in note


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "mixtral-8x7b", "qwen3-next-80b-a3b"])
def test_a_quick_probe_timed_to_1024_tokens_says_nothing(model):
    assert not _series_notes(load_profile(LONG), model, "BF16")


def test_the_note_follows_the_series_not_the_instance():
    # the 1,024-token probe cut at 256 tokens reads as a short series; the model's own layer never does
    assert _series_notes(_cut(load_profile(LONG), 256), "qwen3-30b-a3b", "BF16")
    own = load_profile(H100 / "quick-transfer-model-qwen3-30b-a3b-h100af.profile.json")
    assert not _series_notes(own, "qwen3-30b-a3b", "BF16")


def test_a_class_with_one_kernel_gets_no_note():
    # FP8's class runs one kernel at every length (no AMX tile kernel apart): the rows effect was not measured there
    assert not _series_notes(load_profile(SHORT), "deepseek-v3", "FP8")
