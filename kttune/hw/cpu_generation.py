"""Which CPU generation a CPUID family and model number are.

Cloud VMs often show every Xeon as "Intel(R) Xeon(R) Processor": two instances of one machine kind
then look alike by name while one runs Sapphire Rapids and the other Emerald Rapids, and the cost
model read their BF16 hybrid paths with opposite signs (docs/probe.md#one-name-two-cpus). The family
and model numbers under the name still tell them apart. The numbers are the ones Linux names in
`arch/x86/include/asm/intel-family.h` and AMD's per-family model ranges in `arch/x86/kernel/cpu/amd.c`
(Zen generations).
"""

from __future__ import annotations

# (vendor, family, model) -> generation, server parts kt-kernel's AMX and AVX-512 builds run on
INTEL = {
    0x55: "Skylake-SP / Cascade Lake",
    0x6A: "Ice Lake-SP",
    0x8F: "Sapphire Rapids",
    0xCF: "Emerald Rapids",
    0xAD: "Granite Rapids",
    0xAF: "Sierra Forest",
}

# AMD: family -> ((first model, last model, generation), ...)
AMD = {
    0x17: ((0x00, 0x2F, "Zen / Zen+"), (0x30, 0xFF, "Zen 2")),
    0x19: ((0x00, 0x0F, "Zen 3"), (0x10, 0x1F, "Zen 4"), (0x20, 0x5F, "Zen 3"), (0x60, 0xAF, "Zen 4")),
    0x1A: ((0x00, 0x2F, "Zen 5"), (0x40, 0x4F, "Zen 5"), (0x60, 0x7F, "Zen 5")),
}


def cpu_generation(vendor: str, family: int | None, model: int | None) -> str | None:
    """The generation's name, or None where the numbers are unknown or not in the tables."""
    if family is None or model is None:
        return None
    if vendor == "GenuineIntel" and family == 6:
        return INTEL.get(model)
    if vendor == "AuthenticAMD":
        return next((name for lo, hi, name in AMD.get(family, ()) if lo <= model <= hi), None)
    return None


def cpu_id_text(vendor: str, family: int | None, model: int | None, stepping: int | None) -> str | None:
    """'Emerald Rapids, family 6 model 207 stepping 2' (the name where known), or None."""
    if family is None or model is None:
        return None
    gen = cpu_generation(vendor, family, model)
    nums = f"family {family} model {model}" + (f" stepping {stepping}" if stepping is not None else "")
    return f"{gen}, {nums}" if gen else nums
