"""Finding a hardware profile: a path, a shipped profile's name, or by default the profile
`kttune probe` cached for this machine (CPU curves measured here) completed with the GPU curves of
the default shipped profile when this machine's own GPU curves are missing."""

from __future__ import annotations

import difflib
from dataclasses import replace
from importlib import resources
from pathlib import Path

from kttune.bounds import loads_json
from kttune.errors import UserError
from kttune.hw.curve_kinds import KINDS
from kttune.hw.fingerprint import fingerprint, legacy_fingerprint
from kttune.hw.profile import HardwareProfile, Inventory, Provenance, load_profile, profile_from_dict
from kttune.paths import profile_cache_path

# The shipped profile used when nothing else is given; measured profiles come first.
DEFAULT_SHIPPED = ("h200-pcie5-xeon-amx-16c", "datasheet-h200-pcie5-xeon-amx-16c")
# Kinds a profile measured without a GPU takes from the shipped one, and the kt-kernel kinds every
# measured profile holds (rows of the curve-kind table).
GPU_KINDS = tuple(k for k, row in KINDS.items() if row.measures_gpu)
CPU_KINDS = tuple(k for k, row in KINDS.items() if row.derive == "cpu_threads")


def shipped_names() -> list[str]:
    root = resources.files("kttune.profiles")
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


def load_shipped(name: str) -> HardwareProfile:
    f = resources.files("kttune.profiles") / f"{name}.json"
    origin = f"shipped profile {name!r}"
    return profile_from_dict(loads_json(f.read_text(), origin, "reinstall kttune", nan_as_null=True), origin=origin)


def default_shipped_name() -> str:
    names = set(shipped_names())
    for n in DEFAULT_SHIPPED:
        if n in names:
            return n
    raise UserError(
        "no shipped hardware profile found", "reinstall kttune, or pass {profile} FILE", params=("profile",)
    )


def resolve_profile(arg: str | None, this_machine: Inventory | None) -> HardwareProfile:
    """`--profile` value -> profile. None: the cached probe of the machine `this_machine` describes
    (the caller inventories it; the data layer never does) merged with the default shipped
    profile's GPU parts, or the default shipped profile if that machine was never probed or
    `this_machine` is None."""
    return resolve_named_profile(arg, this_machine)[0]


def resolve_named_profile(arg: str | None, this_machine: Inventory | None) -> tuple[HardwareProfile, str | None]:
    """`resolve_profile`, and the name a user knows the profile by, for the words of a message: the
    shipped name, the file's name, or None for this machine's own `kttune probe` profile."""
    if arg:
        if Path(arg).exists() or arg.endswith(".json") or "/" in arg:
            return load_profile(arg), Path(arg).name
        if arg in shipped_names():
            return load_shipped(arg), arg
        close = difflib.get_close_matches(arg, shipped_names(), n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UserError(f"no profile named {arg!r}", f"{hint}pass a file, or one of: {', '.join(shipped_names())}")
    name = default_shipped_name()
    shipped = load_shipped(name)
    cached = cached_profile_for_this_machine(this_machine)
    if cached is None:
        return shipped, name
    return complete_with(cached, shipped), None


def cached_profile_for_this_machine(this_machine: Inventory | None) -> HardwareProfile | None:
    """The profile `kttune probe` wrote for the fingerprint of `this_machine`, if any."""
    if this_machine is None:
        return None
    path = profile_cache_path(fingerprint(this_machine))
    legacy = legacy_fingerprint(this_machine)
    if not path.is_file() and legacy is not None:
        path = profile_cache_path(legacy)  # probed before kttune read the CPUID numbers: still this machine's
    if not path.is_file():
        return None
    try:
        return load_profile(path)
    except UserError as e:
        raise UserError(
            f"this machine's cached profile is unusable: {e.problem}",
            f"re-run `kttune probe --fresh` to measure it again, or delete {path}",
        ) from None


def complete_with(measured: HardwareProfile, base: HardwareProfile) -> HardwareProfile:
    """`measured` with each GPU curve kind it lacks taken from `base`, and provenance saying so."""
    missing = [k for k in GPU_KINDS if not measured.has(k) and base.has(k)]
    if not missing:
        return measured
    extra = tuple(c for c in base.curves if c.kind in missing)
    prov = measured.provenance
    merged = Provenance(
        kind="mixed" if base.provenance.kind != prov.kind else prov.kind,
        machine=prov.machine,
        created=prov.created,
        tool_version=prov.tool_version,
        command=prov.command,
        notes=prov.notes
        + (
            f"{', '.join(missing)} curves taken from {base.provenance.kind} profile "
            f"'{base.provenance.machine}' (this machine's GPU parts were not measured)",
        ),
        sources=prov.sources + (base.provenance.machine,),
        host_uptime_s=prov.host_uptime_s,
    )
    return replace(measured, curves=measured.curves + extra, provenance=merged)
