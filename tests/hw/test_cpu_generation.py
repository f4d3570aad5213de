"""CPUID family / model numbers to generation names (Linux's intel-family.h and amd.c tables)."""

from __future__ import annotations

import pytest

from kttune.hw.cpu_generation import cpu_generation, cpu_id_text


@pytest.mark.parametrize(
    "vendor,family,model,want",
    [
        ("GenuineIntel", 6, 143, "Sapphire Rapids"),  # the H100 box's instances k and l
        ("GenuineIntel", 6, 207, "Emerald Rapids"),  # its other instances, the H200 box, the Silver 4509Y tree
        ("GenuineIntel", 6, 106, "Ice Lake-SP"),
        ("AuthenticAMD", 25, 17, "Zen 4"),  # EPYC 9124 (tests/data/hosts/epyc-1s-smt), the development VM
        ("AuthenticAMD", 25, 1, "Zen 3"),  # Milan
        ("AuthenticAMD", 26, 2, "Zen 5"),  # Turin
        ("AuthenticAMD", 23, 49, "Zen 2"),  # Rome
        ("GenuineIntel", 6, 999, None),
        ("GenuineIntel", 15, 143, None),  # another family: the model number means something else
        ("AuthenticAMD", 6, 143, None),
        ("GenuineIntel", None, 143, None),
    ],
)
def test_generations(vendor, family, model, want):
    assert cpu_generation(vendor, family, model) == want


def test_the_text_names_the_generation_where_known_and_the_numbers_always():
    assert cpu_id_text("GenuineIntel", 6, 207, 2) == "Emerald Rapids, family 6 model 207 stepping 2"
    assert cpu_id_text("GenuineIntel", 6, 999, None) == "family 6 model 999"
    assert cpu_id_text("GenuineIntel", None, None, None) is None
