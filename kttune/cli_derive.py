"""`kttune profile derive`: a profile for a machine that was not measured, from one that was
(other GPUs from the built-in table, another GPU count, another CPU). Thin CLI over
`kttune.hw.derive.derive_profile`. Registered by `kttune.cli` on the `profile` group."""

from __future__ import annotations

import datetime as _dt
import json
from typing import Optional

import typer

from kttune import bounds
from kttune.cli_bounds import bounded
from kttune.errors import UserError


def derive(
    source: str = typer.Argument(..., help="The measured profile: a file or a shipped name (`kttune profiles`)."),
    out: str = typer.Option(..., "--out", "-o", help="Where to write the derived profile (JSON)."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="Target GPU from the built-in table (`--gpu list` lists them)."),
    gpus: Optional[int] = bounded(None, "--gpus", rule=bounds.GPUS, help="Target GPU count (default: the measured count)."),
    link: Optional[str] = typer.Option(None, "--link", help="GPU-to-GPU link for all-reduce: pcie or nvlink (default pcie)."),
    cpu_cores: Optional[int] = bounded(None, "--cpu-cores", rule=bounds.CPU_CORES, help="Target CPU physical cores (all sockets)."),
    cpu_isa: Optional[str] = typer.Option(None, "--cpu-isa", help="Target CPU ISA class: amx, avx512 or avx2 (default: the measured one)."),
    numa: int = bounded(1, "--numa", rule=bounds.NUMA_NODES, help="Target NUMA nodes (kt-kernel thread pools)."),
    mem_channels: Optional[int] = bounded(None, "--mem-channels", rule=bounds.MEM_CHANNELS, help="Target populated DDR channels (all sockets)."),
    mem_mts: int = bounded(4800, "--mem-mts", rule=bounds.MEM_MTS, help="Target DDR speed in MT/s."),
    ram_gib: Optional[float] = bounded(None, "--ram-gib", rule=bounds.HOST_RAM_GIB, help="Target host RAM in GiB."),
    as_json: bool = typer.Option(False, "--json", help="Print the result summary as JSON."),
) -> None:
    """Write a profile for other GPUs, another GPU count or another CPU; each curve is labelled
    measured, scaled or datasheet with its expected error. Use it with `kttune search --profile FILE`."""
    from kttune.hw.derive import Change, cpu_target, derive_profile
    from kttune.hw.gpu_table import GPUS
    from kttune.hw.profile import save_profile
    from kttune.hw.registry import resolve_profile

    if gpu == "list":
        for g in GPUS.values():
            typer.echo(f"{g.key:13s} {g.name:32s} {g.vram_bytes / 1e9:5.0f} GB  {g.hbm_gbps:6g} GB/s  "
                       f"BF16 {g.bf16_tflops:6g} TFLOP/s  PCIe Gen{g.pcie_gen} x{g.pcie_width}")
        return
    if link is not None and link not in ("pcie", "nvlink"):
        raise UserError(f"unknown --link {link!r}", "use pcie or nvlink")
    if cpu_cores is None and (cpu_isa or mem_channels or ram_gib or numa != 1):
        raise UserError("CPU options given without --cpu-cores", "pass --cpu-cores N with the other CPU options")
    if gpu is None and gpus is None and cpu_cores is None:
        raise UserError("nothing to change", "pass --gpu, --gpus or --cpu-cores")
    from kttune.documents import check_output_file, profile_output

    out_path = check_output_file(out, profile_output("kttune profile derive", "", derived=True),
                                 inputs=[(source, "measured profile")], flag="--out")
    measured = resolve_profile(source, None)  # a file or a shipped name: no inventory needed
    cpu = cpu_target(cpu_cores, cpu_isa, numa, mem_channels, mem_mts, ram_gib) if cpu_cores is not None else None
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    d = derive_profile(measured, Change(gpu=gpu, n_gpus=gpus, cpu=cpu, link=link), created=created)
    path = save_profile(d.profile, out_path)
    summary = {"out": str(path), "machine": d.profile.provenance.machine, "kind": d.profile.provenance.kind,
               "labels": d.labels, "assumptions": list(d.assumptions)}
    if as_json:
        typer.echo(json.dumps(summary, indent=1))
        return
    from rich.console import Console

    con = Console()
    con.print(f"wrote [bold]{path}[/]: {summary['machine']}")
    con.print("curves: " + ", ".join(f"{n} {k}" for k, n in sorted(d.labels.items())))
    for a in d.assumptions:
        con.print(f"  - {a}", highlight=False)
    con.print(f"plan with it: kttune search --profile {path} ...", highlight=False)


def register(app: typer.Typer) -> None:
    """Add `derive` to the `profile` group (made by kttune.cli_probe), or make the group."""
    for info in app.registered_groups:
        if info.name == "profile" and info.typer_instance is not None:
            info.typer_instance.command("derive")(derive)
            return
    group = typer.Typer(help="Hardware profiles.", no_args_is_help=True)
    group.command("derive")(derive)
    app.add_typer(group, name="profile")
