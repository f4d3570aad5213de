"""`kttune profile derive`: a profile for a machine that was not measured, from one that was
(other GPUs from the built-in table, another GPU count, another CPU). Parse, call
kttune.app.derive, say what was written. Registered by `kttune.cli` on the `profile` group."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kttune import bounds
from kttune.cli.bounds import bounded
from kttune.cli.options import Json
from kttune.errors import UserError


def derive(
    source: Annotated[
        Optional[str],
        typer.Argument(help="The measured profile: a file or a shipped name (`kttune profiles`).", show_default=False),
    ] = None,
    out: Annotated[
        Optional[str],
        typer.Option("--out", "-o", help="Where to write the derived profile (JSON); required unless --gpu list."),
    ] = None,
    gpu: Annotated[
        Optional[str], typer.Option("--gpu", help="Target GPU from the built-in table (`--gpu list` lists them).")
    ] = None,
    gpus: Annotated[
        Optional[int], bounded("--gpus", rule=bounds.GPUS, help="Target GPU count (default: the measured count).")
    ] = None,
    link: Annotated[
        Optional[str], typer.Option("--link", help="GPU-to-GPU link for all-reduce: pcie or nvlink (default pcie).")
    ] = None,
    cpu_cores: Annotated[
        Optional[int], bounded("--cpu-cores", rule=bounds.CPU_CORES, help="Target CPU physical cores (all sockets).")
    ] = None,
    cpu_isa: Annotated[
        Optional[str],
        typer.Option("--cpu-isa", help="Target CPU ISA class: amx, avx512 or avx2 (default: the measured one)."),
    ] = None,
    cpu_vendor: Annotated[
        Optional[str],
        typer.Option(
            "--cpu-vendor",
            help="Target CPU vendor: intel or amd (default: the measured one's). Another vendor's per-core "
            "speed is not derived: its CPU curves are labelled datasheet.",
        ),
    ] = None,
    numa: Annotated[
        int, bounded("--numa", rule=bounds.NUMA_NODES, help="Target NUMA nodes (kt-kernel thread pools).")
    ] = 1,
    mem_channels: Annotated[
        Optional[int],
        bounded("--mem-channels", rule=bounds.MEM_CHANNELS, help="Target populated DDR channels (all sockets)."),
    ] = None,
    mem_mts: Annotated[int, bounded("--mem-mts", rule=bounds.MEM_MTS, help="Target DDR speed in MT/s.")] = 4800,
    ram_gib: Annotated[
        Optional[float], bounded("--ram-gib", rule=bounds.HOST_RAM_GIB, help="Target host RAM in GiB.")
    ] = None,
    as_json: Json = False,
) -> None:
    """Write a profile for other GPUs, another GPU count or another CPU; each curve is labelled
    measured, scaled or datasheet with its expected error. Use it with `kttune search --profile FILE`."""
    from kttune import app

    if gpu == "list":
        _print_gpu_table(as_json)
        return
    if source is None:
        raise UserError(
            "no measured profile to derive from",
            "name one: `kttune profile derive SOURCE --out FILE ...` (a file or a name from `kttune profiles`)",
        )
    if out is None:
        raise UserError("no file to write the derived profile to", "add `--out FILE`")
    done = app.derive(
        source,
        out,
        gpu=gpu,
        gpus=gpus,
        link=link,
        cpu_cores=cpu_cores,
        cpu_isa=cpu_isa,
        cpu_vendor=cpu_vendor,
        numa_nodes=numa,
        mem_channels=mem_channels,
        mem_mts=mem_mts,
        ram_gib=ram_gib,
    )
    summary = done.to_dict()
    if as_json:
        from kttune.cli.common import emit_json

        emit_json(summary)
        return
    from rich.console import Console

    con = Console()
    con.print(f"wrote [bold]{done.path}[/]: {summary['machine']}")
    con.print("curves: " + ", ".join(f"{n} {k}" for k, n in sorted(done.derived.labels.items())))
    for a in done.derived.assumptions:
        con.print(f"  - {a}", highlight=False)
    con.print(f"plan with it: kttune search --profile {done.path} ...", highlight=False)


def _print_gpu_table(as_json: bool) -> None:
    """The built-in GPU table (`--gpu list`): a table that wraps to the terminal, or JSON."""
    from kttune import app

    rows = app.gpu_table()
    if as_json:
        from kttune.cli.common import emit_json
        from kttune.schema import enveloped

        emit_json(
            enveloped(
                "gpus",
                {
                    "gpus": [
                        {
                            "key": g.key,
                            "name": g.name,
                            "vram_bytes": g.vram_bytes,
                            "hbm_gbps": g.hbm_gbps,
                            "bf16_tflops": g.bf16_tflops,
                            "pcie_gen": g.pcie_gen,
                            "pcie_width": g.pcie_width,
                        }
                        for g in rows
                    ]
                },
            )
        )
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="GPUs `--gpu` knows (datasheet figures)")
    for name, justify in (
        ("--gpu", "left"),
        ("name", "left"),
        ("VRAM GB", "right"),
        ("HBM GB/s", "right"),
        ("BF16 TFLOP/s", "right"),
        ("PCIe", "left"),
    ):
        table.add_column(name, justify=justify, overflow="fold", no_wrap=name == "--gpu")  # a key is typed whole
    for g in rows:
        table.add_row(
            g.key,
            g.name,
            f"{g.vram_bytes / 1e9:.0f}",
            f"{g.hbm_gbps:,g}",
            f"{g.bf16_tflops:,g}",
            f"Gen{g.pcie_gen} x{g.pcie_width}",
        )
    Console().print(table)


def register(app: typer.Typer) -> None:
    """Add `derive` to the `profile` group (made by kttune.cli.probe), or make the group."""
    for info in app.registered_groups:
        if info.name == "profile" and info.typer_instance is not None:
            info.typer_instance.command("derive")(derive)
            return
    group = typer.Typer(help="Hardware profiles.", no_args_is_help=True)
    group.command("derive")(derive)
    app.add_typer(group, name="profile")
