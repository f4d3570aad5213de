"""Human-readable hardware profiles (rich): the inventory and the measured curves as tables, for
`kttune probe` and `kttune profile show`."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from kttune.emit.terminal import first_that_fits, fits, keep_title, split_columns, tight_table
from kttune.hw.cpu_generation import cpu_id_text
from kttune.hw.curve_kinds import cpu_matmul_above
from kttune.hw.point_quality import BUSY_SHARE, busy_counts, disturbed, disturbed_points
from kttune.hw.profile import Curve, HardwareProfile
from kttune.units import GB, GIB, MIB


def _fmt_bytes(n: float) -> str:
    for unit, div in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n:.0f} B"


def _fmt_ms(t: float) -> str:
    return f"{t:.3f}" if t < 1 else f"{t:.2f}" if t < 100 else f"{t:.0f}"


def _shapes(curves: list[Curve]) -> dict[tuple, list[Curve]]:
    shapes: dict[tuple, list[Curve]] = {}
    for c in curves:
        p = c.params
        shapes.setdefault((p.get("hidden"), p.get("inter"), p.get("experts"), p.get("top_k")), []).append(c)
    return shapes


def cpu_moe_tables(curves: list[Curve], width: int | None = None) -> list[Any]:
    """One pivot per expert shape: a row per (method, threads x pools), a column per token count,
    cells 'ms' over 'tokens/s', a point that reads as disturbed marked '*'
    (`kttune.hw.point_quality.disturbed`, said in the caption); the backend and kernel classes in the
    caption. At `width` columns a pivot too wide for it is split into several of consecutive token
    counts."""
    tables = []
    for (h, i, e, k), cs in _shapes(curves).items():
        xs = sorted(
            {int(p.x) for c in cs for p in c.points} | {int(s["x"]) for c in cs for s in c.skipped if s.get("x")}
        )
        kernels = sorted({f"{c.backend} {c.params.get('kernel', '')}".strip() for c in cs})
        marked = any(disturbed(p) for c in cs for p in c.points)
        mark = "; * disturbed (see the notes)" if marked else ""
        rows = sorted(cs, key=lambda c: (c.params.get("method", ""), c.params.get("threads", 0)))

        def build(idx, title: str, caption: str | None) -> Table:
            t = Table(title=title, caption=caption)
            t.add_column("method", no_wrap=True)
            t.add_column("threads", no_wrap=True)
            for j in idx:
                t.add_column(f"{xs[j]}", justify="right", no_wrap=True)
            for c in rows:
                pts = {int(pt.x): pt for pt in c.points}
                skipped = {int(s["x"]) for s in c.skipped if s.get("x")}
                cells = []
                for x in (xs[j] for j in idx):
                    if x in pts:
                        ms = pts[x].t_ms
                        star = "*" if disturbed(pts[x]) else ""
                        cells.append(f"{_fmt_ms(ms)}{star}\n{x / ms * 1e3:,.0f}/s")
                    else:
                        cells.append("skip" if x in skipped else "")
                pools = c.params.get("threadpools", 1)
                t.add_row(
                    str(c.params.get("method")),
                    f"{c.params.get('threads')}" + (f" ({pools} pools)" if pools > 1 else ""),
                    *cells,
                )
            return keep_title(t)

        full = build(
            range(len(xs)),
            f"CPU MoE layer forward, H={h} I={i} E={e} top-{k}: ms / tokens per s",
            "; ".join(kernels) + mark,
        )
        if width is None or fits(full, width):
            tables.append(full)
            continue
        short = f"CPU MoE layer forward, H{h} I{i} E{e} top-{k}"
        backends = "; ".join(sorted({c.backend for c in cs})) + mark
        sep = ": " if width >= 80 else "\n"  # the title on two lines where one would be wider than the table
        tables += split_columns(
            width,
            2,
            lambda idx: build(idx, f"{short}{sep}{xs[idx[0]]}-{xs[idx[-1]]} tokens, ms / tok/s", backends),
            range(len(xs)),
        )
    return tables


def shape_law_tables(curves: list[Curve]) -> list[Any]:
    """Per (build, class, threads) of the `cpu_moe_shape` sets: a row per expert shape with its time
    per token (the slope over its sizes) and flop rate, the law's verdict in the caption
    (`kttune.hw.shape_law.measured_shape_law`)."""
    from kttune.hw.shape_law import measured_shape_law, shape_set_key, slopes_of_curves

    sets: dict[tuple, list[Curve]] = {}
    for c in curves:
        sets.setdefault(shape_set_key(c), []).append(c)
    tables = []
    for (backend, kernel, method, threads), cs in sets.items():
        fit = measured_shape_law(cs, backend, kernel)
        t = Table(
            title=f"Expert-shape law: {method} ({backend} {kernel}), {threads} threads",
            caption=fit.describe() if fit else "fewer than 3 shapes: not judged",
        )
        for col in ("H x I", "ms / token", "TFLOP/s", "outputs / Mflop"):
            t.add_column(col, justify="right", no_wrap=True)
        for sl in slopes_of_curves(cs):
            tf = sl.flops / (sl.ms_per_token * 1e-3) / 1e12 if sl.ms_per_token > 0 else float("nan")
            t.add_row(
                f"{sl.hidden}x{sl.inter}", f"{sl.ms_per_token:.4f}", f"{tf:.2f}", f"{sl.outputs / sl.flops * 1e6:.0f}"
            )
        tables.append(t)
    return tables


def stage_a_table(curves: list[Curve], width: int | None = None) -> Any:
    """Stage A per method and thread count; the reasons of skipped sizes follow as `stage_a_skips`.
    Where the framed table does not fit `width`, the tight frame with the title on two lines."""

    def build(tight: bool) -> Any:
        title = "Stage A: write_weight_scale_to_buffer (per expert)"
        t = tight_table(title.replace(": ", ":\n")) if tight else Table(title=title)
        for col in ("method", "threads", "expert bytes", "ms", "GB/s", "slot"):
            t.add_column(col, justify="right" if col in ("expert bytes", "ms", "GB/s") else "left", no_wrap=True)
        for c in sorted(curves, key=lambda c: (c.params.get("method", ""), c.params.get("threads", 0))):
            for pt in c.points:
                slot = "pinned" if pt.extra.get("pinned") else "pageable"
                t.add_row(
                    str(c.params.get("method")),
                    str(c.params.get("threads")),
                    _fmt_bytes(pt.x),
                    _fmt_ms(pt.t_ms),
                    f"{pt.x / pt.t_ms / 1e6:.1f}",
                    slot,
                )
            for s in c.skipped:
                t.add_row(
                    str(c.params.get("method")),
                    str(c.params.get("threads")),
                    _fmt_bytes(s.get("x") or 0),
                    "skip",
                    "",
                    "",
                )
        return keep_title(t)

    if width is None:
        return build(False)
    return first_that_fits(width, lambda: build(False), lambda: build(True))


def stage_a_skips(curves: list[Curve]) -> list[str]:
    return [
        f"stage A {c.params.get('method')} {c.params.get('threads')} threads, {_fmt_bytes(s.get('x') or 0)} skipped: "
        f"{s['reason']}"
        for c in curves
        for s in c.skipped
    ]


def host_ram_tables(curves: list[Curve]) -> list[Any]:
    """kt-kernel's host RAM, one table per layer shape: a row per method and max_len with the
    reserved (mapped) and resident growth and what `kttune.memory.host` predicts for the same
    layers; skipped max_lens say so."""
    tables = []
    for (h, i, e, k), cs in _shapes(curves).items():
        layers = cs[0].params.get("layers", 1)
        t = Table(title=f"Host RAM of kt-kernel, H{h} I{i} E{e} top-{k} x{layers} layer(s), by max_len")
        for col in ("method", "max_len", "reserved", "resident", "predicted", "predicted/\nreserved"):
            t.add_column(col, justify="left" if col == "method" else "right", no_wrap=True)
        for c in sorted(cs, key=lambda c: str(c.params.get("method"))):
            rows = [(pt.x, pt.extra) for pt in c.points] + [(s.get("x") or 0, None) for s in c.skipped]
            for x, ex in sorted(rows, key=lambda r: r[0]):
                if ex is None:
                    t.add_row(str(c.params.get("method")), f"{x:,.0f}", "skip", "", "", "")
                    continue
                reserved, pred = float(ex.get("reserved_bytes", 0)), float(ex.get("predicted_bytes", 0))
                t.add_row(
                    str(c.params.get("method")),
                    f"{x:,.0f}",
                    _fmt_bytes(reserved),
                    _fmt_bytes(float(ex.get("resident_bytes", 0))),
                    _fmt_bytes(pred),
                    f"{pred / reserved:.2f}" if reserved > 0 else "",
                )
        tables.append(keep_title(t))
    return tables


def host_ram_skips(curves: list[Curve]) -> list[str]:
    return [
        f"host RAM {c.params.get('method')} max_len {s.get('x')} skipped: {s['reason']}"
        for c in curves
        for s in c.skipped
    ]


def curve_label(kind: str, params: dict) -> str:
    """A short column header for one curve of a kind (two lines at most)."""
    if kind in ("h2d", "d2h"):
        return f"{'pinned' if params.get('pinned') else 'pageable'}\ngpu {params.get('gpu')}"
    if kind == "gpu_moe":
        return f"{params.get('method')}\n{params.get('model') or 'E' + str(params.get('experts'))}"
    if kind == "gpu_gemm":
        return f"{params.get('hidden')}\nx{params.get('out')}"
    if kind in ("attention", "attention_block"):
        return f"{params.get('attention')}\n{params.get('model') or ''}".rstrip()
    if kind == "stage_c_repack":
        return str(params.get("method"))
    return "\n".join(f"{k}={v}" for k, v in list(params.items())[:2])


def _copy_gbps(pt, params: dict) -> float:
    gpus = pt.extra.get("gpus", 1) if params.get("gpu") == "all" else 1
    return pt.x * gpus / pt.t_ms / 1e6


def generic_table(kind: str, curves: list[Curve], width: int | None = None) -> list[Any]:
    """A pivot of one curve kind: a row per size, a column per curve (`curve_label`), cells the
    median ms (GB/s for host-device copies). Split into several tables when wider than `width`."""
    if kind == "pipeline":
        return [pipeline_table(curves, width)]
    copies = kind in ("h2d", "d2h")
    xs = sorted({pt.x for c in curves for pt in c.points})
    unit = curves[0].x_unit if curves else ""

    def row_label(x: float) -> str:
        return _fmt_bytes(x) if unit == "bytes" else f"{x:,.0f}"

    def build(idx) -> Table:
        what = "GB/s" if copies else "median ms"
        t = Table(title=f"{kind} curves: {what} by {unit}")
        t.add_column(unit, justify="right", no_wrap=True)
        for j in idx:
            t.add_column(curve_label(kind, curves[j].params), justify="right", no_wrap=True)
        for x in xs:
            cells = []
            for j in idx:
                pt = next((pt for pt in curves[j].points if pt.x == x), None)
                cells.append(
                    "" if pt is None else f"{_copy_gbps(pt, curves[j].params):.1f}" if copies else _fmt_ms(pt.t_ms)
                )
            t.add_row(row_label(x), *cells)
        return keep_title(t)

    full = build(range(len(curves)))
    if width is None or fits(full, width):
        return [full]
    return split_columns(width, 1, build, range(len(curves)))


def pipeline_table(curves: list[Curve], width: int | None = None) -> Any:
    """The layerwise pipeline over one full layer, per model shape and stage A thread count: each
    stage alone against the pipelined layer time; at `width` columns where that does not fit, the
    narrow frame with shorter headers."""
    if width is None:
        return _pipeline_table(curves, False)
    return first_that_fits(width, lambda: _pipeline_table(curves, False), lambda: _pipeline_table(curves, True))


def _pipeline_table(curves: list[Curve], narrow: bool) -> Any:
    if narrow:
        t = tight_table("pipeline: one full MoE layer, ms\n(stages A, B, C alone; the pipelined layer)")
        cols = ("MoE layer", "A\nthr", "GB", "A", "B", "C", "layer", "layer/\nslowest")
    else:
        t = Table(title="pipeline: one full MoE layer, ms (stages alone, pipelined layer)", show_edge=False)
        cols = ("MoE layer", "A\nthreads", "GB", "A", "B", "C", "layer", "layer/\nslowest")
    for col in cols:
        t.add_column(col, justify="left" if col == "MoE layer" else "right", no_wrap=True)
    marked = other = False
    for c in sorted(
        curves, key=lambda c: (str(c.params.get("model")), c.params.get("method"), -c.params.get("threads", 0))
    ):
        pt = max(c.points, key=lambda pt: pt.x)
        x = pt.extra
        star = "*" if any(q is pt for q in disturbed_points(c)) else ""
        if "slots" in x and not _sglang_kt_loop(x):  # timed in another configuration than a server's
            star += "+"
        marked = marked or "*" in star
        other = other or "+" in star
        sep = "\n" if narrow else " "  # narrow: the method under the model (FP8_PERCHANNEL is long)
        t.add_row(
            f"{c.params.get('model') or ''}{sep}{c.params.get('method')}".strip(),
            str(c.params.get("threads")),
            f"{pt.x / GB:.1f}",
            *(_fmt_ms(float(x[k])) if x.get(k) else "-" for k in ("stage_a_ms", "stage_b_ms", "stage_c_ms")),
            _fmt_ms(float(x.get("layer_ms") or pt.t_ms)) + star,
            f"{x['overlap_ratio']:.2f}" if isinstance(x.get("overlap_ratio"), (int, float)) else "",
        )
    captions = []
    if marked:  # the layer disturbed by its own timings, slower per byte than a smaller one, or than its stages in turn
        captions.append("* disturbed (see the notes)")
    if other:  # a profile probed before 2026-12-05 (docs/probe.md#the-pipeline)
        captions.append("+ not sglang-kt's loop (a server's):\nthe fastest configuration tried")
    if captions:
        t.caption = "\n".join(captions)
    return keep_title(t)


def _sglang_kt_loop(extra: dict) -> bool:
    """A pipeline point timed in sglang-kt 0.7.2's own loop: host-driven, two slots, one expert a
    step (kttune.cost.components.SGLANG_KT_PIPELINE)."""
    config = (extra.get("slots"), extra.get("group"), extra.get("post_batch", 1), extra.get("driver", "host"))
    return config == (2, 1, 1, "host")


def _wrap(text: str, width: int | None) -> str:
    """Pre-wrap a value at word boundaries (designed line breaks, so the table does not wrap it)."""
    if width is None:
        return text
    import textwrap

    return "\n".join(textwrap.wrap(text, max(20, width), break_on_hyphens=False)) or text


def _add(t: Table, key: str, text: str, width: int | None) -> None:
    """A key and its value, the value wrapped at word boundaries into rows of their own (the key
    on the first): every cell one line, however narrow the terminal."""
    for i, line in enumerate(_wrap(text, width).split("\n")):
        t.add_row(key if i == 0 else "", line)


def inventory_table(p: HardwareProfile, width: int | None = None) -> Any:
    """The machine: CPU, NUMA, ISA, RAM, GPUs, software, timer. Its notes and the command that
    measured it are prose (`inventory_notes`), printed after the table."""
    inv, cpu, sw = p.inventory, p.inventory.cpu, p.inventory.software
    value_w = None if width is None else width - 20  # key column (13, "python, torch") + borders and padding (7)
    t = Table(title=_wrap(f"{p.provenance.kind} profile: {p.provenance.machine}", width), show_header=False)
    t.add_column("", style="bold", no_wrap=True)
    t.add_column("", no_wrap=True)
    t.add_row("fingerprint", p.fingerprint)
    up = p.provenance.host_uptime_s
    uptime = f", the host up {up / 60:.1f} min" if up is not None else ""
    t.add_row("created", f"{p.provenance.created} (kttune {p.provenance.tool_version or '?'}{uptime})")
    _add(t, "CPU", f"{cpu.model} ({cpu.vendor})", value_w)
    cpuid = cpu_id_text(cpu.vendor, cpu.family, cpu.model_number, cpu.stepping)
    llc = f"; last-level cache {cpu.last_level_cache_bytes / MIB:.0f} MiB" if cpu.last_level_cache_bytes else ""
    if cpuid or llc:
        _add(t, "generation", (cpuid or "CPUID numbers not recorded") + llc, value_w)
    t.add_row("cores", f"{cpu.physical_cores} cores / {cpu.logical_cpus} CPUs, {cpu.sockets} socket(s)")
    _add(
        t,
        "NUMA",
        "; ".join(f"node {n.id}: {len(n.cpus)} CPUs, {_fmt_bytes(n.mem_total_bytes)}" for n in cpu.numa_nodes),
        value_w,
    )
    _add(t, "ISA", " ".join(cpu.isa) or "-", value_w)
    t.add_row("RAM", f"{_fmt_bytes(cpu.ram_total_bytes)} total, {_fmt_bytes(cpu.ram_available_bytes)} available")
    if inv.gpus:
        for g in inv.gpus:
            _add(
                t,
                f"GPU {g.index}",
                f"{g.name}, {_fmt_bytes(g.vram_total_bytes)} ({_fmt_bytes(g.vram_free_bytes)} free)",
                value_w,
            )
            t.add_row(
                "",
                f"PCIe Gen{g.pcie_gen}x{g.pcie_width} (max Gen{g.pcie_gen_max}x{g.pcie_width_max}), NUMA {g.numa_node}",
            )
    else:
        _add(t, "GPU", "none" + (f" ({sw.nvml})" if sw.nvml else ""), value_w)
    t.add_row("python, torch", f"python {sw.python}, torch {sw.torch} (cuda {sw.torch_cuda})")
    t.add_row("kt-kernel", f"{sw.kt_kernel} ({sw.kt_cpu_variant})")
    t.add_row("sglang", f"{sw.sglang}{' (sglang-kt)' if sw.sglang_is_kt_fork else ''}")
    t.add_row("driver", f"{sw.nvidia_driver} (CUDA {sw.cuda_driver})")
    _add(
        t,
        "timer",
        f"{p.timer.clock}, resolution {p.timer.resolution_ns or 0:.0f} ns, clocksource {p.timer.clocksource}",
        value_w,
    )
    return keep_title(t)


def inventory_notes(p: HardwareProfile) -> list[str]:
    """What measured the profile, and its notes: prose lines, free to wrap. A measured profile whose
    own points say its machine was busy says so, where its probe (older than the rule) did not."""
    notes = [f"note: {n}" for n in p.provenance.notes]
    counts = busy_counts(p.curves) if p.provenance.kind == "measured" else None
    if counts and not any("busy while probed" in n for n in notes):
        named, total = counts
        notes.append(
            f"note: this machine was busy while probed: {named} of {total} readings read as disturbed, more than "
            f"{BUSY_SHARE:.0%}; predictions from this profile may be off about twice as far as from a quiet probe "
            "(docs/probe.md#a-busy-machine)"
        )
    return [f"measured by: {p.provenance.command or '?'}"] + notes


def cpu_moe_switch_lines(curves: list[Curve]) -> list[str]:
    """Per expert shape and method, where the kt-kernel class that measured it changes GEMM kernels
    (docs/cost-model.md#kt-kernels-two-gemm-kernels) and the times measured on each side of it, at
    the curve's first thread count that measured both."""
    lines, seen = [], set()
    for c in sorted(curves, key=lambda c: (c.params.get("method", ""), c.params.get("threads", 0))):
        p = c.params
        key = (p.get("hidden"), p.get("inter"), p.get("experts"), p.get("top_k"), p.get("method"))
        above = cpu_matmul_above(c)
        pts = {int(pt.x): pt.t_ms for pt in c.points}
        if key in seen or above not in pts:  # None (one kernel) is never a measured length
            continue
        past = min((x for x in pts if x > above), default=None)
        if past is None:
            continue
        seen.add(key)
        lines.append(
            f"{p.get('method')} H{p.get('hidden')} I{p.get('inter')} E{p.get('experts')} top-{p.get('top_k')}, "
            f"{p.get('threads')} threads: {p.get('kernel')} runs up to {above} tokens (4E/k) on its vector GEMM, "
            f"longer forwards on its matrix GEMM: {_fmt_ms(pts[above])} ms at {above}, {_fmt_ms(pts[past])} ms at {past}"
        )
    return lines


def render_profile(p: HardwareProfile, console: Any, inventory: bool = True) -> None:
    width = console.width
    if inventory:
        console.print(inventory_table(p, width))
        for line in inventory_notes(p):
            console.print(line, highlight=False)
    kinds: dict[str, list[Curve]] = {}
    for c in p.curves:
        kinds.setdefault(c.kind, []).append(c)
    for kind, cs in kinds.items():
        if kind == "cpu_moe":
            tables = cpu_moe_tables(cs, width)
        elif kind == "stage_a_write":
            tables = [stage_a_table(cs, width)]
        elif kind == "host_ram":
            tables = host_ram_tables(cs)
        elif kind == "cpu_moe_shape":
            tables = shape_law_tables(cs)
        else:
            tables = generic_table(kind, cs, width)
        for t in tables:
            console.print(t)
        if kind == "cpu_moe":
            for line in cpu_moe_switch_lines(cs):
                console.print(line, style="dim", highlight=False)
        if kind in ("stage_a_write", "host_ram"):
            for line in (stage_a_skips if kind == "stage_a_write" else host_ram_skips)(cs):
                console.print(line, highlight=False)
        elif kind != "cpu_moe":
            backends = sorted({c.backend for c in cs if c.backend})
            if backends:
                console.print(f"{kind} measured with: " + "; ".join(backends), highlight=False)
