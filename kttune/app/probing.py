"""`kttune probe`: measure this machine (kttune.probes.run) and save the hardware profile, never
losing a measurement to a path that refuses it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kttune.hw.profile import HardwareProfile, profile_to_dict


@dataclass(frozen=True)
class ProbeOutcome:
    profile: HardwareProfile
    written: tuple[Path, ...] = ()
    problems: tuple[str, ...] = field(default_factory=tuple)  # paths that refused it, and where it went instead

    def to_dict(self) -> dict:
        return profile_to_dict(self.profile)


def probe_options(**fields):
    """A kttune.probes.run.ProbeOptions (quick, model, methods, threads, max_tokens, out, gpu,
    host_ram, shape_law, merge_cached, command). What the probe needs (torch; kt-kernel for an
    asked-for host RAM step or expert-shape law) is checked first: one line naming the extra."""
    from kttune.extras import require

    require("torch", "`kttune probe`")
    if fields.get("host_ram"):  # asked for explicitly: it measures kt-kernel's own allocations, no fallback
        require("kt_kernel", "`kttune probe --host-ram`")
    if fields.get("shape_law"):  # kt-kernel's own classes: the torch fallback is no build a server runs
        require("kt_kernel", "`kttune probe --shape-law`")
    from kttune.probes.run import ProbeOptions

    return ProbeOptions(**fields)


def check_probe_out(out: str | Path) -> Path:
    """`out` refused (one line) before anything is measured when it holds anything but a measured
    profile of this machine (kttune.documents)."""
    from kttune.app.inputs import this_machine_inventory
    from kttune.documents import check_output_file, profile_output
    from kttune.hw.fingerprint import fingerprint

    inv = this_machine_inventory()
    return check_output_file(out, profile_output("kttune probe", fingerprint(inv) if inv else "", derived=False))


def probe(options, reporter: Any = None) -> ProbeOutcome:
    """Measure (native output kept off stdout), then save the profile to `options.out` and the
    cache; a path that refuses it (a full disk, a read-only cache) falls back to another place."""
    from kttune.hw.profile import save_profile_with_fallback
    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.paths import cache_dir
    from kttune.probes.run import profile_paths, run_probe

    if options.out is not None:
        options = replace(options, out=check_probe_out(options.out))
    # Native code (kt-kernel, CUDA libraries) prints to file descriptor 1: keep stdout for the
    # tables and --json alone.
    with quiet_stdout(to_stderr=True):
        profile = run_probe(replace(options, out=None, write_cache=False), reporter)
    written, problems = save_profile_with_fallback(profile, profile_paths(options, profile), [cache_dir() / "profiles"])
    return ProbeOutcome(profile, tuple(written), tuple(problems))
