"""`kttune probe` and `kttune profile show`: parse, call kttune.app.probe / kttune.app.show_profile,
render (kttune.emit.probe_report). Registered by `kttune.cli` when this module is present."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kttune import bounds
from kttune.cli.bounds import bounded
from kttune.cli.options import Json, Report
from kttune.errors import UserError


# ---- option parsing ----------------------------------------------------------------------------


def _parse_threads(values: Optional[list[str]]) -> tuple[int, ...]:
    from kttune.app.resolve import words

    out = []
    for v in words(values):
        try:
            n = int(v)
        except ValueError:
            raise UserError(
                f"--threads {v!r} is not a whole number", "pass thread counts like --threads 15,16"
            ) from None
        cpus = _logical_cpus()
        if not 1 <= n <= cpus:
            raise UserError(
                f"--threads {n} is outside 1..{cpus}, the logical CPUs of this machine",
                f"pass thread counts from 1 to {cpus}, e.g. --threads {max(1, cpus - 1)},{cpus}",
            )
        out.append(n)
    return tuple(sorted(set(out)))


def _logical_cpus() -> int:
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# ---- commands ------------------------------------------------------------------------------------


def probe(
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="Reduced probe: one small expert shape, tokens up to 1,024, kt-kernel "
            "thread counts cores-5 and cores-3 (as the full probe's cores-5, -3, "
            "-1), the layerwise pipeline over at most 2 GiB of each layer. About "
            "a minute (docs/probe.md).",
        ),
    ] = False,
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model",
            help="Measure this model's expert shape (catalog name or model "
            "directory) instead of representative shapes.",
        ),
    ] = None,
    methods: Annotated[
        Optional[list[str]],
        typer.Option(
            "--methods",
            help="KT methods to measure, comma-separated or "
            "repeated (default: all the host's kt-kernel "
            "runs of AMXINT4, AMXINT8, BF16, FP8, FP8_PERCHANNEL, RAWINT4, and with "
            "--model also the model's own method where it is MXFP4 or MXFP8; those two "
            "can be asked for by name). With "
            "--model, the GPU pipeline streams the layer in each of them that has a "
            "layerwise path (else in the model's default method).",
        ),
    ] = None,
    threads: Annotated[
        Optional[list[str]],
        typer.Option(
            "--threads",
            help="CPU worker thread counts (--kt-cpuinfer), "
            "comma-separated or repeated. Default: a series "
            "that includes cores-1 and cores.",
        ),
    ] = None,
    max_tokens: Annotated[
        Optional[int],
        bounded(
            "--max-tokens",
            rule=bounds.FORWARD_TOKENS,
            help="Largest token count of the CPU MoE curves (the largest chunk). Default 1,024 with --quick, else 8192.",
        ),
    ] = None,
    out: Annotated[
        Optional[Path],
        typer.Option(
            "--out",
            help="Also write the profile (JSON) to this file. It is always "
            "cached by fingerprint for `kttune search`; curves of the "
            "cached profile that this run does not re-measure are kept "
            "(see --fresh).",
        ),
    ] = None,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh", help="Do not keep curves of this machine's cached profile that this run does not re-measure."
        ),
    ] = False,
    cpu_only: Annotated[
        bool, typer.Option("--cpu-only", help="Skip the GPU probes (CPU expert kernels, stage A and host RAM only).")
    ] = False,
    host_ram: Annotated[
        Optional[bool],
        typer.Option(
            "--host-ram/--skip-host-ram",
            help="Run or skip the host RAM step "
            "(kt-kernel's reserved and resident RAM against max_len, one fresh "
            "process per point). Default: run it in a full probe, leave it out of "
            "--quick (docs/probe.md).",
        ),
    ] = None,
    shape_law: Annotated[
        Optional[bool],
        typer.Option(
            "--shape-law/--skip-shape-law",
            help="Measure or skip kt-kernel's cost per output element per method (five expert shapes "
            "timed in shared rounds), which carries the CPU curves to expert shapes not measured "
            "(docs/cost-model.md#the-expert-shape-law). Default: in a full probe without --model.",
        ),
    ] = None,
    repeat: Annotated[
        int,
        bounded(
            "--repeat",
            rule=bounds.PROBE_REPEATS,
            help="Probe this many times, back to back, and keep each point's median over the probes, its "
            "interval their span: one probe takes one reading of a host whose memory bandwidth can move 2x "
            "within minutes (docs/probe.md#repeated-probes).",
        ),
    ] = 1,
    as_json: Json = False,
    report_dir: Report = None,
) -> None:
    """Measure this machine (inventory, kt-kernel CPU MoE per method/tokens/threads, stage A writes,
    kt-kernel's host RAM against max_len, GPU probes where present) and save a hardware profile."""
    from rich.console import Console

    from kttune import app
    from kttune.emit.progress import ProbeProgress

    app.check_report_extras(report_dir)
    opts = app.probe_options(
        quick=quick,
        model=app.model_spec(model) if model else None,
        methods=tuple(_split(methods)),
        threads=_parse_threads(threads),
        max_tokens=max_tokens,
        out=out,
        gpu=not cpu_only,
        host_ram=host_ram,
        shape_law=shape_law,
        merge_cached=not fresh,
        command="kttune " + " ".join(sys.argv[1:]) if sys.argv and sys.argv[0].endswith("kttune") else "kttune probe",
    )
    err = Console(stderr=True)
    with ProbeProgress(err) as rep:
        outcome = app.probe(opts, rep, repeat=repeat)
    _show_probe(outcome, as_json, report_dir)


def _show_probe(outcome, as_json: bool, report_dir=None) -> None:
    """Print a probe's profile (tables or --json) and where it was written."""
    from rich.console import Console

    from kttune import app
    from kttune.emit.probe_report import render_profile

    profile = outcome.profile
    if report_dir:
        from kttune.cli.report import print_written

        print_written(app.write_command_report(report_dir, profiles=[outcome.to_dict()]), stderr=True)
    if as_json:
        from kttune.cli.common import emit_json

        emit_json(outcome.to_dict())
        _native_output_to_stderr()  # in-process callers; the console script's fd 1 is already stderr
    else:
        out_console = Console()
        render_profile(profile, out_console, inventory=False)
        for path in outcome.written:
            out_console.print(f"wrote {path}", markup=False, highlight=False)
        out_console.print(f"machine: {profile.provenance.machine}; fingerprint {profile.fingerprint}")
    if outcome.problems:
        raise UserError(outcome.problems[0], "pass --out a writable file path next time")


def _split(values: Optional[list[str]]) -> list[str]:
    from kttune.app.resolve import words

    return list(words(values))


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


def profile_show(
    profile: Annotated[
        Optional[str],
        typer.Argument(
            help="A profile file, a shipped profile name, or a fingerprint in the "
            "cache. Default: the profile `kttune search` would use here."
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """Print a hardware profile: inventory, provenance and its curves as tables."""
    from rich.console import Console

    from kttune import app
    from kttune.cli.common import emit_json
    from kttune.emit.probe_report import render_profile

    shown = app.show_profile(profile)
    if as_json:
        emit_json(shown.to_dict())
        return
    render_profile(shown.profile, Console())


def profile_merge(
    probes: Annotated[
        list[str],
        typer.Argument(help="Two or more profiles `kttune probe` wrote on one machine (files).", show_default=False),
    ],
    out: Annotated[str, typer.Option("--out", "-o", help="Where to write the merged profile (JSON).")],
    as_json: Json = False,
) -> None:
    """Merge probes of one machine taken at other times: each point the median of the probes that
    measured it, its interval their span (docs/probe.md#repeated-probes)."""
    from kttune import app

    _show_probe(app.merge_probes(probes, out), as_json)


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)
    profile_app = typer.Typer(help="Hardware profiles: show what was measured.", no_args_is_help=True)
    profile_app.command("show")(profile_show)
    profile_app.command("merge")(profile_merge)
    app.add_typer(profile_app, name="profile")
