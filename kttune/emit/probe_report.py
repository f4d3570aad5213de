"""Human-readable hardware profiles (rich): the inventory and the measured curves as tables, for
`kttune probe` and `kttune profile show`."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from kttune.hw.profile import Curve, HardwareProfile
from kttune.units import GIB, MIB


def _fmt_bytes(n: float) -> str:
    for unit, div in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n:.0f} B"


def _fmt_ms(t: float) -> str:
    return f"{t:.3f}" if t < 1 else f"{t:.2f}" if t < 100 else f"{t:.0f}"


def cpu_moe_tables(curves: list[Curve]) -> list[Any]:
    """One pivot per expert shape: a row per (method, threads x pools), a column per token count,
    cells 'ms' over 'tokens/s'; the backend and kernel classes in the caption."""
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
