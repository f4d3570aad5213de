"""Inventory: the real /proc, /sys, NVML and installed packages of this machine."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kttune.hw.fingerprint import fingerprint
from kttune.probes import inventory as inv_mod
from kttune.probes.inventory import collect_inventory


def test_cpulist_parsing():
    assert inv_mod._parse_cpulist("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert inv_mod._parse_cpulist("0") == (0,)
    assert inv_mod._parse_cpulist("") == ()


def test_inventory_does_not_import_torch():
    # how long it takes is measured by benchmarks/bench_inventory.py, not asserted here
    code = textwrap.dedent(
        """
        import sys
        from kttune.probes.inventory import collect_inventory
        inv = collect_inventory()
        print('torch' in sys.modules, 'sglang' in sys.modules, 'kt_kernel' in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False", "False"]


def test_cpu_facts_agree_with_proc_and_sys():
    inv = collect_inventory()
    cpu = inv.cpu
    assert 1 <= cpu.physical_cores <= cpu.logical_cpus
    assert cpu.sockets >= 1
    assert 0 < cpu.ram_available_bytes <= cpu.ram_total_bytes
    all_cpus = sorted(c for n in cpu.numa_nodes for c in n.cpus)
    assert len(all_cpus) == len(set(all_cpus)) == cpu.logical_cpus
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    assert cpu.has("avx2") == ("avx2" in flags)
    assert cpu.has("amx_int8") == ("amx_int8" in flags)
    assert cpu.has("avx512_vbmi") == ("avx512vbmi" in flags)  # normalised spelling
    assert inv_mod.usable_cores(cpu) <= cpu.physical_cores
    assert inv_mod.numa_nodes_with_cpus(cpu)


def test_gpus_or_the_reason_there_are_none():
    inv = collect_inventory()
    if inv.gpus:
        for g in inv.gpus:
            assert g.name and g.vram_total_bytes > 0 and g.vram_free_bytes <= g.vram_total_bytes
            assert g.pcie_gen_max and g.pcie_width_max
        assert inv.software.nvidia_driver
    else:
        assert inv.software.nvml  # why (library missing, no driver) or the NVML version
        assert any("GPU" in n for n in inv.notes)


def test_fingerprint_is_stable_and_ignores_free_memory():
    from dataclasses import replace

    a = collect_inventory()
    b = collect_inventory()
    assert fingerprint(a) == fingerprint(b)
    c = replace(a, cpu=replace(a.cpu, ram_available_bytes=1), hostname="elsewhere")
    assert fingerprint(c) == fingerprint(a)


def _installed_versions_by_dist_info_name() -> dict[str, str]:
    """name -> version from the names of the `*.dist-info` directories pip writes (its install
    record), found on sys.path without importlib.metadata."""
    found: dict[str, str] = {}
    for entry in sys.path:
        d = Path(entry or ".")
        if not d.is_dir():
            continue
        for info in d.glob("*.dist-info"):
            name, _, version = info.name[: -len(".dist-info")].partition("-")
            found.setdefault(name.lower().replace("_", "-"), version)
    return found


def test_software_versions_from_package_metadata():
    sw = collect_inventory().software
    assert sw.python == sys.version.split()[0]
    installed = _installed_versions_by_dist_info_name()
    assert sw.torch == installed.get("torch")
    assert sw.kt_kernel == installed.get("kt-kernel")
    # and torch's own version module agrees (read, not imported: the inventory must not import torch)
    torch_dir = inv_mod._package_dir("torch")
    if torch_dir is not None:
        text = (torch_dir / "version.py").read_text()
        assert f"__version__ = '{sw.torch}'" in text or f'__version__ = "{sw.torch}"' in text


@pytest.mark.kt
def test_detected_kt_variant_is_the_one_kt_kernel_loads():
    assert inv_mod.kt_variant_detected() == inv_mod.kt_variant_loaded()
    assert collect_inventory(import_kt=True).software.kt_cpu_variant == inv_mod.kt_variant_loaded()


def _fake_sglang(root: Path, dist: str, with_threshold: bool) -> None:
    pkg = root / "sglang" / "srt"
    pkg.mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("raise RuntimeError('inventory must not import sglang')\n")
    (pkg / "__init__.py").write_text("")
    flag = '    parser.add_argument("--kt-gpu-prefill-token-threshold", type=int)\n' if with_threshold else ""
    (pkg / "server_args.py").write_text("def add_cli_args(parser):\n" + flag + "    pass\n")
    info = root / f"{dist.replace('-', '_')}-0.7.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.7.2\n")


@pytest.mark.parametrize("dist,fork,threshold", [("sglang-kt", True, True), ("sglang", False, False)])
def test_sglang_fork_and_layerwise_flag_read_from_installed_files(tmp_path, monkeypatch, dist, fork, threshold):
    if inv_mod._version("sglang") or inv_mod._version("sglang-kt"):
        pytest.skip("a real sglang is installed")
    _fake_sglang(tmp_path, dist, threshold)
    monkeypatch.syspath_prepend(str(tmp_path))
    info = inv_mod.sglang_info()
    assert info == {"sglang": "0.7.2", "sglang_is_kt_fork": fork, "sglang_has_layerwise_threshold": threshold}
    assert "sglang" not in sys.modules


def test_machine_name_names_cores_and_gpus():
    inv = collect_inventory()
    name = inv_mod.machine_name(inv)
    assert f"{inv.cpu.physical_cores} cores" in name
    assert ("no GPU" in name) == (not inv.gpus)
