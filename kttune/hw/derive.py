"""Profiles for machines that were not measured, derived from one that was: other GPUs (from
`kttune.hw.gpu_table`), another GPU count, another CPU. Every curve of the result is labelled in its
params: `label` = "measured" (copied), "scaled" (a measured curve rescaled by a ratio checked against
a measurement, see docs/derive.md) or "datasheet" (a ratio nothing measured has checked), with
`expected_error` the factor within which it is expected to hold. Pure.

The rules, each stated once here and in docs/derive.md:
- CPU MoE and stage A: per-core throughput of the measured kt-kernel curve, scaled by threads with
  a serial share fitted on the measured box's own thread sweep (`serial_fraction`), by an ISA rate
  ratio when the ISA class changes, floored by the target's memory bandwidth for the weight bytes a
  point reads, and by a NUMA efficiency when the sub-pool count grows.
- GPU curves: each measured point times the ratio of the target's roofline time to the measured
  GPU's (tensor rate and HBM bandwidth from the datasheet table), above a fixed launch floor.
- Host <-> GPU copies: the PCIe (gen x width) rate ratio; the all-GPUs-at-once copy keeps the
  measured host limit when the host is unchanged.
- All-reduce: alpha-beta ring model fitted on the measured curve (or datasheet link rates), moved to
  another GPU count and link (NVLink or PCIe); see `allreduce_ms`.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Iterable

from kttune.errors import UserError
from kttune.hw.fingerprint import fingerprint
from kttune.hw.gpu_table import GpuSpec, gpu_spec, pcie_gbps, spec_for_name
from kttune.hw.profile import (
    CURVE_KINDS, CpuInfo, Curve, GpuInfo, HardwareProfile, Inventory, NumaNode, Point, Provenance,
)
from kttune.units import GIB

# HardwareProfile fields a derive step rewrites or keeps; any other field is reset to its default
# when the machine changes.
_PROFILE_CORE_FIELDS = ("provenance", "inventory", "curves", "fingerprint", "timer", "format", "version")
# Kernel launch and sync time that does not scale with the GPU (ms).
GPU_LAUNCH_FLOOR_MS = 0.01
# Serial share of a CPU MoE call when the measured profile has no thread sweep to fit it on.
DEFAULT_SERIAL_FRACTION = 0.3
# Share of the datasheet DRAM bandwidth kt-kernel's weight reads reach.
DRAM_EFFICIENCY = 0.7
# Parallel efficiency of each extra NUMA sub-pool (cross-socket synchronisation): a datasheet guess.
NUMA_EFFICIENCY = 0.85
# Expected error factors, from the checks in tests/hw/test_derive.py (16-core -> 32-core box) and
# the spread of the efficiency a GPU reaches across generations.
CPU_SCALED_ERROR = 1.5
CPU_ISA_ERROR = 3.0
GPU_SCALED_ERROR = 1.5
COPY_SCALED_ERROR = 1.3
# kt-kernel per-core rate of a method on another ISA class, relative to the AMX class (datasheet
# ratios of the instruction throughput, unchecked by any measurement here). Methods absent from an
# ISA class do not run on it (AMXINT4/AMXINT8 need AMX).
ISA_RATE: dict[str, dict[str, float]] = {
    "amx": {"AMXINT4": 1.0, "AMXINT8": 1.0, "BF16": 1.0, "FP8": 1.0, "FP8_PERCHANNEL": 1.0, "RAWINT4": 1.0},
    "avx512": {"BF16": 0.35, "FP8": 0.5, "FP8_PERCHANNEL": 0.5, "RAWINT4": 0.5},
    "avx2": {"BF16": 0.15, "FP8": 0.25, "FP8_PERCHANNEL": 0.25, "RAWINT4": 0.3},
}
# Bytes per weight on the GPU by method (for the roofline ratio of GPU MoE points).
GPU_BYTES_PER_WEIGHT = {"BF16": 2.0, "FP8": 1.0, "FP8_PERCHANNEL": 1.0, "MXFP8": 1.0, "RAWINT4": 0.53,
                        "MXFP4": 0.53, "AMXINT4": 0.53, "AMXINT8": 1.0}
FP8_METHODS = ("FP8", "FP8_PERCHANNEL", "MXFP8")
# All-reduce: fixed latency per call (ms) by link, and the share of the link rate a ring reaches.
ALLREDUCE_LATENCY_MS = {"nvlink": 0.015, "pcie": 0.03}
ALLREDUCE_LINK_EFFICIENCY = 0.7


def dram_gbps(channels: int, mts: int) -> float:
    """Datasheet DRAM bandwidth: channels x MT/s x 8 bytes."""
    return channels * mts * 8 / 1000


@dataclass(frozen=True)
class CpuTarget:
    """Another CPU: cores, ISA flags (None: the measured box's), NUMA nodes, memory bandwidth."""

    cores: int
    isa: tuple[str, ...] | None = None
    numa_nodes: int = 1
    mem_bandwidth_gbps: float | None = None
    model: str = ""
    ram_bytes: int | None = None


@dataclass(frozen=True)
class Change:
    gpu: str | None = None  # a key of kttune.hw.gpu_table.GPUS
    n_gpus: int | None = None
    cpu: CpuTarget | None = None
    link: str | None = None  # GPU-to-GPU link for all-reduce: "pcie" or "nvlink"


@dataclass(frozen=True)
class Derived:
    profile: HardwareProfile
    assumptions: tuple[str, ...]
    labels: dict[str, int] = field(default_factory=dict)


def isa_class(isa: Iterable[str]) -> str:
    s = set(isa)
    if {"amx_bf16", "amx_int8"} & s:
        return "amx"
    if {"avx512f", "avx512_bf16"} & s:
        return "avx512"
    return "avx2"


def _labelled(c: Curve, label: str, err: float, points: tuple[Point, ...] | None = None, **params: Any) -> Curve:
    return replace(c, points=c.points if points is None else points,
                   params={**c.params, **params, "label": label, "expected_error": err})


# ---- CPU -----------------------------------------------------------------------------------------


def serial_fraction(profile: HardwareProfile, kind: str = "cpu_moe") -> float:
    """The share of a kt-kernel call (`kind` cpu_moe or stage_a_write) that does not speed up with
    threads: least squares in log time over every point measured at fewer threads than the box's
    best (cores - 1) against the same shape at cores - 1, of t(th) = t(best) x (s + (1 - s) best / th).
    DEFAULT_SERIAL_FRACTION when there is no such sweep."""
    best = profile.inventory.cpu.physical_cores - 1
    ref = {_shape_key(c): {p.x: p.t_ms for p in c.points} for c in profile.curves_of(kind, threads=best)}
    pairs = []
    for c in profile.curves_of(kind):
        th = int(c.params.get("threads", 0))
        r = ref.get(_shape_key(c))
        if r is None or not 0 < th < best:
            continue
        pairs += [(th, p.t_ms, r[p.x]) for p in c.points if p.x in r and p.t_ms > 0 and r[p.x] > 0]
    if not pairs:
        return DEFAULT_SERIAL_FRACTION

    def err(s: float) -> float:
        return sum((math.log(t) - math.log(tb * (s + (1 - s) * best / th))) ** 2 for th, t, tb in pairs)

    return min((i / 100 for i in range(0, 81)), key=err)


def _shape_key(c: Curve) -> tuple:
    p = c.params
    return (p.get("method"), p.get("hidden"), p.get("inter"), p.get("experts"), p.get("top_k"), p.get("cpu_experts"))


def _cpu_point_bytes(c: Curve, tokens: float) -> float:
    """Expert weight bytes a kt-kernel forward of `tokens` tokens reads (experts it touches)."""
    p = c.params
    if c.kind != "cpu_moe" or not p.get("hidden"):
        return 0.0
    e, k = int(p.get("cpu_experts") or p["experts"]), int(p["top_k"])
    touched = e * (1 - (1 - min(1.0, k / e)) ** tokens)
    return touched * 3 * p["hidden"] * p["inter"] * GPU_BYTES_PER_WEIGHT.get(str(p.get("method")), 1.0)


def scale_cpu_time(t_ms: float, serial: float, threads_from: int, threads_to: int, rate_ratio: float = 1.0,
                   numa_eff: float = 1.0, floor_ms: float = 0.0) -> float:
    """One measured CPU time moved to another thread count and per-core rate: the serial share stays,
    the parallel share scales with threads x rate x NUMA efficiency, not below `floor_ms` (the
    target's memory-bandwidth time for the bytes read)."""
    par = t_ms * (1 - serial) * threads_from / (threads_to * rate_ratio * numa_eff)
    return t_ms * serial + max(par, floor_ms)


def derive_cpu_curves(profile: HardwareProfile, cpu: CpuTarget) -> tuple[list[Curve], list[str]]:
    src = profile.inventory.cpu
    src_cores = src.physical_cores
    serial = {k: serial_fraction(profile, k) for k in ("cpu_moe", "stage_a_write")}
    # A stage A call never takes less than the fastest one measured (its fixed cost per call).
    stage_a_floor = min((p.t_ms for c in profile.curves_of("stage_a_write")
                         if int(c.params.get("threads", 0)) < src_cores for p in c.points), default=0.0)
    src_isa, tgt_isa = isa_class(src.isa), isa_class(cpu.isa if cpu.isa is not None else src.isa)
    pools = max(1, cpu.numa_nodes)
    src_pools = max(1, len(src.numa_nodes))
    numa_eff = NUMA_EFFICIENCY ** max(0, pools - src_pools)
    bw = cpu.mem_bandwidth_gbps
    notes = [f"CPU: {src_cores} -> {cpu.cores} cores; serial share {serial['cpu_moe']:.2f} of each kt-kernel MoE "
             f"call and {serial['stage_a_write']:.2f} of each stage A call (fitted on the measured thread sweep), "
             f"stage A no faster than {stage_a_floor * 1e3:.0f} us per call; threads keep the measured box's spare cores "
             f"(t -> t + {cpu.cores - src_cores})"]
    if tgt_isa != src_isa:
        notes.append(f"CPU ISA {src_isa} -> {tgt_isa}: per-core rate ratios {ISA_RATE[tgt_isa]} (datasheet, unchecked)")
    if pools > src_pools:
        notes.append(f"{pools} NUMA sub-pools: parallel efficiency {numa_eff:.2f} (datasheet guess)")
    if bw:
        notes.append(f"memory bandwidth floor {bw:g} GB/s x {DRAM_EFFICIENCY} for the weight bytes each point reads")
    else:
        notes.append("memory bandwidth not given: assumed to grow with the cores (no floor)")
    out = []
    for c in profile.curves:
        if c.kind not in ("cpu_moe", "stage_a_write"):
            continue
        th = int(c.params.get("threads", 0))
        method = str(c.params.get("method", "")).upper()
        rate = ISA_RATE[tgt_isa].get(method) if tgt_isa != src_isa else 1.0
        if rate is None:
            continue
        if th >= src_cores:
            # A pool on every core starves the driving thread: calls take multiples of ~8 ms
            # whatever the core count (both measured boxes, 16 and 32 cores, show it): kept as measured.
            extra = {"threads": cpu.cores, **({"threadpools": pools} if "threadpools" in c.params else {})}
            out.append(_labelled(c, "scaled", CPU_SCALED_ERROR, **extra))
            continue
        th_to = th + cpu.cores - src_cores
        if th_to < 1:
            continue
        pts = []
        for p in c.points:
            floor = _cpu_point_bytes(c, p.x) / (bw * DRAM_EFFICIENCY * 1e6) if bw else 0.0
            t = scale_cpu_time(p.t_ms, serial[c.kind], th, th_to, rate, numa_eff, floor)
            if c.kind == "stage_a_write":
                t = max(t, stage_a_floor)
            pts.append(Point(x=p.x, t_ms=t, n=0, extra=dict(p.extra)))
        label, err = ("scaled", CPU_SCALED_ERROR) if tgt_isa == src_isa and pools <= src_pools \
            else ("datasheet", CPU_ISA_ERROR)
        extra = {"threads": th_to}
        if "threadpools" in c.params:
            extra["threadpools"] = pools
        out.append(_labelled(c, label, err, tuple(pts), **extra))
    return out, notes


# ---- GPU -----------------------------------------------------------------------------------------


def _roofline_ms(flops: float, nbytes: float, tflops: float, gbps: float) -> float:
    return flops / (tflops * 1e9) + nbytes / (gbps * 1e6)


def _gpu_point_work(c: Curve, x: float) -> tuple[float, float, bool]:
    """(flops, bytes, fp8) of one GPU curve point."""
    p = c.params
    if c.kind == "gpu_moe":
        h, i, e, k = p["hidden"], p["inter"], p["experts"], p["top_k"]
        method = str(p.get("method", "BF16")).upper()
        touched = e * (1 - (1 - min(1.0, k / e)) ** x)
        nbytes = touched * 3 * h * i * GPU_BYTES_PER_WEIGHT.get(method, 2.0) + 4 * x * h * k
        return 6 * x * k * h * i, nbytes, method in FP8_METHODS
    if c.kind == "gpu_gemm":
        h, o = p["hidden"], p["out"]
        return 2 * x * h * o, 2 * (x * h + h * o + x * o), False
    if c.kind == "attention":
        heads, hd, vd = p["heads"], p["head_dim"], p["v_head_dim"]
        return 2 * x * x / 2 * heads * (hd + vd), 0.0, False
    if c.kind == "stage_c_repack":
        return 0.0, 2 * x, False
    raise ValueError(c.kind)


def scale_gpu_curve(c: Curve, src: GpuSpec, tgt: GpuSpec) -> Curve:
    """A measured GPU curve on `src` moved to `tgt`: each point's time above the launch floor times
    the ratio of the two roofline times."""
    pts = []
    for p in c.points:
        flops, nbytes, fp8 = _gpu_point_work(c, p.x)
        a = _roofline_ms(flops, nbytes, src.fp8_or_bf16_tflops if fp8 else src.bf16_tflops, src.hbm_gbps)
        b = _roofline_ms(flops, nbytes, tgt.fp8_or_bf16_tflops if fp8 else tgt.bf16_tflops, tgt.hbm_gbps)
        floor = min(p.t_ms, GPU_LAUNCH_FLOOR_MS)
        pts.append(Point(x=p.x, t_ms=floor + (p.t_ms - floor) * (b / a if a > 0 else 1.0), n=0))
    return _labelled(c, "scaled", GPU_SCALED_ERROR, tuple(pts))


def _link_gbps_of(g: GpuInfo) -> float:
    return pcie_gbps(g.pcie_gen or 4, g.pcie_width or 16)


def scale_copy_curve(c: Curve, ratio: float) -> Curve:
    """A measured copy curve over a link `ratio` times as fast (time above the launch floor / ratio)."""
    pts = tuple(Point(x=p.x, t_ms=min(p.t_ms, GPU_LAUNCH_FLOOR_MS) + max(0.0, p.t_ms - GPU_LAUNCH_FLOOR_MS) / ratio, n=0)
                for p in c.points)
    return _labelled(c, "scaled", COPY_SCALED_ERROR, pts)


# ---- all-reduce ------------------------------------------------------------------------------------


def allreduce_ms(nbytes: float, n_gpus: int, link_gbps: float, latency_ms: float) -> float:
    """Ring all-reduce of `nbytes` on `n_gpus` GPUs: 2(n-1) steps of `latency_ms` each and 2(n-1)/n of
    the message over each link (the bandwidth term of NCCL's ring algorithm)."""
    if n_gpus <= 1:
        return 0.0
    return 2 * (n_gpus - 1) * latency_ms + 2 * (n_gpus - 1) / n_gpus * nbytes / (link_gbps * 1e6)


def allreduce_link_gbps(link: str, gpu: GpuSpec) -> float:
    if link == "nvlink":
        if gpu.nvlink_gbps <= 0:
            raise UserError(f"{gpu.key} has no NVLink", "use --link pcie")
        return gpu.nvlink_gbps * ALLREDUCE_LINK_EFFICIENCY
    return pcie_gbps(gpu.pcie_gen, gpu.pcie_width) * ALLREDUCE_LINK_EFFICIENCY


# ---- the whole profile -----------------------------------------------------------------------------


def derive_profile(measured: HardwareProfile, change: Change, created: str = "") -> Derived:
    """`measured` moved to the machine `change` describes (see the module docstring)."""
    notes: list[str] = []
    inv = measured.inventory
    if not inv.gpus and (change.gpu or change.n_gpus):
        raise UserError("the measured profile has no GPU to scale from", "derive from a profile measured with a GPU")
    src_gpu = spec_for_name(inv.gpus[0].name) if inv.gpus else None
    tgt_gpu = gpu_spec(change.gpu) if change.gpu else src_gpu
    if change.gpu and src_gpu is None:
        raise UserError(f"the measured GPU {inv.gpus[0].name!r} is not in kttune's GPU table",
                        "derive only the CPU or the GPU count, or measure the target GPU")
    n_src = len(inv.gpus)
    n_tgt = change.n_gpus if change.n_gpus is not None else n_src
    if n_tgt < 1:
        raise UserError(f"--gpus {n_tgt} is not a GPU count", "pass 1 or more")
    gpu_changed = change.gpu is not None and tgt_gpu is not None and src_gpu is not None and tgt_gpu.key != src_gpu.key
    cpu_changed = change.cpu is not None
    curves: list[Curve] = []
    if cpu_changed:
        cpu_curves, cpu_notes = derive_cpu_curves(measured, change.cpu)
        curves += cpu_curves
        notes += cpu_notes
    else:
        curves += [_labelled(c, "measured", 1.0) for c in measured.curves if c.kind in ("cpu_moe", "stage_a_write")]
    src_link = _link_gbps_of(inv.gpus[0]) if inv.gpus else 0.0
    tgt_link = pcie_gbps(tgt_gpu.pcie_gen, tgt_gpu.pcie_width) if gpu_changed else src_link
    if gpu_changed:
        notes.append(f"GPU {src_gpu.key} -> {tgt_gpu.key}: GPU curves scaled by the roofline ratio "
                     f"(BF16 {src_gpu.bf16_tflops:g} -> {tgt_gpu.bf16_tflops:g} TFLOP/s, HBM {src_gpu.hbm_gbps:g} -> "
                     f"{tgt_gpu.hbm_gbps:g} GB/s); copies by the PCIe ratio {src_link:.1f} -> {tgt_link:.1f} GB/s")
    for c in measured.curves:
        if c.kind in ("cpu_moe", "stage_a_write"):
            continue
        if c.kind in ("gpu_moe", "gpu_gemm", "attention", "stage_c_repack"):
            curves.append(scale_gpu_curve(c, src_gpu, tgt_gpu) if gpu_changed else _labelled(c, "measured", 1.0))
        elif c.kind in ("h2d", "d2h"):
            curves += _derive_copy(c, src_link, tgt_link, n_src, n_tgt, cpu_changed, notes)
        elif c.kind == "pipeline":
            if gpu_changed or cpu_changed:
                continue  # the cost model composes stages A, B, C when the pipeline is not measured
            curves.append(_labelled(c, "measured", 1.0))
        elif c.kind in ("allreduce", "all_reduce"):
            continue  # re-derived below
        else:
            curves.append(_labelled(c, "measured", 1.0))
    if gpu_changed or cpu_changed:
        notes.append("pipeline curves dropped (measured with another GPU or CPU): the cost model composes "
                     "stages A, B and C with its default overlap")
    curves += _derive_allreduce(measured, tgt_gpu, n_src, n_tgt, change.link, notes)
    new_inv = _inventory(inv, change, tgt_gpu if gpu_changed else None, n_tgt)
    labels: dict[str, int] = {}
    for c in curves:
        labels[c.params["label"]] = labels.get(c.params["label"], 0) + 1
    kind = "measured" if set(labels) == {"measured"} else "mixed" if "measured" in labels else "datasheet"
    errs = sorted({(c.kind, c.params["label"], c.params["expected_error"]) for c in curves if c.params["label"] != "measured"})
    if errs:
        worst = max(e for *_, e in errs)
        notes.append("expected error: " + ", ".join(sorted({f"{k} {lab} within {e:g}x" for k, lab, e in errs}))
                     + f" (worst {worst:g}x; the CPU scaling was checked 16 -> 32 cores on measured boxes: worst 1.37x)")
    what = []
    if gpu_changed:
        what.append(f"GPU {tgt_gpu.key}")
    if n_tgt != n_src:
        what.append(f"{n_tgt} GPUs")
    if cpu_changed:
        what.append(f"CPU {change.cpu.cores} cores")
    machine = _machine_name(new_inv)
    prov = Provenance(
        kind=kind, machine=machine, created=created, tool_version="kttune profile derive",
        command="kttune profile derive",
        notes=(f"DERIVED FROM '{measured.provenance.machine}' ({', '.join(what) or 'no change'}), NOT MEASURED "
               f"where a curve's label is 'scaled' or 'datasheet'; run `kttune probe` on the real machine",) + tuple(notes),
        sources=(measured.provenance.machine,) + ((tgt_gpu.source,) if gpu_changed else ()),
    )
    # Anything else the measured profile carries (e.g. path-runner calibration) holds for that
    # machine only: kept when nothing changed, dropped otherwise.
    changed = gpu_changed or cpu_changed or n_tgt != n_src
    extra = {f.name: f.default_factory() if f.default_factory is not MISSING else f.default
             for f in fields(measured) if changed and f.name not in _PROFILE_CORE_FIELDS}
    prof = replace(measured, provenance=prov, inventory=new_inv, curves=tuple(curves),
                   fingerprint=fingerprint(new_inv), **extra)
    return Derived(profile=prof, assumptions=tuple(notes), labels=labels)


def _derive_copy(c: Curve, src_link: float, tgt_link: float, n_src: int, n_tgt: int, cpu_changed: bool,
                 notes: list[str]) -> list[Curve]:
    gpu = c.params.get("gpu")
    ratio = tgt_link / src_link if src_link > 0 else 1.0
    if gpu == "all":
        if n_tgt <= 1:
            return []
        if cpu_changed:
            return []  # host limit measured on another host
        # The host limit stays; each link is no faster than the target's single link.
        out = scale_copy_curve(c, min(1.0, ratio)) if ratio < 1 else _labelled(c, "measured", 1.0)
        return [replace(out, params={**out.params, "numa": [0] * n_tgt})]
    if gpu not in (0, None):
        return []  # per-GPU copies are re-made from GPU 0's below
    base = scale_copy_curve(c, ratio) if abs(ratio - 1) > 1e-9 else _labelled(c, "measured", 1.0)
    return [replace(base, params={**base.params, "gpu": g}) for g in range(n_tgt)]


def _derive_allreduce(measured: HardwareProfile, tgt_gpu: GpuSpec | None, n_src: int, n_tgt: int,
                      link: str | None, notes: list[str]) -> list[Curve]:
    kind = "allreduce" if "allreduce" in CURVE_KINDS else "all_reduce" if "all_reduce" in CURVE_KINDS else None
    if kind is None or n_tgt <= 1 or tgt_gpu is None:
        return []
    link = link or "pcie"
    bw = allreduce_link_gbps(link, tgt_gpu)
    lat = ALLREDUCE_LATENCY_MS[link]
    src = [c for c in measured.curves_of(kind) if c.points]
    xs = tuple(float(2 ** e) for e in range(16, 31, 2))
    if src and n_src > 1:
        # Fit the measured ring, t = 2(n-1) lat + 2(n-1)/n x / bw, by least squares in (1, x).
        c0 = src[0]
        pts = [(p.x, p.t_ms) for p in c0.points]
        f = 2 * (n_src - 1) / n_src
        mx = sum(x for x, _ in pts) / len(pts)
        mt = sum(t for _, t in pts) / len(pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts) or 1.0
        slope = max(1e-12, sum((x - mx) * (t - mt) for x, t in pts) / sxx)
        lat_fit = max(0.0, (mt - slope * mx) / (2 * (n_src - 1)))
        bw_fit = f / slope / 1e6
        same_link = link == str(c0.params.get("link", "pcie"))
        if same_link:
            bw, lat = bw_fit, lat_fit
        notes.append(f"all-reduce: ring model fitted on the measured {n_src}-GPU curve (link {bw_fit:.1f} GB/s, "
                     f"latency {lat_fit * 1e3:.0f} us per step){'' if same_link else f'; link changed to {link}: datasheet rate {bw:.1f} GB/s'}, "
                     f"moved to {n_tgt} GPUs")
        label, err = ("scaled", 1.5) if same_link else ("datasheet", 2.0)
        xs = tuple(p.x for p in c0.points)
        params = {**c0.params, "ranks": n_tgt, "link": link}
    else:
        notes.append(f"all-reduce not measured on more than one GPU: ring model at the {link} datasheet rate "
                     f"x {ALLREDUCE_LINK_EFFICIENCY} ({bw:.1f} GB/s), {lat * 1e3:.0f} us per step")
        label, err = "datasheet", 2.0
        params = {"ranks": n_tgt, "link": link, "dtype": "bf16"}
    pts = tuple(Point(x=x, t_ms=allreduce_ms(x, n_tgt, bw, lat), n=0) for x in xs)
    return [Curve(kind, "bytes", pts, {**params, "label": label, "expected_error": err}, backend="derived")]


def _inventory(inv: Inventory, change: Change, gpu: GpuSpec | None, n_gpus: int) -> Inventory:
    cpu = inv.cpu
    if change.cpu is not None:
        t = change.cpu
        nodes = max(1, t.numa_nodes)
        per = t.cores // nodes
        ram = t.ram_bytes or cpu.ram_total_bytes
        cpu = CpuInfo(model=t.model or f"{t.cores}-core CPU", vendor=cpu.vendor, physical_cores=t.cores,
                      logical_cpus=t.cores, sockets=nodes,
                      numa_nodes=tuple(NumaNode(i, tuple(range(i * per, (i + 1) * per)), ram // nodes) for i in range(nodes)),
                      isa=t.isa if t.isa is not None else cpu.isa, ram_total_bytes=ram,
                      ram_available_bytes=int(ram * 0.9), mem_bandwidth_gbps=t.mem_bandwidth_gbps)
    g0 = inv.gpus[0] if inv.gpus else None
    gpus = []
    for i in range(n_gpus):
        if gpu is not None:
            gpus.append(GpuInfo(index=i, name=gpu.name, vram_total_bytes=gpu.vram_bytes, vram_free_bytes=gpu.vram_bytes,
                                pcie_gen=gpu.pcie_gen, pcie_width=gpu.pcie_width, pcie_gen_max=gpu.pcie_gen,
                                pcie_width_max=gpu.pcie_width, numa_node=0))
        elif g0 is not None:
            gpus.append(replace(g0, index=i, uuid=None))
    return replace(inv, cpu=cpu, gpus=tuple(gpus), hostname="", notes=inv.notes + ("derived, not measured",))


def _machine_name(inv: Inventory) -> str:
    g = inv.gpus[0] if inv.gpus else None
    gpus = f"{len(inv.gpus)}x {g.name} (PCIe Gen{g.pcie_gen} x{g.pcie_width})" if g else "no GPU"
    return f"{gpus} + {inv.cpu.model}, {inv.cpu.physical_cores} cores (derived)"


# ---- building a change from plain values (the CLI's inputs) -----------------------------------------

ISA_FLAGS = {
    "amx": ("amx_bf16", "amx_int8", "amx_tile", "avx2", "avx512_bf16", "avx512_vnni", "avx512bw", "avx512f", "fma"),
    "avx512": ("avx2", "avx512_bf16", "avx512_vnni", "avx512bw", "avx512f", "fma"),
    "avx2": ("avx2", "fma"),
}


def cpu_target(cores: int, isa: str | None = None, numa_nodes: int = 1, mem_channels: int | None = None,
               mem_mts: int = 4800, ram_gib: float | None = None, model: str = "") -> CpuTarget:
    """A CpuTarget from CLI values; UserError on impossible ones."""
    if cores < 2:
        raise UserError(f"--cpu-cores {cores} is too few", "kt-kernel needs at least 2 cores (one drives, the rest compute)")
    if numa_nodes < 1 or cores % numa_nodes:
        raise UserError(f"--numa {numa_nodes} does not divide {cores} cores", "pass a NUMA node count that divides the cores")
    if isa is not None and isa.lower() not in ISA_FLAGS:
        raise UserError(f"unknown --cpu-isa {isa!r}", f"use one of: {', '.join(ISA_FLAGS)}")
    if mem_channels is not None and mem_channels < 1:
        raise UserError(f"--mem-channels {mem_channels} is not a channel count", "pass the populated DDR channels, e.g. 8")
    bw = dram_gbps(mem_channels, mem_mts) if mem_channels else None
    return CpuTarget(cores=cores, isa=ISA_FLAGS[isa.lower()] if isa else None, numa_nodes=numa_nodes,
                     mem_bandwidth_gbps=bw, ram_bytes=int(ram_gib * GIB) if ram_gib else None,
                     model=model or f"{cores}-core CPU ({isa or 'same ISA'}, {numa_nodes} NUMA node(s))")
