"""The shipped datasheet profiles (profiles/datasheet-*.json): machines nobody measured, each a GPU
of the GPU table (`kttune.hw.gpu_table`, the one place GPU datasheet figures live) and a CPU target,
derived from a measured shipped profile by `kttune.hw.derive` (kt-kernel's measured per-core throughput
scaled to the datasheet CPU; measured GPU curves scaled to the datasheet GPU). Regenerate them with
`python -m kttune.hw.datasheet` after a measured profile changes; tests/hw/test_datasheet.py checks
the shipped files are what this gives. Pure except `main`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kttune.hw.derive import Change, CpuTarget, dram_gbps, derive_profile
from kttune.hw.gpu_table import gpu_spec
from kttune.hw.profile import HardwareProfile
from kttune.units import GIB

# Sapphire Rapids / Emerald Rapids Xeon flags kt-kernel's AMX variant uses.
XEON_AMX_ISA = (
    "amx_bf16",
    "amx_int8",
    "amx_tile",
    "avx2",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vbmi",
    "avx512_vnni",
    "avx512bw",
    "avx512f",
    "avx_vnni",
    "fma",
)


@dataclass(frozen=True)
class DatasheetBox:
    """A shipped datasheet machine: a GPU of the GPU table (`Change.gpu`, its key) and a CPU target."""

    name: str  # file name under profiles/ without .json
    measured: str  # the shipped measured profile it is derived from
    change: Change
    host: str  # the CPU side in words, e.g. "16-core Xeon with AMX, 8 x DDR5-4800"

    @property
    def machine(self) -> str:
        """The profile's machine name; the GPU's words come from its record in the GPU table."""
        g = gpu_spec(self.change.gpu or "")
        return f"{g.name} x{self.change.n_gpus or 1} (PCIe Gen{g.pcie_gen} x{g.pcie_width}) + {self.host} (datasheet)"


BOXES = (
    DatasheetBox(
        "datasheet-h200-pcie5-xeon-amx-16c",
        "h200-pcie5-xeon-amx-16c",
        Change(
            gpu="h200",
            cpu=CpuTarget(
                cores=16,
                isa=XEON_AMX_ISA,
                numa_nodes=1,
                mem_bandwidth_gbps=dram_gbps(8, 4800),
                ram_bytes=128 * GIB,
                model="Intel Xeon (Sapphire Rapids class, AMX), 16 cores, 8 x DDR5-4800",
            ),
        ),
        "16-core Xeon with AMX, 8 x DDR5-4800",
    ),
    DatasheetBox(
        "datasheet-rtx4090-pcie4-xeon-amx-64c",
        "h200-pcie5-xeon-amx-16c",
        Change(
            gpu="rtx4090",
            cpu=CpuTarget(
                cores=64,
                isa=XEON_AMX_ISA,
                numa_nodes=2,
                mem_bandwidth_gbps=dram_gbps(16, 4800),
                ram_bytes=1024 * GIB,
                model="Intel Xeon (AMX), 2 sockets x 32 cores, 16 x DDR5-4800",
            ),
        ),
        "2 x 32-core Xeon with AMX, 16 x DDR5-4800",
    ),
)


def datasheet_profile(box: DatasheetBox, measured: HardwareProfile) -> HardwareProfile:
    """`box` derived from its measured profile; provenance kind "datasheet", created left empty so
    regenerating gives the same file."""
    p = derive_profile(measured, box.change, created="").profile
    prov = replace(
        p.provenance,
        kind="datasheet",
        machine=box.machine,
        tool_version="kttune datasheet",
        command="python -m kttune.hw.datasheet",
    )
    return replace(p, provenance=prov)


def main() -> None:
    from pathlib import Path

    from kttune.hw.profile import save_profile
    from kttune.hw.registry import load_shipped

    root = Path(__file__).resolve().parents[2] / "profiles"
    for box in BOXES:
        out = save_profile(datasheet_profile(box, load_shipped(box.measured)), root / f"{box.name}.json")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
