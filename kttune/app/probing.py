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


def probe(options, reporter: Any = None, repeat: int = 1) -> ProbeOutcome:
    """Measure (native output kept off stdout), then save the profile to `options.out` and the
    cache; a path that refuses it (a full disk, a read-only cache) falls back to another place.
    With `repeat` > 1 the probe runs that many times, back to back, and the profile saved is their
    point-by-point median (kttune.hw.probe_median); Ctrl-C after the first saves what was measured."""
    from kttune.hw.profile import save_profile_with_fallback
    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.paths import cache_dir
    from kttune.probes.common import NullReporter
    from kttune.probes.run import profile_paths, run_probe

    if options.out is not None:
        options = replace(options, out=check_probe_out(options.out))
    reporter = reporter or NullReporter()
    runs: list[HardwareProfile] = []
    said: set[str] = set()  # the notes the repeats have said
    interrupted = None
    # Native code (kt-kernel, CUDA libraries) prints to file descriptor 1: keep stdout for the
    # tables and --json alone.
    with quiet_stdout(to_stderr=True):
        one = replace(options, out=None, write_cache=False, merge_cached=options.merge_cached and repeat == 1)
        try:
            for k in range(repeat):
                runs.append(run_probe(one, _OneOfRepeats(reporter, k, repeat, said) if repeat > 1 else reporter))
        except KeyboardInterrupt as e:
            if not runs:
                raise
            interrupted = e
    profile = runs[0] if len(runs) == 1 else _median(runs, options, reporter)
    if interrupted is not None:
        profile = replace(
            profile,
            provenance=replace(
                profile.provenance,
                notes=(f"interrupted after {len(runs)} of {repeat} probes",) + profile.provenance.notes,
            ),
        )
    written, problems = save_profile_with_fallback(profile, profile_paths(options, profile), [cache_dir() / "profiles"])
    if interrupted is not None:
        reporter.note(
            f"interrupted: saved the {len(runs)} probes of {repeat} measured to {', '.join(map(str, written))}"
        )
        raise interrupted
    return ProbeOutcome(profile, tuple(written), tuple(problems))


def _median(runs: list[HardwareProfile], options, reporter: Any) -> HardwareProfile:
    """The repeats' median, after the cached profile's curves they did not measure (`merge_cached`)."""
    import datetime as _dt

    from kttune.hw.probe_median import median_of_probes
    from kttune.probes.common import NullReporter
    from kttune.probes.run import with_cached_curves

    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    med = median_of_probes(runs, created=created, command=options.command or runs[-1].provenance.command)
    if not options.merge_cached:
        return med
    notes = NullReporter()
    curves = with_cached_curves(med.fingerprint, list(med.curves), notes)
    for n in notes.notes:
        reporter.note(n)
    prov = replace(med.provenance, notes=med.provenance.notes + tuple(notes.notes))
    return replace(med, curves=tuple(curves), provenance=prov)


class _OneOfRepeats:
    """The reporter of probe `k` of `n` run back to back: one bar over all of them, each note said once."""

    def __init__(self, inner: Any, k: int, n: int, said: set[str]) -> None:
        self.inner, self.k, self.n, self.said = inner, k, n, said

    def plan(self, total_steps: int, title: str) -> None:
        self.inner.plan(total_steps * self.n, f"{title}, {self.k + 1} of {self.n}")

    def step(self, description: str, advance: float = 1.0) -> None:
        self.inner.step(description, advance)

    def note(self, message: str) -> None:
        if message not in self.said:
            self.said.add(message)
            self.inner.note(message)


def merge_probes(sources: list[str], out: str | Path) -> ProbeOutcome:
    """`kttune profile merge`: the point-by-point median of probes of one machine taken at other
    times (profile files), written to `out`."""
    import datetime as _dt

    from kttune.documents import check_output_file, profile_output
    from kttune.hw.probe_median import median_of_probes
    from kttune.hw.profile import load_profile, save_profile

    profiles = [load_profile(s) for s in sources]
    fp = profiles[0].fingerprint if profiles else ""
    out_path = check_output_file(
        out, profile_output("kttune profile merge", fp, derived=False), inputs=[(s, "probe") for s in sources]
    )
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    command = "kttune profile merge " + " ".join(str(s) for s in sources)
    med = median_of_probes(profiles, created=created, command=command, names=[Path(s).name for s in sources])
    return ProbeOutcome(med, (save_profile(med, out_path),))
