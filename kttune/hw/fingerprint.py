"""What makes two hardware profiles comparable, hashed.

Two profiles with the same fingerprint were measured on the same kind of machine with the same
software that decides the timings (CPU model, CPUID family and model number, ISA, cores, NUMA layout,
RAM size class, GPUs with their VRAM and PCIe link, driver, torch, kt-kernel and its CPU variant,
sglang). Free memory, hostnames and timestamps are left out on purpose. The family and model number
tell CPU generations apart where a hypervisor shows one name for both
(docs/probe.md#one-name-two-cpus); a profile written before kttune read them has none, and
`legacy_fingerprint` is what such a profile of this machine holds.
"""

from __future__ import annotations

import hashlib
import json

from kttune.hw.profile import Inventory
from kttune.units import GIB

# ISA flags that change which kt-kernel variant runs, and so the CPU timings.
RELEVANT_ISA = (
    "amx_bf16",
    "amx_int8",
    "amx_tile",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "avx512_vbmi",
    "avx_vnni",
    "avx2",
    "fma",
)


def fingerprint_fields(inv: Inventory) -> dict:
    cpu = inv.cpu
    sw = inv.software
    cpuid = {"cpu_id": [cpu.vendor, cpu.family, cpu.model_number]} if cpu.family is not None else {}
    return {
        **cpuid,
        "cpu_model": cpu.model,
        "physical_cores": cpu.physical_cores,
        "logical_cpus": cpu.logical_cpus,
        "numa": [len(n.cpus) for n in cpu.numa_nodes],
        "isa": sorted(f for f in cpu.isa if f in RELEVANT_ISA),
        "ram_gib": round(cpu.ram_total_bytes / GIB / 16) * 16,  # 16 GiB classes: VMs report odd sizes
        "gpus": [
            {
                "name": g.name,
                "vram_gib": round(g.vram_total_bytes / GIB),
                "pcie": [g.pcie_gen_max, g.pcie_width_max],
                "numa": g.numa_node,
            }
            for g in inv.gpus
        ],
        "driver": sw.nvidia_driver,
        "torch": (sw.torch or "").split("+")[0] or None,
        "kt_kernel": sw.kt_kernel,
        "kt_cpu_variant": sw.kt_cpu_variant,
        "sglang": sw.sglang,
    }


def _hash(fields: dict) -> str:
    blob = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def fingerprint(inv: Inventory) -> str:
    """A short stable hash of `fingerprint_fields` (16 hex digits)."""
    return _hash(fingerprint_fields(inv))


def legacy_fingerprint(inv: Inventory) -> str | None:
    """The fingerprint a profile of this machine written before kttune read the CPUID family and
    model number holds, or None where they were not read (then `fingerprint` is that already)."""
    fields = fingerprint_fields(inv)
    return _hash({k: v for k, v in fields.items() if k != "cpu_id"}) if "cpu_id" in fields else None


def is_this_machine(inv: Inventory, profile_fingerprint: str | None) -> bool:
    """Whether a profile with `profile_fingerprint` was measured on the machine of `inv` (its
    fingerprint, or the legacy one of a profile written before the CPUID numbers were read)."""
    return profile_fingerprint is not None and profile_fingerprint in (fingerprint(inv), legacy_fingerprint(inv))
