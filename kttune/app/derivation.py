"""`kttune profile derive`: a profile for a machine that was not measured, from one that was
(other GPUs from the built-in table, another GPU count, another CPU; kttune.hw.derive)."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path

from kttune.errors import UserError
from kttune.schema import enveloped


@dataclass(frozen=True)
class DeriveOutcome:
    path: Path
    derived: object  # kttune.hw.derive.Derived

    def to_dict(self) -> dict:
        d = self.derived
        return enveloped(
            "derive",
            {
                "out": str(self.path),
                "machine": d.profile.provenance.machine,
                "kind": d.profile.provenance.kind,
                "labels": d.labels,
                "assumptions": list(d.assumptions),
            },
        )


def derive(
    source: str,
    out: str | Path,
    gpu: str | None = None,
    gpus: int | None = None,
    link: str | None = None,
    cpu_cores: int | None = None,
    cpu_isa: str | None = None,
    numa_nodes: int = 1,
    mem_channels: int | None = None,
    mem_mts: int = 4800,
    ram_gib: float | None = None,
    cpu_vendor: str | None = None,
) -> DeriveOutcome:
    """Derive from `source` (a profile file or shipped name) the profile of the machine the other
    values describe and write it to `out`; each curve is labelled measured, scaled or datasheet."""
    from kttune.documents import check_output_file, profile_output
    from kttune.hw.derive import Change, cpu_target, derive_profile
    from kttune.hw.profile import save_profile
    from kttune.hw.registry import resolve_profile

    if link is not None and link not in ("pcie", "nvlink"):
        raise UserError(f"unknown {{link}} {link!r}", "use pcie or nvlink", params=("link",))
    if cpu_cores is None and (cpu_isa or cpu_vendor or mem_channels or ram_gib or numa_nodes != 1):
        raise UserError(
            "CPU options given without {cpu_cores}",
            "pass {cpu_cores} N with the other CPU options",
            params=("cpu_cores",),
        )
    if gpu is None and gpus is None and cpu_cores is None:
        raise UserError("nothing to change", "pass {gpu}, {gpus} or {cpu_cores}", params=("gpu", "gpus", "cpu_cores"))
    out_path = check_output_file(
        out,
        profile_output("kttune profile derive", "", derived=True),
        inputs=[(source, "measured profile")],
        flag="--out",
    )
    measured = resolve_profile(source, None)  # a file or a shipped name: no inventory needed
    cpu = (
        cpu_target(cpu_cores, cpu_isa, numa_nodes, mem_channels, mem_mts, ram_gib, vendor=cpu_vendor)
        if cpu_cores is not None
        else None
    )
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    d = derive_profile(measured, Change(gpu=gpu, n_gpus=gpus, cpu=cpu, link=link), created=created)
    return DeriveOutcome(save_profile(d.profile, out_path), d)
