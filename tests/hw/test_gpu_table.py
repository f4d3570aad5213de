"""The one GPU table (kttune/hw/gpu_table.py): unambiguous by name, link rates against the PCIe
figures PCI-SIG publishes, and the readers that used their own copies now read it."""

from __future__ import annotations

import pytest

from kttune.hw.gpu_table import GPUS, PCIE_GTS, gpu_spec, pcie_gbps, spec_for_name
from kttune.probes.gpu_common import pcie_theoretical_gbps


def test_every_record_is_found_by_its_own_name():
    for g in GPUS.values():
        assert spec_for_name(g.name) is g and gpu_spec(g.key) is g


@pytest.mark.parametrize(
    "nvml_name, key",
    [
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L40", "l40"),
        ("NVIDIA H20", "h20"),
        ("NVIDIA H200 NVL", "h200"),
        ("NVIDIA H100 PCIe", "h100"),
        ("NVIDIA RTX A6000", "a6000"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
        ("NVIDIA GeForce RTX 4090 D", "rtx4090"),
        ("NVIDIA A800 80GB PCIe", "a800"),
        ("Tesla V100-SXM2-32GB", None),
    ],
)
def test_nvml_names_find_the_longest_key(nvml_name, key):
    g = spec_for_name(nvml_name)
    assert (g.key if g else None) == key


def test_compute_capability_agrees_with_the_tensor_cores_and_nvml():
    """FP8 tensor cores arrived with SM 8.9 (Ada) and Hopper: a record has an FP8 rate exactly when its
    compute capability is 8.9 or more; the H200 box's NVML reading is the table's."""
    from kttune.hw.registry import load_shipped

    for g in GPUS.values():
        major, minor = (int(x) for x in g.compute_capability.split("."))
        assert (g.fp8_tflops is not None) == ((major, minor) >= (8, 9)), g.key
    measured = load_shipped("h200-pcie5-xeon-amx-16c").inventory.gpus[0]
    assert spec_for_name(measured.name).compute_capability == measured.compute_capability


def test_records_are_datasheet_shaped():
    for g in GPUS.values():
        assert g.vram_bytes > 0 and g.hbm_gbps > 0 and g.bf16_tflops > 0 and g.source
        assert g.fp8_tflops is None or g.fp8_tflops >= g.bf16_tflops
        assert g.pcie_gen in PCIE_GTS and g.pcie_width in (8, 16)


@pytest.mark.parametrize(
    "gen, width, gbps",
    [
        # PCI-SIG's per-direction figures before line coding: 2.0 (x1 Gen1) ... 128 GB/s (x16 Gen6)
        (1, 1, 2.5 / 8),
        (3, 16, 16.0),
        (4, 16, 32.0),
        (5, 16, 64.0),
        (6, 16, 128.0),
    ],
)
def test_pcie_rates_are_the_published_raw_rates_after_line_coding(gen, width, gbps):
    code = {1: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 242 / 256}[gen]
    assert pcie_gbps(gen, width) == pytest.approx(gbps * code)
    assert pcie_theoretical_gbps(gen, width) == pcie_gbps(gen, width)  # the probes read the same table


def test_unknown_links_have_no_rate():
    assert pcie_theoretical_gbps(None, 16) is None and pcie_theoretical_gbps(7, 16) is None
