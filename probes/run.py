"""`kttune probe`: measure this machine and write its hardware profile.

Order: inventory, timer check, CPU expert kernels (`probes/cpu_moe.py`), stage A
(`probes/stage_a.py`), kt-kernel's host RAM against max_len (`probes/host_ram.py`), then the GPU probes of `kttune.probes.gpu_suite` when that module exists and
a CUDA GPU is present. The profile is written atomically to `ProbeOptions.out` (if given) and to
the cache (`kttune.paths.profile_cache_path(fingerprint)`), where `kttune search` finds it.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kttune.errors import UserError
from kttune.hw.fingerprint import fingerprint
from kttune.hw.profile import Curve, HardwareProfile, Inventory, Provenance, save_profile
from kttune.paths import profile_cache_path
from kttune.kernels.kt_ext import load_kt_kernel
from kttune.probes.common import NullReporter, Reporter, probe_thread_counts, timer_info
from kttune.probes.cpu_moe import (
    FULL_SHAPES,
    QUICK_SHAPE,
    CpuMoeOptions,
    plan_cpu_moe,
    probe_cpu_moe,
    shape_from_model,
    token_series,
)
from kttune.probes.host_ram import HostRamPlan, plan_host_ram, run_host_ram_step
from kttune.probes.inventory import collect_inventory, machine_name, numa_nodes_with_cpus, smt_logical, usable_cores
from kttune.probes.stage_a import StageAOptions, plan_stage_a, probe_stage_a
from kttune.units import MIB

QUICK_MAX_TOKENS = 256
FULL_MAX_TOKENS = 8192


@dataclass(frozen=True)
class ProbeOptions:
    """What `kttune probe` measures.

    quick: a reduced probe (one small expert shape, tokens up to 256, fewer repeats, the layerwise
        pipeline over at most 2 GiB of each layer) at two kt-kernel thread counts, cores-5 and
        cores-3 (`kttune.probes.common.kt_thread_counts`): under a minute on a 2-core host and on the
        16-core H200 box.
    model: a `kttune.spec.model_spec.ModelSpec`: measure its expert shape (H, I, E, top-k) instead
        of the representative shapes (E shrinks, with a reason, if the layer does not fit in RAM).
    methods: KT methods to measure (default: every one the host's kt-kernel runs).
    threads: kt-kernel worker thread counts for CPU MoE, stage A and the pipeline alike (default:
        `kt_thread_counts`: cores-5, -3, -1 in full, cores-5 and -3 in quick mode).
    max_tokens: largest token count (default 256 quick, 8192 full).
    out: also write the profile here.
    merge_cached: start from this machine's cached profile (same fingerprint) and replace only the
        curves measured now, so CPU and GPU parts, or methods, can be probed in separate runs.
    stage_a, host_ram, gpu: run those steps (host_ram: kt-kernel's reserved and resident host RAM
        against max_len, `kttune.probes.host_ram`; it needs kt-kernel; by default a full probe runs it
        and a quick one leaves it out, to stay under a minute on a KT-class box).
    """

    quick: bool = False
    model: Any = None
    methods: tuple[str, ...] = ()
    threads: tuple[int, ...] = ()
    max_tokens: int | None = None
    out: Path | None = None
    write_cache: bool = True
    merge_cached: bool = True  # keep curves of this machine's cached profile that were not re-measured
    stage_a: bool = True
    host_ram: bool | None = None  # None: in a full probe, not in a quick one
    gpu: bool = True
    command: str = ""


class _RecordingReporter:
    """Forwards to the caller's reporter and keeps the notes for the profile's provenance."""

    def __init__(self, inner: Reporter) -> None:
        self.inner = inner
        self.notes: list[str] = []
        self.total: int | None = None
        self.grow_on_replan = False  # set when a nested probe's steps were not counted up front

    def plan(self, total_steps: int, title: str) -> None:
        """The first plan is the whole probe's; a nested probe (the GPU suite) planning its own
        steps adds to it only if `run_probe` could not count them beforehand."""
        if self.total is None:
            self.total = total_steps
            self.inner.plan(total_steps, title)
        elif self.grow_on_replan:
            self.total += total_steps
            self.inner.plan(self.total, title)

    def step(self, description: str, advance: float = 1.0) -> None:
        self.inner.step(description, advance)

    def note(self, message: str) -> None:
        self.notes.append(message)
        self.inner.note(message)


def cpu_moe_options(options: ProbeOptions) -> CpuMoeOptions:
    max_tokens = options.max_tokens
    if max_tokens is None:
        max_tokens = QUICK_MAX_TOKENS if options.quick else FULL_MAX_TOKENS
    if max_tokens < 1:
        raise UserError(f"--max-tokens {max_tokens} is not positive", "pass a token count of 1 or more, e.g. 4096")
    shapes = (shape_from_model(options.model),) if options.model is not None else ((QUICK_SHAPE,) if options.quick else FULL_SHAPES)
    common: dict[str, Any] = dict(
        shapes=shapes,
        tokens=tuple(token_series(max_tokens, options.quick)),
        methods=tuple(options.methods),
        threads=tuple(options.threads),
        quick=options.quick,
    )
    if options.quick:
        return CpuMoeOptions(**common, warmup=1, repeats=3, min_total_s=0.1, max_repeats=10, max_point_s=1.0)
    return CpuMoeOptions(**common, warmup=2, repeats=3, min_total_s=0.3, max_repeats=30, max_point_s=2.0)


def stage_a_options(options: ProbeOptions) -> StageAOptions:
    if options.model is not None:
        h, i = int(options.model.hidden_size), int(options.model.moe_intermediate_size)
        inters = (i // 2, i) if options.quick else (i // 4, i // 2, i)
        inters = tuple(sorted({x for x in inters if x >= 64 and x % 32 == 0} | {i}))
    elif options.quick:
        h, inters = 2048, (256, 768)
    else:
        h, inters = 7168, (512, 1024, 2048)
    methods = tuple(options.methods)
    if options.quick:
        return StageAOptions(hidden=h, inters=inters, methods=methods, threads=tuple(options.threads),
                             layer_bytes=64 * MIB, warmup=1, repeats=5, min_total_s=0.05, max_repeats=50)
    return StageAOptions(hidden=h, inters=inters, methods=methods, threads=tuple(options.threads))


def _gpu_suite() -> Any | None:
    try:
        return importlib.import_module("kttune.probes.gpu_suite")
    except ModuleNotFoundError as e:
        if e.name in ("kttune.probes.gpu_suite",):
            return None
        raise


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _tool_version() -> str:
    try:
        return md.version("kttune")
    except md.PackageNotFoundError:
        return ""


def _inventory_with_loaded_variant(inv: Inventory, rep: _RecordingReporter) -> Inventory:
    """Keep the detected kt-kernel variant (what `collect_inventory()` reports at search time, so
    fingerprints match) unless the loaded one differs: then record the loaded one, with a note."""
    kt = load_kt_kernel()
    if kt is None or inv.software.kt_cpu_variant == kt.variant:
        return inv
    rep.note(f"kt-kernel loaded its {kt.variant} variant (detector said {inv.software.kt_cpu_variant})")
    return replace(inv, software=replace(inv.software, kt_cpu_variant=kt.variant))


@dataclass(frozen=True)
class ProbePlan:
    """What one `kttune probe` run measures on the CPU, and the kt-kernel thread counts that CPU MoE,
    stage A and the GPU suite's layerwise pipeline all run (one `--kt-cpuinfer` drives both paths)."""

    threads: tuple[int, ...]
    moe_options: CpuMoeOptions
    moe: Any  # CpuMoePlan
    stage_a_options: StageAOptions
    stage_a: Any  # StageAPlan | None
    host_ram: HostRamPlan | None = None


def plan_probe(options: ProbeOptions, cpu: Any, cores: int, numa_ids: list[int]) -> ProbePlan:
    """The CPU probes' plans for `cores` usable cores and the thread counts the pipeline gets."""
    threads = tuple(probe_thread_counts(cores, options.quick, options.threads, smt_logical(cpu, cores)))
    moe_opts = cpu_moe_options(options)
    sa_opts = stage_a_options(options)
    moe = plan_cpu_moe(moe_opts, cpu, cores, numa_ids)
    return ProbePlan(
        threads=threads,
        moe_options=moe_opts,
        moe=moe,
        stage_a_options=sa_opts,
        stage_a=plan_stage_a(sa_opts, cpu, cores, numa_ids, options.quick) if options.stage_a else None,
        host_ram=host_ram_plan(options, moe_opts, moe, threads) if host_ram_runs(options) else None,
    )


def host_ram_runs(options: ProbeOptions) -> bool:
    """Whether the probe runs the host-RAM step: as asked, else in a full probe only."""
    return (not options.quick) if options.host_ram is None else options.host_ram


def host_ram_plan(options: ProbeOptions, moe_opts: CpuMoeOptions, moe: Any, threads: tuple[int, ...]) -> HostRamPlan:
    """The host-RAM step over the CPU MoE probe's first shape (the model's with `--model`, else the
    small quick shape or the first representative one) and methods, at its largest thread count."""
    methods = tuple(dict.fromkeys(t.method for t in moe.tasks))
    return plan_host_ram(moe_opts.shapes[0], methods, options.quick, threads=max(threads, default=1))


def run_probe(options: ProbeOptions, reporter: Reporter | None = None) -> HardwareProfile:
    """Measure this machine; write the profile to `options.out` and the cache; return it."""
    rep = _RecordingReporter(reporter or NullReporter())
    load = CpuLoadMonitor()
    inv = collect_inventory()
    inv = _inventory_with_loaded_variant(inv, rep)
    for n in inv.notes:
        rep.note(n)
    cpu = inv.cpu
    cores = usable_cores(cpu)
    numa_ids = list(numa_nodes_with_cpus(cpu))

    timer = timer_info()
    if timer.resolution_ns is not None and timer.resolution_ns > 1000:
        rep.note(f"perf_counter resolution is {timer.resolution_ns:.0f} ns (clocksource {timer.clocksource}): sub-ms timings are coarse")

    plan = plan_probe(options, cpu, cores, numa_ids)
    moe_opts, moe_plan, sa_opts, sa_plan = plan.moe_options, plan.moe, plan.stage_a_options, plan.stage_a
    hr_plan = plan.host_ram

    gpu_suite = _gpu_suite() if options.gpu else None
    run_gpu = gpu_suite is not None and _cuda_available()
    gpu_steps = 0
    if run_gpu and hasattr(gpu_suite, "count_steps"):
        try:
            gpu_steps = int(gpu_suite.count_steps(inv, options.model, options.quick))
        except Exception:
            gpu_steps = 0
    rep.grow_on_replan = run_gpu and gpu_steps == 0
    total = moe_plan.steps + (sa_plan.steps if sa_plan else 0) + (hr_plan.steps if hr_plan else 0) + gpu_steps
    rep.plan(total, "probe" + (" (quick)" if options.quick else ""))

    curves: list[Curve] = []
    curves += probe_cpu_moe(moe_opts, cpu, rep, cores=cores, numa_ids=numa_ids, plan=moe_plan)
    for n in thread_cliff_notes(curves, cores, logical=smt_logical(cpu, cores)):
        rep.note(n)
    if sa_plan is not None:
        curves += probe_stage_a(sa_opts, cpu, rep, cores=cores, numa_ids=numa_ids, quick=options.quick, plan=sa_plan)
    if hr_plan is not None:
        curves += run_host_ram_step(hr_plan, rep)
    if options.gpu:
        if gpu_suite is None:
            rep.note("GPU probes not run: kttune.probes.gpu_suite is not available in this build")
        elif not run_gpu:
            if inv.gpus:
                rep.note("GPU probes not run: torch has no CUDA (NVML sees GPUs)")
        else:
            # the pipeline runs at the CPU probes' thread counts: one --kt-cpuinfer drives both paths
            curves += list(gpu_suite.run_gpu_probes(inv, options.model, options.quick, rep, threads=plan.threads))
            if len(inv.gpus) >= 2:  # tensor parallelism: each layer all-reduces twice
                from kttune.probes.allreduce import probe_allreduce

                try:
                    curves.append(probe_allreduce(len(inv.gpus), quick=options.quick))
                    rep.step(f"all-reduce over {len(inv.gpus)} GPUs", 0)
                except Exception as e:  # noqa: BLE001 - the other curves stand
                    rep.note(f"all-reduce probe failed ({type(e).__name__}: {e})")

    share = load.other_share()
    if share is not None and share > 0.10:
        rep.note(f"other processes used {share * 100:.0f} % of the CPUs while probing: timings are inflated and noisy; "
                 "re-run `kttune probe` on an idle machine")

    fp = fingerprint(inv)
    if options.merge_cached:
        kept = _cached_curves_not_remeasured(fp, curves)
        if kept:
            rep.note(f"kept {len(kept)} curves of this machine's cached profile that this run did not re-measure "
                     "(pass --fresh to drop them)")
            curves = kept + curves
    prov = Provenance(
        kind="measured",
        machine=machine_name(inv),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        tool_version=_tool_version(),
        command=options.command or ("kttune probe" + (" --quick" if options.quick else "")),
        notes=tuple(dict.fromkeys(rep.notes)),
    )
    profile = HardwareProfile(provenance=prov, inventory=inv, curves=tuple(curves), fingerprint=fp, timer=timer)
    for path in profile_paths(options, profile):
        save_profile(profile, path)
    return profile


class CpuLoadMonitor:
    """How much CPU other processes used while we measured: /proc/stat busy time minus this
    process's own CPU time (kt-kernel's worker threads included). Other load on the cores is the
    first suspect when repeated probes disagree."""

    def __init__(self) -> None:
        self.start = self._snapshot()

    @staticmethod
    def _snapshot() -> tuple[float, float, float] | None:
        import os
        import time

        try:
            fields = [float(v) for v in open("/proc/stat").readline().split()[1:]]
        except (OSError, ValueError):
            return None
        hz = os.sysconf("SC_CLK_TCK")
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
        busy_s = (sum(fields[:8]) - idle) / hz
        t = os.times()
        return time.monotonic(), busy_s, t.user + t.system

    def other_share(self) -> float | None:
        """Share of all CPUs (0..1) used by other processes since the monitor started."""
        import os

        end = self._snapshot()
        if self.start is None or end is None:
            return None
        wall = end[0] - self.start[0]
        if wall <= 0:
            return None
        other = (end[1] - self.start[1]) - (end[2] - self.start[2])
        return max(0.0, other / (wall * (os.cpu_count() or 1)))


def thread_cliff_notes(curves: list[Curve], cores: int, ratio: float = 2.0, logical: int | None = None) -> list[str]:
    """Where kt-kernel falls off the thread cliff (docs/sglang-kt.md#the-cpuinfer-thread-cliff): per
    method and shape, at its smallest token count, the first worker count at or above the core count
    that is more than `ratio` x slower than the best count below it, with the times at the counts
    above the cores that were measured (on an SMT host: the core count, `kt run`'s 0.8 x logical
    threads and all but one logical CPU). `--kt-cpuinfer` should stay below the cliff."""
    notes = []
    by_key: dict[tuple, dict[int, tuple[float, float]]] = {}
    for c in curves:
        if c.kind != "cpu_moe" or not c.points or c.params.get("numa_nodes"):
            continue
        key = (c.params.get("method"), c.params.get("hidden"), c.params.get("inter"), c.params.get("experts"))
        p = min(c.points, key=lambda q: q.x)
        by_key.setdefault(key, {})[int(c.params.get("threads", 0))] = (p.x, p.t_ms)
    kt_run = int(0.8 * logical) if logical and logical > cores else None
    for (method, h, i, e), t in by_key.items():
        below = {n: v for n, v in t.items() if n < cores}
        above = sorted(n for n in t if n >= cores)
        if not below or not above:
            continue
        best = min(below, key=lambda n: below[n][1])
        x, t_best = below[best]
        cliff = next((n for n in above if t[n][0] == x and t[n][1] > ratio * t_best), None)
        if cliff is None:
            continue
        tokens = f"{x:g} token" + ("s" if x != 1 else "")
        parts = [f"{t[n][1]:.2f} ms at {n}" + (" (kt run's 0.8 x logical)" if n == kt_run else "")
                 for n in above if t[n][0] == x]
        notes.append(f"{method} H{h} I{i} E{e}: {tokens} take {t_best:.2f} ms with {best} threads on {cores} cores and "
                     + ", ".join(parts) + f": the thread cliff starts at {cliff} threads (the driving thread starves), "
                     f"keep --kt-cpuinfer below {cliff}")
    return notes


def curve_key(c: Curve) -> tuple:
    """What makes two curves measurements of the same thing (kind and params)."""
    return (c.kind,) + tuple(sorted((k, str(v)) for k, v in c.params.items()))


def _cached_curves_not_remeasured(fp: str, new: list[Curve]) -> list[Curve]:
    from kttune.hw.profile import load_profile

    path = profile_cache_path(fp)
    if not path.is_file():
        return []
    try:
        old = load_profile(path)
    except UserError:
        return []  # unreadable or another format version: start afresh
    fresh = {curve_key(c) for c in new}
    return [c for c in old.curves if curve_key(c) not in fresh]


def profile_paths(options: ProbeOptions, profile: HardwareProfile) -> list[Path]:
    """Where `run_probe` writes the profile: `--out` (if given) and the fingerprint cache."""
    paths = []
    if options.out is not None:
        paths.append(Path(options.out))
    if options.write_cache:
        paths.append(profile_cache_path(profile.fingerprint))
    return paths
