"""`kttune models`, `kttune profiles`, `kttune workloads`, `kttune profile show` and the GPU table
(`kttune profile derive --gpu list`): what kttune knows, as result objects with `to_dict()`. The
catalog and workload listings stay JSON lists, as they always were (a list has no `schema` key)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from kttune.app.inputs import this_machine_inventory
from kttune.hw.profile import HardwareProfile, profile_to_dict
from kttune.schema import enveloped
from kttune.search.workload import Workload, load_workload, preset_names
from kttune.spec.catalog import CatalogEntry, catalog_entries


@dataclass(frozen=True)
class ModelList:
    entries: tuple[CatalogEntry, ...]

    def to_dict(self) -> list[dict]:
        """`kttune models --json` (a list)."""
        return [asdict(e) for e in self.entries]


@dataclass(frozen=True)
class WorkloadList:
    workloads: tuple[Workload, ...]

    def to_dict(self) -> list[dict]:
        """`kttune workloads --json` (a list)."""
        return [w.to_dict() for w in self.workloads]


@dataclass(frozen=True)
class ShippedProfile:
    name: str
    kind: str  # provenance kind: measured, datasheet, mixed
    machine: str
    default: bool
    curves: int


@dataclass(frozen=True)
class ProfileListing:
    """`kttune profiles`: the shipped profiles and this machine's probed one, if any."""

    shipped: tuple[ShippedProfile, ...]
    this_machine: str | None  # fingerprint of this machine's cached profile

    def to_dict(self) -> dict:
        return enveloped("profiles", {"shipped": [asdict(r) for r in self.shipped], "this_machine": self.this_machine})


@dataclass(frozen=True)
class ProfileDocument:
    """A hardware profile as a command returns it (`kttune profile show`, `kttune probe`)."""

    profile: HardwareProfile

    def to_dict(self) -> dict:
        return profile_to_dict(self.profile)


def list_models() -> ModelList:
    return ModelList(tuple(catalog_entries()))


def list_workloads() -> WorkloadList:
    return WorkloadList(tuple(load_workload(n) for n in preset_names()))


def list_profiles() -> ProfileListing:
    from kttune.hw.registry import cached_profile_for_this_machine, default_shipped_name, load_shipped, shipped_names

    default = default_shipped_name()
    rows = []
    for n in shipped_names():
        p = load_shipped(n)
        rows.append(ShippedProfile(n, p.provenance.kind, p.provenance.machine, n == default, len(p.curves)))
    cached = cached_profile_for_this_machine(this_machine_inventory())
    return ProfileListing(tuple(rows), cached.fingerprint if cached else None)


def show_profile(name: str | None = None) -> ProfileDocument:
    """A profile file, a shipped name, or a fingerprint in the cache; None: the profile
    `kttune search` would use here."""
    from kttune.hw.profile import load_profile
    from kttune.hw.registry import resolve_profile
    from kttune.paths import profile_cache_path

    if name and Path(name).expanduser().is_file():
        return ProfileDocument(load_profile(Path(name).expanduser()))
    if name and profile_cache_path(name).is_file():
        return ProfileDocument(load_profile(profile_cache_path(name)))
    return ProfileDocument(resolve_profile(name, this_machine_inventory()))


def gpu_table() -> tuple:
    """The GPUs kttune can derive a profile for (kttune.hw.gpu_table)."""
    from kttune.hw.gpu_table import GPUS

    return tuple(GPUS.values())


def model_spec(name: str):
    """The ModelSpec of a catalog name or model directory (for `kttune probe --model`)."""
    from kttune.spec.loader import load_model

    return load_model(name)
