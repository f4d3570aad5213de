"""`kttune probe` and `kttune profile show`: thin CLI over `kttune.probes.run.run_probe` and the
profile loaders. Registered by `kttune.cli` when this module is present."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from kttune import bounds
from kttune.cli_bounds import bounded
from kttune.cli_report import report_option
from kttune.errors import UserError
from kttune.hw.profile import HardwareProfile, profile_to_dict


# ---- option parsing ----------------------------------------------------------------------------


def _split(values: Optional[list[str]]) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out += [x.strip() for x in v.split(",") if x.strip()]
    return out


def _parse_threads(values: Optional[list[str]]) -> tuple[int, ...]:
    out = []
    for v in _split(values):
        try:
            n = int(v)
        except ValueError:
            raise UserError(f"--threads {v!r} is not a whole number", "pass thread counts like --threads 15,16") from None
        cpus = _logical_cpus()
        if not 1 <= n <= cpus:
            raise UserError(f"--threads {n} is outside 1..{cpus}, the logical CPUs of this machine",
                            f"pass thread counts from 1 to {cpus}, e.g. --threads {max(1, cpus - 1)},{cpus}")
        out.append(n)
    return tuple(sorted(set(out)))


def _logical_cpus() -> int:
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _load_model(name: str) -> Any:
    try:
        from kttune.spec.loader import load_model
    except ImportError:
        raise UserError("--model needs kttune.spec.loader, which this build lacks", "probe without --model") from None
    return load_model(name)


# ---- commands ------------------------------------------------------------------------------------


def probe(
    quick: bool = typer.Option(False, "--quick", help="Reduced probe: one small expert shape, tokens up to 256, kt-kernel thread counts cores-5 and cores-3 (as the full probe's cores-5, -3, -1), the layerwise pipeline over at most 2 GiB of each layer. Under a minute."),
    model: Optional[str] = typer.Option(None, "--model", help="Measure this model's expert shape (catalog name or model directory) instead of representative shapes."),
    methods: Optional[list[str]] = typer.Option(None, "--methods", help="KT methods to measure, comma-separated or repeated (default: all the host's kt-kernel runs: AMXINT4, AMXINT8, BF16, FP8, RAWINT4)."),
    threads: Optional[list[str]] = typer.Option(None, "--threads", help="CPU worker thread counts (--kt-cpuinfer), comma-separated or repeated. Default: a series that includes cores-1 and cores."),
    max_tokens: Optional[int] = bounded(None, "--max-tokens", rule=bounds.FORWARD_TOKENS, help="Largest token count of the CPU MoE curves (the largest chunk). Default 256 with --quick, else 8192."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write the profile (JSON) to this file. It is always cached by fingerprint for `kttune search`; curves of the cached profile that this run does not re-measure are kept (see --fresh)."),
    fresh: bool = typer.Option(False, "--fresh", help="Do not keep curves of this machine's cached profile that this run does not re-measure."),
    cpu_only: bool = typer.Option(False, "--cpu-only", help="Skip the GPU probes (CPU expert kernels, stage A and host RAM only)."),
    host_ram: Optional[bool] = typer.Option(None, "--host-ram/--skip-host-ram", help="Run or skip the host RAM step (kt-kernel's reserved and resident RAM against max_len, one fresh process per point). Default: run it in a full probe, leave it out of --quick (which stays under a minute)."),
    as_json: bool = typer.Option(False, "--json", help="Print the profile as JSON on stdout instead of tables."),
    report_dir: Optional[Path] = report_option(),
) -> None:
    """Measure this machine (inventory, kt-kernel CPU MoE per method/tokens/threads, stage A writes,
    kt-kernel's host RAM against max_len, GPU probes where present) and save a hardware profile."""
    from kttune.cli_report import check_report_extras
    from kttune.extras import require

    require("torch", "`kttune probe`")
    if host_ram:  # asked for explicitly: it measures kt-kernel's own allocations, no fallback
        require("kt_kernel", "`kttune probe --host-ram`")
    check_report_extras(report_dir)
    from rich.console import Console

    from kttune.emit.probe_report import render_profile
    from kttune.emit.progress import ProbeProgress
    from kttune.probes.run import ProbeOptions, profile_paths, run_probe

    from dataclasses import replace

    from kttune.hw.profile import save_profile_with_fallback
    from kttune.paths import cache_dir

    if out is not None:  # refused before anything is measured
        from kttune.api import this_machine_inventory
        from kttune.documents import check_output_file, profile_output
        from kttune.hw.fingerprint import fingerprint

        inv = this_machine_inventory()
        out = check_output_file(out, profile_output("kttune probe", fingerprint(inv) if inv else "", derived=False))
    spec = _load_model(model) if model else None
    opts = ProbeOptions(
        quick=quick,
        model=spec,
        methods=tuple(_split(methods)),
        threads=_parse_threads(threads),
        max_tokens=max_tokens,
        out=out,
        gpu=not cpu_only,
        host_ram=host_ram,
        merge_cached=not fresh,
        command="kttune " + " ".join(sys.argv[1:]) if sys.argv and sys.argv[0].endswith("kttune") else "kttune probe",
    )
    from kttune.kernels.kt_ext import quiet_stdout

    err = Console(stderr=True)
    # Native code (kt-kernel, CUDA libraries) prints to file descriptor 1: keep stdout for the
    # tables and --json alone.
    with ProbeProgress(err) as rep, quiet_stdout(to_stderr=True):
        # run_probe measures; the profile is saved here so that a path that refuses it (a full
        # disk, a read-only cache) never loses the measurement: it falls back to another place.
        profile = run_probe(replace(opts, out=None, write_cache=False), rep)
    written, problems = save_profile_with_fallback(profile, profile_paths(opts, profile), [cache_dir() / "profiles"])
    if report_dir:
        from kttune.cli_report import write_command_report

        write_command_report(report_dir, True, profiles=[profile_to_dict(profile)])
    if as_json:
        from kttune.cli_common import emit_json

        emit_json(profile_to_dict(profile))
        _native_output_to_stderr()  # in-process callers; the console script's fd 1 is already stderr
    else:
        out_console = Console()
        render_profile(profile, out_console, inventory=False)
        for path in written:
            out_console.print(f"wrote {path}", markup=False, highlight=False)
        out_console.print(f"machine: {profile.provenance.machine}; fingerprint {profile.fingerprint}")
    if problems:
        raise UserError(problems[0], "pass --out a writable file path next time")


def _native_output_to_stderr() -> None:
    """kt-kernel keeps its worker pools for the process (kttune/kernels/kt_pool.py) and each says
    goodbye on file descriptor 1 when the interpreter exits: after the JSON is out, point fd 1 at
    stderr so stdout holds the JSON alone."""
    import os

    if sys.stdout is not sys.__stdout__ or sys.stderr is not sys.__stderr__:
        return  # output captured (tests, an embedding program): file descriptors are not ours
    sys.stdout.flush()
    try:
        os.dup2(sys.stderr.fileno(), 1)
    except (OSError, ValueError, AttributeError):  # no real file descriptors (captured streams)
        pass


def _resolve_profile(arg: Optional[str]) -> HardwareProfile:
    from kttune.hw.profile import load_profile
    from kttune.paths import profile_cache_path

    if arg and Path(arg).expanduser().is_file():
        return load_profile(Path(arg).expanduser())
    if arg and profile_cache_path(arg).is_file():
        return load_profile(profile_cache_path(arg))
    try:
        from kttune.hw.registry import resolve_profile
    except ImportError:
        resolve_profile = None
    if resolve_profile is not None:
        from kttune.api import this_machine_inventory

        return resolve_profile(arg, this_machine_inventory())
    if arg:
        raise UserError(f"no profile {arg!r}", "pass a file written by `kttune probe`")
    from kttune.hw.fingerprint import fingerprint
    from kttune.probes.inventory import collect_inventory

    path = profile_cache_path(fingerprint(collect_inventory()))
    if not path.is_file():
        raise UserError("this machine has no cached profile", "run `kttune probe --quick` first, or pass a profile file")
    return load_profile(path)


def profile_show(
    profile: Optional[str] = typer.Argument(None, help="A profile file, a shipped profile name, or a fingerprint in the cache. Default: the profile `kttune search` would use here."),
    as_json: bool = typer.Option(False, "--json", help="Print the profile as JSON."),
) -> None:
    """Print a hardware profile: inventory, provenance and its curves as tables."""
    from rich.console import Console

    from kttune.emit.probe_report import render_profile

    p = _resolve_profile(profile)
    if as_json:
        typer.echo(json.dumps(profile_to_dict(p), indent=1))
        return
    render_profile(p, Console())


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)
    profile_app = typer.Typer(help="Hardware profiles: show what was measured.", no_args_is_help=True)
    profile_app.command("show")(profile_show)
    app.add_typer(profile_app, name="profile")
