"""`kttune probe` and `kttune profile show`: thin CLI over `kttune.probes.run.run_probe` and the
profile loaders. Registered by `kttune.cli` when this module is present."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from kttune.errors import UserError
from kttune.hw.profile import Curve, HardwareProfile, profile_to_dict

GIB = 1024**3


# ---- progress --------------------------------------------------------------------------------


class RichReporter:
    """Progress bar with ETA on stderr (stdout stays clean for tables and --json)."""

    def __init__(self, console: Any) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = console
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.fields[title]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
            console=console,
            transient=False,
        )
        self.task = None

    def __enter__(self) -> "RichReporter":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def plan(self, total_steps: int, title: str) -> None:
        if self.task is None:
            self.task = self.progress.add_task("", total=total_steps, title=title)
        else:
            self.progress.update(self.task, total=total_steps, title=title)

    def step(self, description: str, advance: float = 1.0) -> None:
        if self.task is None:
            self.plan(0, "probe")
        self.progress.update(self.task, advance=advance, description=description)

    def note(self, message: str) -> None:
        self.progress.console.print(f"[yellow]note:[/] {message}", highlight=False)


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
        if n < 1:
            raise UserError(f"--threads {n} is not positive", "pass thread counts of 1 or more")
        out.append(n)
    return tuple(sorted(set(out)))


def _load_model(name: str) -> Any:
    try:
        from kttune.spec.loader import load_model
    except ImportError:
        raise UserError("--model needs kttune.spec.loader, which this build lacks", "probe without --model") from None
    return load_model(name)


# ---- rendering -----------------------------------------------------------------------------------


def _fmt_bytes(n: float) -> str:
    for unit, div in (("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n:.0f} B"


def _fmt_ms(t: float) -> str:
    return f"{t:.3f}" if t < 1 else f"{t:.2f}" if t < 100 else f"{t:.0f}"


def cpu_moe_tables(curves: list[Curve]) -> list[Any]:
    """One pivot per expert shape: a row per (method, threads x pools), a column per token count,
    cells 'ms' over 'tokens/s'; the backend and kernel classes in the caption."""
    from rich.table import Table

    shapes: dict[tuple, list[Curve]] = {}
    for c in curves:
        p = c.params
        shapes.setdefault((p.get("hidden"), p.get("inter"), p.get("experts"), p.get("top_k")), []).append(c)
    tables = []
    for (h, i, e, k), cs in shapes.items():
        xs = sorted({int(p.x) for c in cs for p in c.points} | {int(s["x"]) for c in cs for s in c.skipped if s.get("x")})
        kernels = sorted({f"{c.backend} {c.params.get('kernel', '')}".strip() for c in cs})
        t = Table(
            title=f"CPU MoE layer forward, H={h} I={i} E={e} top-{k}: ms / tokens per s",
            caption="; ".join(kernels),
        )
        t.add_column("method", no_wrap=True)
        t.add_column("threads", no_wrap=True)
        for x in xs:
            t.add_column(f"{x}", justify="right", no_wrap=True)
        for c in sorted(cs, key=lambda c: (c.params.get("method", ""), c.params.get("threads", 0))):
            pts = {int(pt.x): pt for pt in c.points}
            skipped = {int(s["x"]) for s in c.skipped if s.get("x")}
            cells = []
            for x in xs:
                if x in pts:
                    ms = pts[x].t_ms
                    cells.append(f"{_fmt_ms(ms)}\n{x / ms * 1e3:,.0f}/s")
                else:
                    cells.append("skip" if x in skipped else "")
            pools = c.params.get("threadpools", 1)
            t.add_row(str(c.params.get("method")), f"{c.params.get('threads')}" + (f" ({pools} pools)" if pools > 1 else ""), *cells)
        tables.append(t)
    return tables


def stage_a_table(curves: list[Curve]) -> Any:
    from rich.table import Table

    t = Table(title="Stage A: write_weight_scale_to_buffer (per expert)")
    for col in ("method", "threads", "expert bytes", "ms", "GB/s", "slot"):
        t.add_column(col, justify="right" if col in ("expert bytes", "ms", "GB/s") else "left", no_wrap=True)
    for c in sorted(curves, key=lambda c: (c.params.get("method", ""), c.params.get("threads", 0))):
        for pt in c.points:
            slot = "pinned" if pt.extra.get("pinned") else "pageable"
            t.add_row(str(c.params.get("method")), str(c.params.get("threads")), _fmt_bytes(pt.x), _fmt_ms(pt.t_ms),
                      f"{pt.x / pt.t_ms / 1e6:.1f}", slot)
        for s in c.skipped:
            t.add_row(str(c.params.get("method")), str(c.params.get("threads")), _fmt_bytes(s.get("x") or 0), "skip", "", s["reason"])
    return t


def generic_table(kind: str, curves: list[Curve]) -> Any:
    from rich.table import Table

    t = Table(title=f"{kind} curves")
    for col in ("params", "backend", "x", "ms (p10-p90)"):
        t.add_column(col)
    for c in curves:
        params = ", ".join(f"{k}={v}" for k, v in c.params.items())
        for i, pt in enumerate(c.points):
            spread = f" ({_fmt_ms(pt.t_ms_p10)}-{_fmt_ms(pt.t_ms_p90)})" if pt.t_ms_p10 is not None and pt.t_ms_p90 is not None else ""
            t.add_row(params if i == 0 else "", c.backend if i == 0 else "", f"{pt.x:g} {c.x_unit}", _fmt_ms(pt.t_ms) + spread)
    return t


def inventory_table(p: HardwareProfile) -> Any:
    from rich.table import Table

    inv, cpu, sw = p.inventory, p.inventory.cpu, p.inventory.software
    t = Table(title=f"{p.provenance.kind} profile: {p.provenance.machine}", show_header=False)
    t.add_column("", style="bold")
    t.add_column("")
    t.add_row("fingerprint", p.fingerprint)
    t.add_row("created", f"{p.provenance.created} by {p.provenance.command or '?'} (kttune {p.provenance.tool_version or '?'})")
    t.add_row("CPU", f"{cpu.model} ({cpu.vendor}), {cpu.physical_cores} cores / {cpu.logical_cpus} CPUs, {cpu.sockets} socket(s)")
    t.add_row("NUMA", "; ".join(f"node {n.id}: {len(n.cpus)} CPUs, {_fmt_bytes(n.mem_total_bytes)}" for n in cpu.numa_nodes))
    t.add_row("ISA", " ".join(cpu.isa) or "-")
    t.add_row("RAM", f"{_fmt_bytes(cpu.ram_total_bytes)} total, {_fmt_bytes(cpu.ram_available_bytes)} available")
    if inv.gpus:
        for g in inv.gpus:
            link = f"PCIe Gen{g.pcie_gen}x{g.pcie_width} (max Gen{g.pcie_gen_max}x{g.pcie_width_max})"
            t.add_row(f"GPU {g.index}", f"{g.name}, {_fmt_bytes(g.vram_total_bytes)} ({_fmt_bytes(g.vram_free_bytes)} free), {link}, NUMA {g.numa_node}")
    else:
        t.add_row("GPU", "none" + (f" ({sw.nvml})" if sw.nvml else ""))
    t.add_row("software", f"python {sw.python}, torch {sw.torch} (cuda {sw.torch_cuda}), kt-kernel {sw.kt_kernel} ({sw.kt_cpu_variant}), "
              f"sglang {sw.sglang}{' (sglang-kt)' if sw.sglang_is_kt_fork else ''}, driver {sw.nvidia_driver} (CUDA {sw.cuda_driver})")
    t.add_row("timer", f"{p.timer.clock}, resolution {p.timer.resolution_ns or 0:.0f} ns, clocksource {p.timer.clocksource}")
    for n in p.provenance.notes:
        t.add_row("note", n)
    return t


def render_profile(p: HardwareProfile, console: Any, inventory: bool = True) -> None:
    if inventory:
        console.print(inventory_table(p))
    kinds: dict[str, list[Curve]] = {}
    for c in p.curves:
        kinds.setdefault(c.kind, []).append(c)
    for kind, cs in kinds.items():
        if kind == "cpu_moe":
            for t in cpu_moe_tables(cs):
                console.print(t)
        elif kind == "stage_a_write":
            console.print(stage_a_table(cs))
        else:
            console.print(generic_table(kind, cs))


# ---- commands ------------------------------------------------------------------------------------


def probe(
    quick: bool = typer.Option(False, "--quick", help="Reduced probe: one small expert shape, tokens up to 256, thread counts around the core count. Under a minute on 2 cores."),
    model: Optional[str] = typer.Option(None, "--model", help="Measure this model's expert shape (catalog name or model directory) instead of representative shapes."),
    methods: Optional[list[str]] = typer.Option(None, "--methods", help="KT methods to measure, comma-separated or repeated (default: all the host's kt-kernel runs: AMXINT4, AMXINT8, BF16, FP8, RAWINT4)."),
    threads: Optional[list[str]] = typer.Option(None, "--threads", help="CPU worker thread counts (--kt-cpuinfer), comma-separated or repeated. Default: a series that includes cores-1 and cores."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="Largest token count of the CPU MoE curves (the largest chunk). Default 256 with --quick, else 8192."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write the profile (JSON) to this file. It is always cached by fingerprint for `kttune search`; curves of the cached profile that this run does not re-measure are kept (see --fresh)."),
    fresh: bool = typer.Option(False, "--fresh", help="Do not keep curves of this machine's cached profile that this run does not re-measure."),
    cpu_only: bool = typer.Option(False, "--cpu-only", help="Skip the GPU probes (CPU expert kernels and stage A only)."),
    as_json: bool = typer.Option(False, "--json", help="Print the profile as JSON on stdout instead of tables."),
) -> None:
    """Measure this machine (inventory, kt-kernel CPU MoE per method/tokens/threads, stage A writes,
    GPU probes where present) and save a hardware profile."""
    from rich.console import Console

    from kttune.probes.run import ProbeOptions, profile_paths, run_probe

    spec = _load_model(model) if model else None
    opts = ProbeOptions(
        quick=quick,
        model=spec,
        methods=tuple(_split(methods)),
        threads=_parse_threads(threads),
        max_tokens=max_tokens,
        out=out,
        gpu=not cpu_only,
        merge_cached=not fresh,
        command="kttune " + " ".join(sys.argv[1:]) if sys.argv and sys.argv[0].endswith("kttune") else "kttune probe",
    )
    from kttune.kernels.kt_ext import quiet_stdout

    err = Console(stderr=True)
    # Native code (kt-kernel, CUDA libraries) prints to file descriptor 1: keep stdout for the
    # tables and --json alone.
    with RichReporter(err) as rep, quiet_stdout(to_stderr=True):
        profile = run_probe(opts, rep)
    if as_json:
        typer.echo(json.dumps(profile_to_dict(profile), indent=1))
        return
    out_console = Console()
    render_profile(profile, out_console, inventory=False)
    for path in profile_paths(opts, profile):
        out_console.print(f"wrote {path}")
    out_console.print(f"machine: {profile.provenance.machine}; fingerprint {profile.fingerprint}")


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
        return resolve_profile(arg)
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
