"""The hardware profile: the contract between measuring (`kttune.probes`) and modeling (`kttune.cost`).

A versioned JSON document holding the machine's inventory and measured curves (time against size,
with spread). Probes write it; the cost model reads it. Pure Python (no torch).

The curve kinds, their x axis (`Curve.x_unit`), the `params` each carries and the typed view of
them (`Curve.shape`) are the rows of `kttune.hw.curve_kinds`; the reader holds every curve to its row.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

from kttune import bounds
from kttune.bounds import read_json_file
from kttune.errors import UserError
from kttune.hw.curve_kinds import CURVE_KINDS, check_curve, curve_shape  # noqa: F401 - CURVE_KINDS re-exported

PROFILE_FORMAT = "kttune-hardware-profile"
PROFILE_VERSION = 1


@dataclass(frozen=True)
class Point:
    """One measured size: median time and spread over `n` repeats (after warm-up)."""

    x: float
    t_ms: float
    t_ms_p10: float | None = None
    t_ms_p90: float | None = None
    n: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Curve:
    kind: str
    x_unit: str
    points: tuple[Point, ...]
    params: dict[str, Any] = field(default_factory=dict)
    backend: str = ""  # what ran: "kt-kernel:amx", "torch-cpu", "torch-cuda", "triton", "datasheet", ...
    skipped: tuple[dict[str, Any], ...] = ()  # [{"x": size, "reason": "..."}]

    def matches(self, **want: Any) -> bool:
        return all(self.params.get(k) == v for k, v in want.items())

    @cached_property
    def shape(self) -> Any:
        """The typed view of `params` for this kind (`kttune.hw.curve_kinds`: e.g. a `MoeCurveShape`
        for cpu_moe); ValueError when the params lack a key the kind needs."""
        return curve_shape(self.kind, self.params)

    @property
    def xs(self) -> list[float]:
        return [p.x for p in self.points]

    @property
    def ts(self) -> list[float]:
        return [p.t_ms for p in self.points]


@dataclass(frozen=True)
class NumaNode:
    id: int
    cpus: tuple[int, ...]
    mem_total_bytes: int = 0


# CpuInfo's fields read from cpuinfo and sysfs since 2026-12-06, left out of a file where not read
CPUID_FIELDS = ("family", "model_number", "stepping", "last_level_cache_bytes")


@dataclass(frozen=True)
class CpuInfo:
    model: str
    vendor: str = ""
    physical_cores: int = 0
    logical_cpus: int = 0
    sockets: int = 1
    numa_nodes: tuple[NumaNode, ...] = ()
    isa: tuple[str, ...] = ()  # "amx_bf16", "amx_int8", "avx512f", "avx512_bf16", "avx512_vnni", "avx2", ...
    ram_total_bytes: int = 0
    ram_available_bytes: int = 0
    mem_bandwidth_gbps: float | None = None  # datasheet or measured STREAM-like figure
    # x86 CPUID family / model / stepping (/proc/cpuinfo): the generation where a hypervisor masks the
    # model name ("Intel(R) Xeon(R) Processor"); None where not read (profiles written before they were)
    family: int | None = None
    model_number: int | None = None
    stepping: int | None = None
    last_level_cache_bytes: int | None = None  # CPU 0's largest cache (sysfs)

    def has(self, flag: str) -> bool:
        return flag in self.isa


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    vram_total_bytes: int
    vram_free_bytes: int = 0
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_max: int | None = None
    numa_node: int | None = None
    compute_capability: str | None = None
    uuid: str | None = None


@dataclass(frozen=True)
class SoftwareInfo:
    python: str = ""
    torch: str | None = None
    torch_cuda: str | None = None
    kt_kernel: str | None = None
    kt_cpu_variant: str | None = None
    sglang: str | None = None
    sglang_is_kt_fork: bool | None = None
    sglang_has_layerwise_threshold: bool | None = None
    sgl_kernel: str | None = None
    nvidia_driver: str | None = None
    cuda_driver: str | None = None
    nvml: str | None = None  # why NVML is absent, or its version


@dataclass(frozen=True)
class Inventory:
    cpu: CpuInfo
    gpus: tuple[GpuInfo, ...] = ()
    software: SoftwareInfo = field(default_factory=SoftwareInfo)
    hostname: str = ""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Provenance:
    kind: str  # "measured" | "datasheet" | "mixed"
    machine: str  # human name of the machine, e.g. "H200 PCIe Gen5 x16 + Xeon (AMX), 16 cores"
    created: str = ""  # ISO timestamp
    tool_version: str = ""
    command: str = ""
    notes: tuple[str, ...] = ()  # what a user of the profile should know (shown by `kttune profile show`)
    sources: tuple[str, ...] = ()  # datasheets or other profiles merged in
    # For developers: how a shipped profile was assembled (device runs, re-measurements, what a run
    # replaced). Kept in the file (and --json), left out of the tables and reports users read.
    lab_notes: tuple[str, ...] = ()
    # Seconds the host had been up when the probe started (/proc/uptime; None where unreadable): what
    # the host was doing, beside its CPU load (docs/probe.md#what-the-host-was-doing: three quick
    # probes of one fresh instance showed no slow first minute, a host whose memory bandwidth drifts).
    host_uptime_s: float | None = None


@dataclass(frozen=True)
class TimerInfo:
    clock: str = "time.perf_counter"
    resolution_ns: float | None = None
    clocksource: str | None = None  # /sys/.../current_clocksource (tsc, kvm-clock, ...)


@dataclass(frozen=True)
class HardwareProfile:
    provenance: Provenance
    inventory: Inventory
    curves: tuple[Curve, ...]
    fingerprint: str = ""
    timer: TimerInfo = field(default_factory=TimerInfo)
    format: str = PROFILE_FORMAT
    version: int = PROFILE_VERSION
    # The calibration (kttune.calibration.entries.Calibration) in its JSON form, one dict per entry.
    calibration: tuple[dict, ...] = ()

    # ---- queries ---------------------------------------------------------------------------
    def curves_of(self, kind: str, **want: Any) -> list[Curve]:
        return [c for c in self.curves if c.kind == kind and c.matches(**want)]

    def has(self, kind: str) -> bool:
        return any(c.kind == kind for c in self.curves)


def curve_key(c: Curve) -> tuple:
    """What makes two curves measurements of the same thing (kind and params)."""
    return (c.kind,) + tuple(sorted((k, str(v)) for k, v in c.params.items()))


# ---- (de)serialisation ----------------------------------------------------------------------


def profile_to_dict(p: HardwareProfile) -> dict[str, Any]:
    d = asdict(p)
    if not d["calibration"]:
        del d["calibration"]  # an uncalibrated profile is written as before the list existed
    if not d["provenance"]["lab_notes"]:
        del d["provenance"]["lab_notes"]  # likewise a profile without lab notes (every probe's)
    if d["provenance"]["host_uptime_s"] is None:
        del d["provenance"]["host_uptime_s"]  # and one that did not read the host's uptime (derived, datasheet)
    for k in CPUID_FIELDS:  # and a CPU whose CPUID numbers and cache were not read (profiles before them)
        if d["inventory"]["cpu"][k] is None:
            del d["inventory"]["cpu"][k]
    return {"schema": f"kttune.profile/{d['version']}", "format": d.pop("format"), "version": d.pop("version"), **d}


def _tuple(xs: Iterable[Any] | None) -> tuple:
    return tuple(xs or ())


def curve_from_dict(d: dict[str, Any]) -> Curve:
    kind = d["kind"]
    check_curve(kind, d["x_unit"], dict(d.get("params", {})))
    pts = tuple(Point(**pt) for pt in d["points"])
    if not pts:
        raise ValueError(f"{kind} curve {dict(d.get('params', {}))} has no points")
    for pt in pts:
        if not (
            isinstance(pt.x, (int, float))
            and isinstance(pt.t_ms, (int, float))
            and math.isfinite(pt.x)
            and math.isfinite(pt.t_ms)
            and pt.x > 0
            and pt.t_ms > 0
        ):
            raise ValueError(
                f"{kind} curve point x={pt.x!r} t_ms={pt.t_ms!r}: sizes and times must be positive numbers"
            )
    return Curve(
        kind=kind,
        x_unit=d["x_unit"],
        points=pts,
        params=dict(d.get("params", {})),
        backend=d.get("backend", ""),
        skipped=tuple(dict(s) for s in d.get("skipped", ())),
    )


def _check_inventory(inv: Inventory, origin: str) -> None:
    """The machine's sizes the models divide and multiply by (kttune.bounds): cores, RAM, GPUs."""
    fix = "re-run `kttune probe` to write it again"
    cpu = inv.cpu
    bounds.CPU_CORES.check(cpu.physical_cores, "inventory.cpu.physical_cores", where=origin, fix=fix)
    if cpu.ram_total_bytes:  # 0: not recorded (then --host-ram is asked for)
        bounds.HOST_RAM_BYTES.check(cpu.ram_total_bytes, "inventory.cpu.ram_total_bytes", where=origin, fix=fix)
    if cpu.mem_bandwidth_gbps is not None:
        bounds.BANDWIDTH_GBPS.check(cpu.mem_bandwidth_gbps, "inventory.cpu.mem_bandwidth_gbps", where=origin, fix=fix)
    if len(inv.gpus) > bounds.GPUS.hi:
        bounds.GPUS.check(len(inv.gpus), "the GPU count of inventory.gpus", where=origin, fix=fix)
    for i, g in enumerate(inv.gpus):
        bounds.VRAM_BYTES_PER_GPU.check(
            g.vram_total_bytes, f"inventory.gpus[{i}].vram_total_bytes", where=origin, fix=fix
        )


def _checked_calibration(entries: Any, origin: str) -> tuple[dict, ...]:
    """The calibration list (kttune.calibration.entries): each entry's method and path named, its
    factor exp(a + b ln M) finite at every forward size (|a| <= 100, |b| <= 10)."""
    from kttune.calibration.entries import APPLIED_PATHS, PART_PATHS

    fix = "re-run `kttune calibrate` (or `kttune validate`) to write it again"
    out = []
    for i, e in enumerate(entries):
        where = f"calibration[{i}]"
        if (
            not isinstance(e, dict)
            or not isinstance(e.get("method"), str)
            or e.get("path") not in APPLIED_PATHS + PART_PATHS
        ):
            raise UserError(
                f"{origin}: {where} is not a calibration entry (a method, a path of "
                f"{', '.join(APPLIED_PATHS + PART_PATHS)}, a and b)",
                fix,
            )
        bounds.CALIBRATION_A.check(e.get("a"), f"{where}.a", where=origin, fix=fix)
        bounds.CALIBRATION_B.check(e.get("b", 0.0), f"{where}.b", where=origin, fix=fix)
        out.append(dict(e))
    return tuple(out)


def profile_from_dict(d: dict[str, Any], origin: str = "profile") -> HardwareProfile:
    if not isinstance(d, dict):
        raise UserError(
            f"{origin} holds a JSON {type(d).__name__}, not a kttune hardware profile",
            "pass a file written by `kttune probe` or one from profiles/ (`kttune profiles`)",
        )
    if d.get("format") != PROFILE_FORMAT:
        raise UserError(
            f"{origin} is not a kttune hardware profile (format {d.get('format')!r})",
            "pass a file written by `kttune probe` or one from profiles/ (`kttune profiles`)",
        )
    if d.get("version") != PROFILE_VERSION:
        raise UserError(
            f"{origin} has profile format version {d.get('version')!r}, this kttune reads version {PROFILE_VERSION}",
            "re-run `kttune probe` to write a current profile, or use the kttune release that wrote it",
        )
    try:
        inv = d["inventory"]
        cpu = dict(inv["cpu"])
        cpu["numa_nodes"] = tuple(
            NumaNode(id=n["id"], cpus=_tuple(n.get("cpus")), mem_total_bytes=n.get("mem_total_bytes", 0))
            for n in cpu.get("numa_nodes", ())
        )
        cpu["isa"] = _tuple(cpu.get("isa"))
        inventory = Inventory(
            cpu=CpuInfo(**cpu),
            gpus=tuple(GpuInfo(**g) for g in inv.get("gpus", ())),
            software=SoftwareInfo(**inv.get("software", {})),
            hostname=inv.get("hostname", ""),
            notes=_tuple(inv.get("notes")),
        )
        _check_inventory(inventory, origin)
        prov = dict(d["provenance"])
        prov["notes"] = _tuple(prov.get("notes"))
        prov["sources"] = _tuple(prov.get("sources"))
        prov["lab_notes"] = _tuple(prov.get("lab_notes"))
        return HardwareProfile(
            provenance=Provenance(**prov),
            inventory=inventory,
            curves=tuple(curve_from_dict(c) for c in d.get("curves", ())),
            fingerprint=d.get("fingerprint", ""),
            timer=TimerInfo(**d.get("timer", {})),
            calibration=_checked_calibration(d.get("calibration") or (), origin),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise UserError(
            f"{origin} is a malformed kttune profile ({type(e).__name__}: {e})",
            "re-run `kttune probe` to write it again",
        ) from None


def load_profile(path: str | os.PathLike) -> HardwareProfile:
    p = Path(path)
    if not p.is_file():
        raise UserError(
            f"profile {str(p)!r} does not exist",
            "pass a file written by `kttune probe`, or a name from `kttune profiles`",
        )
    d = read_json_file(
        p,
        f"profile {str(p)!r}",
        "pass a JSON file written by `kttune probe` (re-run it to write the file again)",
        nan_as_null=True,
    )
    return profile_from_dict(d, origin=f"profile {str(p)!r}")


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    """Write JSON to `path` atomically (kttune.paths.replace_atomically). A NaN or infinity (a
    diagnostic not measured) is written as null: the file stays JSON that kttune.bounds reads."""
    from kttune.paths import replace_atomically

    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(bounds.finite_or_null(obj), f, indent=1, sort_keys=False, default=_json_default, allow_nan=False)
            f.write("\n")

    return replace_atomically(path, write)


def _json_default(o: Any) -> Any:
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def save_profile(p: HardwareProfile, path: str | os.PathLike) -> Path:
    return write_json_atomic(path, profile_to_dict(p))


def save_profile_with_fallback(
    p: HardwareProfile, paths: Iterable[str | os.PathLike], fallback_dirs: Iterable[str | os.PathLike] = ()
) -> tuple[list[Path], list[str]]:
    """Write `p` to each path; a path that fails is reported and, when no path took the profile,
    it goes to the first `fallback_dirs` entry (then the temp dir) that takes it: a measured profile
    is never lost. Returns (written paths, one line per failure saying where the profile went)."""
    written: list[Path] = []
    failed: list[tuple[Path, str]] = []
    for path in paths:
        try:
            written.append(save_profile(p, path))
        except OSError as e:
            failed.append((Path(path), e.strerror or str(e)))
    if failed and not written:
        name = f"kttune-profile-{p.fingerprint or 'unknown'}.json"
        for d in (*fallback_dirs, tempfile.gettempdir()):
            try:
                written.append(save_profile(p, Path(d) / name))
                break
            except OSError:
                continue
    where = ", ".join(map(str, written)) or "nowhere (every place refused it)"
    problems = [f"cannot write the profile to {path} ({why}); it was saved to {where}" for path, why in failed]
    return written, problems
