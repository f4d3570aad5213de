"""Stage A probe: kt-kernel's `write_weight_scale_to_buffer_task` throughput per method.

Stage A of the layerwise pipeline (docs/sglang-kt.md#the-two-prefill-paths): rank 0's kt-kernel threads write one expert,
already in the GPU layout and split into TP shards, into a host slot; stage B copies the slot to the
GPU. This probe times exactly that call on a layer built the way `probes/cpu_moe.py` builds it, for
experts of a few sizes, writing experts in turn (so the source is not cache-hot). The slot is pinned
memory when CUDA is available, a plain host buffer otherwise (recorded per point as `pinned`).

`Curve(kind="stage_a_write", x_unit="bytes", params={method, threads})`: x is the bytes of one
expert written into the slot (weights + scales, all TP shards), t_ms the time per expert.
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass, field
from typing import Sequence

from kttune.errors import UserError
from kttune.hw.profile import CpuInfo, Curve, Point
from kttune.hw.point_quality import slower_than_a_larger_write
from kttune.kernels.expert_weights import (
    INT4_GROUP,
    LAYERWISE_METHODS,
    HostExperts,
    HostSlot,
    expert_nbytes,
    slot_kinds,
    write_nbytes,
)
from kttune.kernels.kt_ext import load_kt_kernel
from kttune.kernels.kt_moe import KtMoeLayer, kt_class_name, kt_method_leaks
from kttune.probes.common import (
    KtPoolTask,
    NullReporter,
    Reporter,
    kt_thread_counts,
    measure,
    probe_thread_counts,
    retime,
    retime_by_thread_law,
)
from kttune.probes.cpu_moe import available_ram_bytes, host_bytes_needed
from kttune.spec.moe_shape import MoeLayerShape
from kttune.units import GIB, MIB

# The writes cycle over a source this many times the host's last-level cache at least: a server streams
# a layer of GBs, never cache-resident. On the 16-core H200 box (a 300 MB L3) a 0.25 GiB cycle wrote
# GLM-4.5-Air's and Qwen3-30B-A3B's experts 2-10% faster alone than a 4 GiB one, and beside one link's
# copies the 4 GiB cycle took up to 24% longer (docs/probe.md#stage-a-writes-from-a-cold-source). A
# quick probe takes half the margin.
COLD_CACHE_MULTIPLE = 4
QUICK_CACHE_MULTIPLE = 2
# Experts one write layer holds at most (small experts need many to fill the cycle).
MAX_CYCLE_EXPERTS = 512


def cold_layer_bytes(floor: int, llc_bytes: int | None, multiple: int = COLD_CACHE_MULTIPLE) -> int:
    """Source bytes the stage A writes cycle over: `multiple` x the last-level cache, never less than
    `floor` (and `floor` where the cache size is unknown)."""
    return max(floor, multiple * llc_bytes) if llc_bytes else floor


# Methods whose kt-kernel classes implement the writer and that layerwise prefill streams
# (docs/weight-formats.md): the methods with a layerwise expert layout; the AMX-converted methods never stream.
STAGE_A_METHODS = LAYERWISE_METHODS


@dataclass(frozen=True)
class StageAOptions:
    hidden: int
    inters: tuple[int, ...]
    methods: tuple[str, ...] = ()
    threads: tuple[int, ...] = ()
    gpu_tp: int = 1
    layer_bytes: int = 256 * MIB  # source bytes per layer: experts cycle through this much RAM
    warmup: int = 3
    repeats: int = 10
    min_total_s: float = 0.2
    max_repeats: int = 200
    ram_fraction: float = 0.5
    seed: int = 0


@dataclass(frozen=True)
class StageATask(KtPoolTask):
    """One stage_a_write curve: the expert widths I written."""

    inters: tuple[int, ...]


@dataclass
class StageAPlan:
    tasks: list[StageATask]
    notes: list[str] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return sum(len(t.inters) for t in self.tasks)

    def by_method(self) -> list["StageAPlan"]:
        """One plan per method, in this plan's order (each method's writes are measured, and timed
        again by the thread law, on their own), without the notes."""
        methods = list(dict.fromkeys(t.method for t in self.tasks))
        return [StageAPlan([t for t in self.tasks if t.method == m]) for m in methods]

    @staticmethod
    def joined(plans: Sequence["StageAPlan"]) -> "StageAPlan":
        """The plans' tasks in one plan, in order, without the notes."""
        return StageAPlan([t for p in plans for t in p.tasks])


def cycle_experts(opts: "StageAOptions", method: str, inter: int) -> int:
    """Experts of one writer layer at expert width `inter`: enough to fill the cycle
    (`StageAOptions.layer_bytes`), at least 4 and at most MAX_CYCLE_EXPERTS."""
    src_bytes = expert_nbytes(method, opts.hidden, inter)
    return max(4, min(MAX_CYCLE_EXPERTS, math.ceil(opts.layer_bytes / max(src_bytes, 1))))


def kept_write_bytes(plan: StageAPlan, opts: "StageAOptions", cpu: CpuInfo) -> int:
    """About how many bytes of writer layers measuring `plan` leaves behind in its process: per curve
    and expert width, the layer's experts, where kt-kernel cannot free the class that writes the method
    (`kttune.spec.kt_classes.kt_class_leaks`)."""
    kt = load_kt_kernel()
    if kt is None:
        return 0
    total = 0
    for t in plan.tasks:
        if not kt_method_leaks(kt, t.method, cpu.isa):
            continue
        total += sum(cycle_experts(opts, t.method, i) * expert_nbytes(t.method, opts.hidden, i) for i in t.inters)
    return total


def stage_a_threads(cores: int, quick: bool) -> list[int]:
    return kt_thread_counts(cores, quick)


def plan_stage_a(opts: StageAOptions, cpu: CpuInfo, cores: int, numa_ids: Sequence[int], quick: bool) -> StageAPlan:
    kt = load_kt_kernel()
    if kt is None:
        return StageAPlan([], ["stage A skipped: kt-kernel is not importable (its writer is what stage A measures)"])
    names = set(dir(kt.ext.moe))
    runnable = []
    for m in STAGE_A_METHODS:
        cls = kt_class_name(kt, m, cpu.isa)
        if cls and hasattr(getattr(kt.ext.moe, cls), "write_weight_scale_to_buffer_task") and cls in names:
            runnable.append(m)
    notes = []
    if opts.methods:
        methods = [m.strip().upper().replace("-", "_") for m in opts.methods]
        unknown = [m for m in methods if m not in STAGE_A_METHODS]
        for m in unknown:
            notes.append(f"stage A skips {m}: only {', '.join(STAGE_A_METHODS)} stream experts in layerwise prefill")
        methods = [m for m in methods if m in runnable]
    else:
        methods = runnable
    from kttune.probes.inventory import smt_logical

    threads = probe_thread_counts(cores, quick, opts.threads, smt_logical(cpu, cores))
    if any(t < 1 for t in threads):
        raise UserError("thread counts must be positive", "pass --threads with counts of 1 or more")
    pools = max(1, len(numa_ids))
    tasks = []
    for m in methods:
        for t in threads:
            p = min(pools, t)
            inters = tuple(i for i in opts.inters if i % p == 0 and (i // p) % INT4_GROUP == 0)
            tasks.append(StageATask(m, t, p, inters=inters))
    return StageAPlan(tasks, notes)


class _BuildFailed(Exception):
    """kt-kernel could not build the writer layer (the message says why)."""


def _time_write(
    task: StageATask,
    inter: int,
    experts: int,
    hosts: dict,
    opts: StageAOptions,
    cpu: CpuInfo,
    kt,
    numa_ids: Sequence[int],
    pinned: bool,
) -> Point:
    """Build kt-kernel's writer layer of `task` at expert size `inter` over `experts` experts (the host
    experts drawn once into `hosts`), time one expert's write into a slot, and close the layer."""
    nbytes = write_nbytes(task.method, opts.hidden, inter, opts.gpu_tp)
    src_bytes = expert_nbytes(task.method, opts.hidden, inter)
    try:
        key = (task.method, inter, experts)
        if key not in hosts:
            hosts[key] = HostExperts.random(task.method, opts.hidden, inter, experts, seed=opts.seed)
        layer = KtMoeLayer(
            hosts[key],
            top_k=1,
            threads=task.threads,
            threadpools=task.threadpools,
            numa_nodes=numa_ids,
            max_tokens=1,
            isa=cpu.isa,
            kt=kt,
            writer=True,
        )
    except Exception as e:
        raise _BuildFailed(f"{type(e).__name__}: {e}") from e
    try:
        kinds = slot_kinds(task.method, opts.hidden, inter, opts.gpu_tp)
        slots = [HostSlot(kinds, 1, pin=pinned) for _ in range(opts.gpu_tp)]
        ptr = list(zip(*(sl.ptrs(0) for sl in slots)))  # (w13 per rank, s13 per rank, ...)
        state = {"e": 0}

        def write_one() -> None:
            e = state["e"]
            state["e"] = (e + 1) % experts
            layer.write_expert(e, *ptr)

        return measure(
            write_one,
            x=nbytes,
            warmup=opts.warmup,
            repeats=opts.repeats,
            min_total_s=opts.min_total_s,
            max_repeats=opts.max_repeats,
            extra={
                "hidden": opts.hidden,
                "inter": inter,
                "gpu_tp": opts.gpu_tp,
                "pinned": pinned,
                "layer_experts": experts,
                "source_bytes": experts * src_bytes,
                "kernel": layer.kernel_class,
            },
        )
    finally:
        layer.close()
        gc.collect()


def probe_stage_a(
    opts: StageAOptions,
    cpu: CpuInfo,
    reporter: Reporter | None = None,
    *,
    cores: int,
    numa_ids: Sequence[int],
    quick: bool = False,
    plan: StageAPlan | None = None,
) -> list[Curve]:
    """One stage_a_write curve per (method, threads) over the expert sizes of `opts.inters`. The host
    experts of a (method, size) are drawn once and serve every thread count; kt-kernel's layer is
    built per thread count (its worker pool is fixed when it loads). Once a method's counts are all
    measured, a write slower than a larger pool allows is timed again (`retime_by_thread_law`)."""
    import torch

    reporter = reporter or NullReporter()
    plan = plan or plan_stage_a(opts, cpu, cores, numa_ids, quick)
    for n in plan.notes:
        reporter.note(n)
    kt = load_kt_kernel()
    if kt is None:
        return []
    pinned = bool(torch.cuda.is_available())
    curves = []
    hosts: dict[tuple, HostExperts] = {}  # (method, inter, experts) -> host experts, this method's only
    measured: list[tuple[int, StageATask]] = []  # this method's curves (their place) and tasks

    def law_pass() -> None:
        """The thread law over the method's curves: a write slower than a larger pool allows is timed
        again at its own count (`retime_by_thread_law`)."""
        task_of = {id(curves[i]): t for i, t in measured}

        def again(c: Curve, p: Point) -> Point:
            return _time_write(
                task_of[id(c)], p.extra["inter"], p.extra["layer_experts"], hosts, opts, cpu, kt, numa_ids, pinned
            )

        idx = [i for i, _ in measured]
        for i, c in zip(idx, retime_by_thread_law([curves[i] for i in idx], again, reporter, "stage_a")):
            curves[i] = c
        measured.clear()

    for task in plan.tasks:
        if any(k[0] != task.method for k in hosts):
            if measured:
                law_pass()
            hosts.clear()
            gc.collect()
        label = f"stage_a {task.method} {task.threads}t"
        points, skipped = [], []
        kernel = ""
        for inter in task.inters:
            nbytes = write_nbytes(task.method, opts.hidden, inter, opts.gpu_tp)
            experts = cycle_experts(opts, task.method, inter)
            shape = MoeLayerShape(opts.hidden, inter, experts, 1)
            need = sum(host_bytes_needed(task.method, shape, 1, task.threadpools)) + 2 * nbytes
            budget = int(available_ram_bytes() * opts.ram_fraction)
            if need > budget:
                reason = f"needs {need / GIB:.1f} GiB, {budget / GIB:.1f} GiB usable"
                skipped.append({"x": nbytes, "reason": reason})
                reporter.note(f"{label} I={inter}: skipped, {reason}")
                reporter.step(f"{label}: skip I={inter}")
                continue
            try:
                pt = _time_write(task, inter, experts, hosts, opts, cpu, kt, numa_ids, pinned)
            except _BuildFailed as e:
                skipped.append({"x": nbytes, "reason": f"kt-kernel could not build the layer: {e}"})
                reporter.note(f"{label} I={inter}: skipped ({e})")
                reporter.step(f"{label}: failed I={inter}")
                continue
            except Exception as e:
                skipped.append({"x": nbytes, "reason": f"write failed: {type(e).__name__}: {e}"})
                reporter.note(f"{label} I={inter}: write failed ({type(e).__name__}: {e})")
                reporter.step(f"{label}: failed I={inter}")
                continue
            kernel = pt.extra["kernel"]
            points.append(pt)
            reporter.step(f"{label}: I={inter} {nbytes / pt.t_ms / 1e6:.1f} GB/s")

        def again(p: Point) -> Point:
            try:
                return _time_write(
                    task, p.extra["inter"], p.extra["layer_experts"], hosts, opts, cpu, kt, numa_ids, pinned
                )
            except Exception:  # the first timing stands
                return p

        # a write slower than a larger one of the curve is timed again too (`slower_than_a_larger_write`)
        larger = {id(p) for p in slower_than_a_larger_write(Curve("stage_a_write", "bytes", tuple(points)))}
        points = retime(points, again, reporter, label, every=False, suspect=lambda p: id(p) in larger)
        if points:
            measured.append((len(curves), task))
        if points or skipped:
            curves.append(
                Curve(
                    kind="stage_a_write",
                    x_unit="bytes",
                    points=tuple(sorted(points, key=lambda p: p.x)),
                    params={
                        "method": task.method,
                        "threads": task.threads,
                        "threadpools": task.threadpools,
                        "kernel": kernel,
                    },
                    backend=kt.backend,
                    skipped=tuple(skipped),
                )
            )
    if measured:
        law_pass()
    hosts.clear()
    gc.collect()
    return curves
