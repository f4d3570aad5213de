"""`kttune probe`: measure this machine and write its hardware profile.

Inventory and timer check first, then every probe of `PROBES` (one `Probe` record each: the curve
kinds it writes, what it needs, its plan and its run) that the options and this machine allow, in
order: CPU expert kernels (`probes/cpu_moe.py`), stage A (`probes/stage_a.py`), kt-kernel's host RAM
against max_len (`probes/host_ram.py`), the GPU probes of `kttune.probes.gpu_suite` (when that
module exists and a CUDA GPU is present), the all-reduce over two or more GPUs. Adding a probe is
adding a record (docs/howto-add-a-probe.md). The profile is written atomically to `ProbeOptions.out` (if given) and to
the cache (`kttune.paths.profile_cache_path(fingerprint)`), where `kttune search` finds it.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import itertools
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from kttune.errors import UserError
from kttune.hw.fingerprint import fingerprint
from kttune.hw.profile import Curve, HardwareProfile, Inventory, Point, Provenance, curve_key, save_profile
from kttune.hw.shape_law import shape_law_probe_advice, shape_set_key
from kttune.paths import profile_cache_path
from kttune.kernels.kt_ext import load_kt_kernel
from kttune.probes.common import NullReporter, Reporter, busy_note, probe_thread_counts, disturbed_note, timer_info
from kttune.probes.cpu_moe import (
    FULL_SHAPES,
    ISOLATE_ABOVE_BYTES,
    QUICK_SHAPE,
    CpuMoeOptions,
    CpuMoePlan,
    kept_layer_bytes,
    law_by_pool,
    plan_cpu_moe,
    probe_cpu_moe,
    retime_apart,
    shape_from_model,
    token_series,
)
from kttune.probes.cpu_moe_shape import ShapeLawOptions, ShapeLawPlan, plan_shape_law, probe_shape_law
from kttune.probes.host_ram import HostRamPlan, plan_host_ram, run_host_ram_step
from kttune.probes.inventory import (
    collect_inventory,
    last_level_cache_bytes,
    machine_name,
    numa_nodes_with_cpus,
    smt_logical,
    usable_cores,
)
from kttune.probes.isolated import child_bytes_bound, packed, run_isolated
from kttune.probes.stage_a import (
    QUICK_CACHE_MULTIPLE,
    StageAOptions,
    StageAPlan,
    cold_layer_bytes,
    kept_write_bytes,
    plan_stage_a,
    probe_stage_a,
)
from kttune.spec.methods import UNASKED_MX
from kttune.units import MIB

# The quick layer (32 experts, top-8) runs 256 rows an expert at 1,024 tokens, the rows a model's hybrid
# forwards of 1-3K tokens run at (64-192 for 128 experts at top-8). Timed only to 256 tokens (64 rows),
# its matrix-kernel rate comes from 16-64 rows, which cost Sapphire Rapids 1.1-1.3x more per flop than
# 64-256 rows (docs/probe.md#the-quick-layers-series-how-far-up-in-tokens).
QUICK_MAX_TOKENS = 1024
FULL_MAX_TOKENS = 8192


@dataclass(frozen=True)
class ProbeOptions:
    """What `kttune probe` measures.

    quick: a reduced probe (one small expert shape, tokens up to 1,024, fewer repeats, the layerwise
        pipeline over at most 2 GiB of each layer) at two kt-kernel thread counts, cores-5 and
        cores-3 (`kttune.probes.common.kt_thread_counts`): about a minute, on the 16-core H200 box
        (59.5 s with the 256-token series) and on the H100 box (52-57 s at 1,024 tokens, 49-54 s at 256,
        alternating on one instance); 71-76 s on a 2-core AMX host, where the 256-token series took
        56-58 s (docs/probe.md). Timing MXFP4 too (since 2026-12-07) took the CPU-only quick probe on the
        development VM from 60 s to 73 s (one run each).
    model: a `kttune.spec.model_spec.ModelSpec`: measure its expert shape (H, I, E, top-k) instead
        of the representative shapes (E shrinks, with a reason, if the layer does not fit in RAM).
    methods: KT methods to measure (default: every one the host's kt-kernel runs).
    threads: kt-kernel worker thread counts for CPU MoE, stage A and the pipeline alike (default:
        `kt_thread_counts`: cores-5, -3, -1 in full, cores-5 and -3 in quick mode).
    max_tokens: largest token count (default 1,024 quick, 8192 full).
    out: also write the profile here.
    merge_cached: start from this machine's cached profile (same fingerprint) and replace only the
        curves measured now, so CPU and GPU parts, or methods, can be probed in separate runs.
    cpu_moe, stage_a, host_ram, gpu: run those steps (host_ram: kt-kernel's reserved and resident
        host RAM against max_len, `kttune.probes.host_ram`; it needs kt-kernel and the CPU MoE step;
        by default a full probe runs it and a quick one leaves it out, to stay under a minute on a
        KT-class box).
    shape_law: measure kt-kernel's cost per output element per method (`probes/cpu_moe_shape.py`: five
        expert shapes timed in shared rounds), which carries the CPU MoE curves to expert shapes the
        probe did not measure (docs/cost-model.md#the-expert-shape-law). None: in a full probe
        without a model (its representative shapes are not the served model's), not in a quick one
        or one of a model (whose own shape is measured).
    attention_block: time the attention block (`probes/gpu_attention.probe_attention_block`: the
        model's, or the representative ones) even without the rest of the GPU probes (`gpu` runs it
        too); it needs CUDA. `kttune tune` runs it alone when the cached profile lacks this model's.
    """

    quick: bool = False
    model: Any = None
    methods: tuple[str, ...] = ()
    threads: tuple[int, ...] = ()
    max_tokens: int | None = None
    out: Path | None = None
    write_cache: bool = True
    merge_cached: bool = True  # keep curves of this machine's cached profile that were not re-measured
    cpu_moe: bool = True
    stage_a: bool = True
    host_ram: bool | None = None  # None: in a full probe, not in a quick one
    shape_law: bool | None = None  # None: in a full probe without a model
    gpu: bool = True
    attention_block: bool = False  # also without `gpu` (which runs it anyway)
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
    shapes = (
        (shape_from_model(options.model),)
        if options.model is not None
        else ((QUICK_SHAPE,) if options.quick else FULL_SHAPES)
    )
    common: dict[str, Any] = dict(
        shapes=shapes,
        tokens=tuple(token_series(max_tokens, options.quick)),
        methods=tuple(options.methods),
        threads=tuple(options.threads),
        quick=options.quick,
        model_methods=(options.model.default_method,) if options.model is not None else UNASKED_MX,
    )
    if options.quick:
        return CpuMoeOptions(**common, warmup=1, repeats=3, min_total_s=0.1, max_repeats=10, max_point_s=1.0)
    return CpuMoeOptions(**common, warmup=2, repeats=3, min_total_s=0.3, max_repeats=30, max_point_s=2.0)


# Where the last-level cache size is unknown, a cold CPU MoE layer cycles over at least this much.
COLD_CPU_MOE_FLOOR_BYTES = 512 * MIB


def cold_cpu_moe_options(options: ProbeOptions, llc_bytes: int | None = None) -> CpuMoeOptions:
    """`cpu_moe_options(options)` with each layer cycled over copies whose weights reach twice the
    last-level cache (`llc_bytes`; this host's when None), as the quick stage A source does: each
    timed call then reads its experts from DRAM, as a server's forward does, where one small layer
    stays in the cache between calls (docs/probe.md#the-quick-layer-in-the-cache). The probe's own
    options keep one layer (`cold_bytes` 0); the cold variant must say so itself: from 2026-12-04 to
    2026-12-07 `benchmarks/bench_cpu_moe_cold.py` took the probe's options for its cold variant and
    timed seven H100 instances' quick layer warm twice."""
    if llc_bytes is None:
        llc_bytes = last_level_cache_bytes()
    opts = cpu_moe_options(options)
    return replace(opts, cold_bytes=cold_layer_bytes(COLD_CPU_MOE_FLOOR_BYTES, llc_bytes, QUICK_CACHE_MULTIPLE))


def without_empty_curves(curves: list[Curve]) -> tuple[list[Curve], list[str]]:
    """`curves` less those whose every size was skipped (RAM short while it ran, a layer kt-kernel
    could not build: each skip is a `Curve.skipped` entry), and a note for each left out: a profile
    holds measured points only, and the reasons stay in its notes."""
    kept, notes = [], []
    for c in curves:
        if c.points:
            kept.append(c)
            continue
        what = " ".join(str(c.params[k]) for k in ("method", "threads") if k in c.params)
        reasons = "; ".join(dict.fromkeys(str(s.get("reason", "")) for s in c.skipped)) or "no reason recorded"
        notes.append(f"{c.kind} {what}: no size could be measured ({reasons}); left out of the profile")
    return kept, notes


def stage_a_options(options: ProbeOptions, llc_bytes: int | None = None) -> StageAOptions:
    """What the stage A probe writes: the model's expert widths (or representative ones), from a
    source larger than the last-level cache (`llc_bytes`: the probe passes its inventory's; read from
    this host's sysfs when None)."""
    if llc_bytes is None:
        llc_bytes = last_level_cache_bytes()
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
        return StageAOptions(
            hidden=h,
            inters=inters,
            methods=methods,
            threads=tuple(options.threads),
            layer_bytes=cold_layer_bytes(64 * MIB, llc_bytes, QUICK_CACHE_MULTIPLE),
            warmup=1,
            repeats=5,
            min_total_s=0.05,
            max_repeats=50,
        )
    return StageAOptions(
        hidden=h,
        inters=inters,
        methods=methods,
        threads=tuple(options.threads),
        layer_bytes=cold_layer_bytes(StageAOptions.layer_bytes, llc_bytes),
    )


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


# ---- the probes, one record each, in the order `kttune probe` runs them ------------------------------


@dataclass(frozen=True)
class ProbeContext:
    """What every probe's plan and run see: the options, this machine, and the kt-kernel thread counts
    that CPU MoE, stage A and the GPU suite's layerwise pipeline all run (one `--kt-cpuinfer` drives
    both paths)."""

    options: ProbeOptions
    inventory: Inventory
    cores: int
    numa_ids: tuple[int, ...]
    threads: tuple[int, ...]
    reporter: Reporter = field(default_factory=NullReporter)

    @property
    def cpu(self) -> Any:
        return self.inventory.cpu


@dataclass(frozen=True)
class Need:
    """Something a probe needs on this machine; when it is missing the probe is left out, with
    `missing_note` (or silently when that gives None)."""

    name: str
    met: Callable[[ProbeContext], bool]
    missing_note: Callable[[ProbeContext], str | None] = lambda ctx: None


@dataclass(frozen=True)
class Probe:
    """One measuring step of `kttune probe`: the curve kinds it writes (rows of
    `kttune.hw.curve_kinds`), whether the options ask for it, what it needs on this machine, its plan
    (an object whose `steps` counts its progress steps; it may build on the plans of the probes before
    it, by kind) and its run (curves; notes go to the context's reporter)."""

    kind: str
    writes: tuple[str, ...]
    plan: Callable[[ProbeContext, dict[str, Any]], Any]
    run: Callable[[ProbeContext, Any], list[Curve]]
    needs: tuple[Need, ...] = ()
    wanted: Callable[[ProbeOptions], bool] = lambda options: True

    def missing(self, ctx: ProbeContext) -> Need | None:
        """The first need this machine does not meet, if any."""
        return next((n for n in self.needs if not n.met(ctx)), None)


GPU_SUITE = Need(
    "kttune.probes.gpu_suite",
    lambda ctx: _gpu_suite() is not None,
    lambda ctx: "GPU probes not run: kttune.probes.gpu_suite is not available in this build",
)
CUDA = Need(
    "CUDA",
    lambda ctx: _cuda_available(),
    lambda ctx: "GPU probes not run: torch has no CUDA (NVML sees GPUs)" if ctx.inventory.gpus else None,
)
TWO_GPUS = Need("two or more GPUs", lambda ctx: len(ctx.inventory.gpus) >= 2)


@dataclass(frozen=True)
class Steps:
    """A plan that is only its step count (probes that plan inside their own module)."""

    steps: int


def _plan_cpu_moe(ctx: ProbeContext, plans: dict[str, Any]) -> Any:
    return plan_cpu_moe(cpu_moe_options(ctx.options), ctx.cpu, ctx.cores, list(ctx.numa_ids))


def _run_cpu_moe(ctx: ProbeContext, plan: Any) -> list[Curve]:
    """Each (method, shape)'s curves; in a process of their own where the layers kt-kernel would keep
    pass `ISOLATE_ABOVE_BYTES` (a model's own layer per thread count: gigabytes each; consecutive
    ones share a process up to `child_bytes_bound`), each curve apart where one (method, shape)'s
    layers pass that bound too (`_cpu_moe_apart`), else here (the quick layer: the timings the
    calibrations rest on, without a process start per method)."""
    for note in plan.notes:
        ctx.reporter.note(note)
    opts = cpu_moe_options(ctx.options)
    curves = []
    bound = child_bytes_bound()
    parts = [(p, kept_layer_bytes(p, opts, ctx.cpu)) for p in plan.by_layer()]
    kw = dict(cores=ctx.cores, numa_ids=list(ctx.numa_ids))

    def where(part: tuple[CpuMoePlan, int]) -> str:
        p, kept = part
        return "here" if kept <= ISOLATE_ABOVE_BYTES else "apart" if kept > bound and len(p.tasks) > 1 else "child"

    for how, run in itertools.groupby(parts, key=where):
        run = list(run)
        if how == "here":
            curves += probe_cpu_moe(opts, ctx.cpu, ctx.reporter, plan=CpuMoePlan.joined([p for p, _ in run]), **kw)
        elif how == "child":
            curves += _in_children(
                ctx, probe_cpu_moe, run, CpuMoePlan.joined, _cpu_moe_name, "its curves", opts, ctx.cpu, **kw
            )
        else:
            for p, _ in run:
                curves += _cpu_moe_apart(ctx, p, opts, kw)
    for n in thread_cliff_notes(curves, ctx.cores, logical=smt_logical(ctx.cpu, ctx.cores)):
        ctx.reporter.note(n)
    if note := disturbed_note(curves, "CPU MoE"):
        ctx.reporter.note(note)
    if curves and not shape_law_runs(ctx.options) and (advice := shape_law_probe_advice(curves[0].backend, ctx.cpu)):
        ctx.reporter.note(advice)
    return curves


def _cpu_moe_name(group: list[CpuMoePlan]) -> str:
    return "cpu_moe " + ", ".join(
        f"{p.tasks[0].method} {p.tasks[0].shape.label}" + (f" {p.tasks[0].threads}t" if len(p.tasks) == 1 else "")
        for p in group
    )


def _cpu_moe_apart(ctx: ProbeContext, plan: CpuMoePlan, opts: CpuMoeOptions, kw: dict[str, Any]) -> list[Curve]:
    """One (method, shape) whose layers pass what one process may keep (`child_bytes_bound`: a model's
    own layer of tens of GB at each thread count): its curves in processes of their own, as many to one
    as the bound allows, then the thread law over them, each curve's slow points timed again in a
    process of its own (`retime_apart`): each process keeps about one curve's layer, not every count's."""
    one = [CpuMoePlan([t], plan.backend) for t in plan.tasks]
    parts = [(p, kept_layer_bytes(p, opts, ctx.cpu)) for p in one]
    curves = _in_children(
        ctx, probe_cpu_moe, parts, CpuMoePlan.joined, _cpu_moe_name, "its curves", opts, ctx.cpu, law=False, **kw
    )
    task_of = {(t.threads, tuple(t.numa_nodes)): t for t in plan.tasks}

    def again(curve: Curve, points: list[Point], label: str) -> list[Point]:
        task = task_of[(int(curve.params["threads"]), tuple(curve.params.get("numa_nodes") or ()))]
        try:
            return run_isolated(
                retime_apart,
                opts,
                ctx.cpu,
                reporter=ctx.reporter,
                task=task,
                curve=curve,
                points=points,
                label=label,
                numa_ids=kw["numa_ids"],
            )
        except Exception as e:  # noqa: BLE001 - a repeat timing that fails keeps the timings taken, as `retime` does
            ctx.reporter.note(f"{label}: could not be timed again ({e}); the timings taken kept")
            return points

    return law_by_pool(curves, ctx.reporter, curve_again=again)


def shape_law_runs(options: ProbeOptions) -> bool:
    """Whether the probe measures the expert-shape law: as asked, else in a full probe without a model."""
    if options.shape_law is not None:
        return options.shape_law
    return not options.quick and options.model is None


def _plan_shape_law(ctx: ProbeContext, plans: dict[str, Any]) -> ShapeLawPlan:
    # at the probe's first kt-kernel thread count (cores - 5 on a KT-class box: the count the
    # project's constants were measured at), one pool
    opts = ShapeLawOptions(threads=min(ctx.threads), methods=tuple(ctx.options.methods))
    return plan_shape_law(opts, ctx.cpu)


def _run_shape_law(ctx: ProbeContext, plan: ShapeLawPlan) -> list[Curve]:
    return probe_shape_law(plan, ctx.cpu, ctx.reporter, numa_ids=ctx.numa_ids)


def _plan_stage_a(ctx: ProbeContext, plans: dict[str, Any]) -> Any:
    opts = stage_a_options(ctx.options, ctx.cpu.last_level_cache_bytes)
    return plan_stage_a(opts, ctx.cpu, ctx.cores, list(ctx.numa_ids), ctx.options.quick)


def _in_children(
    ctx: ProbeContext,
    fn: Callable[..., list[Curve]],
    parts: list[tuple[Any, int]],
    join: Callable[[list[Any]], Any],
    name: Callable[[list[Any]], str],
    what: str,
    *args: Any,
    **kwargs: Any,
) -> list[Curve]:
    """`fn(*args, plan=..., **kwargs)` over (plan, bytes it leaves behind) parts, as few to a spawned
    process as `child_bytes_bound` allows (`packed`, `run_isolated`). A process that dies (out of
    memory, a crash in kt-kernel) is a note naming its parts (`name`), and the others stand."""
    curves: list[Curve] = []
    for sized in packed(parts, lambda part: part[1], child_bytes_bound()):
        group = [p for p, _ in sized]
        try:
            curves += run_isolated(fn, *args, reporter=ctx.reporter, plan=join(group), **kwargs)
        except RuntimeError as e:
            ctx.reporter.note(f"{name(group)}: {e}; {what} are left out of the profile")
    return curves


def _run_stage_a(ctx: ProbeContext, plan: Any) -> list[Curve]:
    """The methods' writes in processes of their own, as many methods to one as keep at most
    `child_bytes_bound` of writer layers: kt-kernel never frees them, one per expert size and thread
    count, each cycling over a multiple of the last-level cache (probes/isolated.py)."""
    for note in plan.notes:
        ctx.reporter.note(note)
    opts = stage_a_options(ctx.options, ctx.cpu.last_level_cache_bytes)
    curves = _in_children(
        ctx,
        probe_stage_a,
        [(p, kept_write_bytes(p, opts, ctx.cpu)) for p in plan.by_method()],
        StageAPlan.joined,
        lambda group: "stage A " + ", ".join(p.tasks[0].method for p in group),
        "its writes",
        opts,
        ctx.cpu,
        cores=ctx.cores,
        numa_ids=list(ctx.numa_ids),
        quick=ctx.options.quick,
    )
    if note := disturbed_note(curves, "stage A writes"):
        ctx.reporter.note(note)
    return curves


def _plan_host_ram(ctx: ProbeContext, plans: dict[str, Any]) -> HostRamPlan:
    return host_ram_plan(ctx.options, cpu_moe_options(ctx.options), plans["cpu_moe"], ctx.threads)


def _plan_gpu(ctx: ProbeContext, plans: dict[str, Any]) -> Steps:
    """The GPU suite's step count, 0 when it cannot count them beforehand (then its own plan adds
    to the total)."""
    suite = _gpu_suite()
    try:
        n = (
            int(
                suite.count_steps(
                    ctx.inventory, ctx.options.model, ctx.options.quick, methods=tuple(ctx.options.methods)
                )
            )
            if hasattr(suite, "count_steps")
            else 0
        )
    except Exception:
        n = 0
    return Steps(n)


def _run_gpu(ctx: ProbeContext, plan: Steps) -> list[Curve]:
    o = ctx.options
    # the pipeline runs at the CPU probes' thread counts: one --kt-cpuinfer drives both paths
    curves = list(
        _gpu_suite().run_gpu_probes(
            ctx.inventory, o.model, o.quick, ctx.reporter, threads=ctx.threads, methods=tuple(o.methods)
        )
    )
    if note := disturbed_note([c for c in curves if c.kind == "pipeline"], "layerwise pipeline"):
        ctx.reporter.note(note)
    return curves


def _block_specs(ctx: ProbeContext) -> tuple:
    """The models whose attention block is timed: the probe's model, else one GQA and one MLA."""
    from kttune.probes.gpu_common import shapes_for

    return shapes_for(ctx.options.model, tuple(ctx.options.methods)).blocks


def _run_attention_block(ctx: ProbeContext, plan: Steps) -> list[Curve]:
    """One curve per model of `_block_specs`, through the GPU suite's step runner (a block that
    fails is a note, the others stand)."""
    from kttune.probes import gpu_attention

    q = ctx.options.quick
    steps = [
        (
            f"attention block {spec.name}",
            lambda spec=spec: [gpu_attention.probe_attention_block(spec, quick=q, reporter=ctx.reporter)],
        )
        for spec in _block_specs(ctx)
    ]
    return _gpu_suite().run_steps(steps, ctx.reporter)


def _run_allreduce(ctx: ProbeContext, plan: Steps) -> list[Curve]:
    """Tensor parallelism: each layer all-reduces twice. A failure is a note; the other curves stand."""
    from kttune.probes.allreduce import probe_allreduce

    n = len(ctx.inventory.gpus)
    try:
        curve = probe_allreduce(n, quick=ctx.options.quick)
    except Exception as e:  # noqa: BLE001 - the other curves stand
        ctx.reporter.note(f"all-reduce probe failed ({type(e).__name__}: {e})")
        return []
    ctx.reporter.step(f"all-reduce over {n} GPUs", 0)
    return [curve]


PROBES: tuple[Probe, ...] = (
    Probe("cpu_moe", ("cpu_moe",), _plan_cpu_moe, _run_cpu_moe, wanted=lambda o: o.cpu_moe),
    Probe(
        "cpu_moe_shape",
        ("cpu_moe_shape",),
        _plan_shape_law,
        _run_shape_law,
        wanted=lambda o: o.cpu_moe and shape_law_runs(o),
    ),
    Probe("stage_a", ("stage_a_write",), _plan_stage_a, _run_stage_a, wanted=lambda o: o.stage_a),
    Probe(
        "host_ram",
        ("host_ram",),
        _plan_host_ram,
        lambda ctx, plan: run_host_ram_step(plan, ctx.reporter),
        wanted=lambda o: o.cpu_moe and host_ram_runs(o),
    ),
    Probe(
        "gpu",
        ("h2d", "d2h", "stage_c_repack", "pipeline", "gpu_moe", "gpu_gemm", "attention"),
        _plan_gpu,
        _run_gpu,
        needs=(GPU_SUITE, CUDA),
        wanted=lambda o: o.gpu,
    ),
    Probe(
        "attention_block",
        ("attention_block",),
        lambda ctx, plans: Steps(len(_block_specs(ctx))),
        _run_attention_block,
        needs=(GPU_SUITE, CUDA),
        wanted=lambda o: o.gpu or o.attention_block,
    ),
    Probe(
        "allreduce",
        ("allreduce",),
        lambda ctx, plans: Steps(0),
        _run_allreduce,  # its progress step advances 0
        needs=(GPU_SUITE, CUDA, TWO_GPUS),
        wanted=lambda o: o.gpu,
    ),
)


@dataclass(frozen=True)
class ProbePlan:
    """What one `kttune probe` run measures: each probe's plan (by kind, in PROBES order) for the
    probes that run, the need each left-out probe misses, and the kt-kernel thread counts."""

    threads: tuple[int, ...]
    plans: dict[str, Any]
    missing: dict[str, Need] = field(default_factory=dict)

    def __getitem__(self, kind: str) -> Any:
        """The plan of probe `kind`, None when it does not run."""
        return self.plans.get(kind)

    @property
    def steps(self) -> int:
        return sum(p.steps for p in self.plans.values())


def plan_probe(
    options: ProbeOptions,
    cpu: Any,
    cores: int,
    numa_ids: list[int],
    inventory: Inventory | None = None,
    reporter: Reporter | None = None,
) -> ProbePlan:
    """Every probe's plan for `cores` usable cores (`inventory` defaults to this CPU alone)."""
    return _plan(_context(options, inventory or Inventory(cpu=cpu), cores, numa_ids, reporter))


def _context(
    options: ProbeOptions, inv: Inventory, cores: int, numa_ids: list[int], reporter: Reporter | None
) -> ProbeContext:
    threads = tuple(probe_thread_counts(cores, options.quick, options.threads, smt_logical(inv.cpu, cores)))
    return ProbeContext(options, inv, cores, tuple(numa_ids), threads, reporter or NullReporter())


def _plan(ctx: ProbeContext) -> ProbePlan:
    plans: dict[str, Any] = {}
    missing: dict[str, Need] = {}
    for probe in PROBES:
        if not probe.wanted(ctx.options):
            continue
        need = probe.missing(ctx)
        if need is not None:
            missing[probe.kind] = need
        else:
            plans[probe.kind] = probe.plan(ctx, plans)
    return ProbePlan(ctx.threads, plans, missing)


def host_ram_runs(options: ProbeOptions) -> bool:
    """Whether the probe runs the host-RAM step: as asked, else in a full probe only."""
    return (not options.quick) if options.host_ram is None else options.host_ram


def host_ram_plan(options: ProbeOptions, moe_opts: CpuMoeOptions, moe: Any, threads: tuple[int, ...]) -> HostRamPlan:
    """The host-RAM step over the CPU MoE probe's first shape (the model's with `--model`, else the
    small quick shape or the first representative one) and methods, at its largest thread count."""
    methods = tuple(dict.fromkeys(t.method for t in moe.tasks))
    return plan_host_ram(moe_opts.shapes[0], methods, options.quick, threads=max(threads, default=1))


def run_probe(options: ProbeOptions, reporter: Reporter | None = None) -> HardwareProfile:
    """Measure this machine (every probe of PROBES that its options and this machine allow, in
    order); write the profile to `options.out` and the cache; return it."""
    rep = _RecordingReporter(reporter or NullReporter())
    load = CpuLoadMonitor()
    uptime = host_uptime_s()
    inv = collect_inventory()
    inv = _inventory_with_loaded_variant(inv, rep)
    for n in inv.notes:
        rep.note(n)
    cores = usable_cores(inv.cpu)

    timer = timer_info()
    if timer.resolution_ns is not None and timer.resolution_ns > 1000:
        rep.note(
            f"perf_counter resolution is {timer.resolution_ns:.0f} ns (clocksource {timer.clocksource}): sub-ms timings are coarse"
        )

    ctx = _context(options, inv, cores, list(numa_nodes_with_cpus(inv.cpu)), rep)
    plan = _plan(ctx)
    gpu = plan["gpu"]
    rep.grow_on_replan = gpu is not None and gpu.steps == 0  # the GPU suite counts its own steps then
    rep.plan(plan.steps, "probe" + (" (quick)" if options.quick else ""))

    curves: list[Curve] = []
    for probe in PROBES:
        if probe.kind in plan.plans:
            curves += probe.run(ctx, plan[probe.kind])
        elif probe.kind in plan.missing:
            note = plan.missing[probe.kind].missing_note(ctx)
            if note and note not in rep.notes:
                rep.note(note)

    curves, empty = without_empty_curves(curves)
    for note in empty:
        rep.note(note)
    if note := busy_note(curves):
        rep.note(note)
    share = load.other_share()
    if share is not None and share > 0.10:
        rep.note(
            f"other processes used {share * 100:.0f} % of the CPUs while probing: timings are inflated and noisy; "
            "re-run `kttune probe` on an idle machine"
        )

    fp = fingerprint(inv)
    if options.merge_cached:
        curves = with_cached_curves(fp, curves, rep)
    prov = Provenance(
        kind="measured",
        machine=machine_name(inv),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        tool_version=_tool_version(),
        command=options.command or ("kttune probe" + (" --quick" if options.quick else "")),
        notes=tuple(dict.fromkeys(rep.notes)),
        host_uptime_s=uptime,
    )
    profile = HardwareProfile(provenance=prov, inventory=inv, curves=tuple(curves), fingerprint=fp, timer=timer)
    for path in profile_paths(options, profile):
        save_profile(profile, path)
    return profile


def host_uptime_s(path: str = "/proc/uptime") -> float | None:
    """Seconds since the host booted (the first field of /proc/uptime), None where it cannot be read."""
    try:
        with open(path) as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class CpuLoadMonitor:
    """How much CPU other processes used while we measured: /proc/stat busy time minus this
    process's own CPU time (kt-kernel's worker threads included) and its ended children's (the steps
    run in a process of their own, probes/isolated.py). Other load on the cores is the first suspect
    when repeated probes disagree."""

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
        return time.monotonic(), busy_s, t.user + t.system + t.children_user + t.children_system

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
        parts = [
            f"{t[n][1]:.2f} ms at {n}" + (" (kt run's 0.8 x logical)" if n == kt_run else "")
            for n in above
            if t[n][0] == x
        ]
        notes.append(
            f"{method} H{h} I{i} E{e}: {tokens} take {t_best:.2f} ms with {best} threads on {cores} cores and "
            + ", ".join(parts)
            + f": the thread cliff starts at {cliff} threads (the driving thread starves), "
            f"keep --kt-cpuinfer below {cliff}"
        )
    return notes


def with_cached_curves(fp: str, curves: list[Curve], rep: Reporter) -> list[Curve]:
    """`curves` after the curves of this machine's cached profile (fingerprint `fp`) that they do not
    measure again, saying how many were kept (`ProbeOptions.merge_cached`)."""
    kept = _cached_curves_not_remeasured(fp, curves)
    if kept:
        rep.note(
            f"kept {len(kept)} curves of this machine's cached profile that this run did not re-measure "
            "(pass --fresh to drop them)"
        )
    return kept + curves


def _cached_curves_not_remeasured(fp: str, new: list[Curve]) -> list[Curve]:
    from kttune.hw.profile import load_profile

    path = profile_cache_path(fp)
    if not path.is_file():
        return []
    try:
        old = load_profile(path)
    except UserError:
        return []  # unreadable or another format version: start afresh
    return curves_not_remeasured(old.curves, new)


def curves_not_remeasured(old, new) -> list[Curve]:
    """The curves of `old` that no curve of `new` measures again (same kind and params); an
    expert-shape set (`kttune.hw.shape_law.shape_set_key`, read together) is replaced whole when any
    of its curves is measured again, so no shape of an earlier set's rounds joins a later one's."""

    def set_of(c: Curve) -> tuple | None:
        return shape_set_key(c) if c.kind == "cpu_moe_shape" else None

    fresh = {curve_key(c) for c in new}
    sets = {k for c in new if (k := set_of(c)) is not None}
    return [c for c in old if curve_key(c) not in fresh and set_of(c) not in sets]


def profile_paths(options: ProbeOptions, profile: HardwareProfile) -> list[Path]:
    """Where `run_probe` writes the profile: `--out` (if given) and the fingerprint cache."""
    paths = []
    if options.out is not None:
        paths.append(Path(options.out))
    if options.write_cache:
        paths.append(profile_cache_path(profile.fingerprint))
    return paths
