"""CPU expert kernel probe: kt-kernel's real MoE kernels, driven through its extension module.

kt-kernel's Python wrapper (`KTMoEWrapper`) needs pinned memory and a GPU stream; its extension
does not. This module drives the extension as `NativeMoEWrapper.load_weights` /
`AMXMoEWrapper.load_weights_from_tensors` and `BaseMoEWrapper.submit_forward` do (kt-kernel 0.7.2,
`kt_kernel/utils/amx.py`, `experts_base.py`): one `CPUInfer` worker pool per thread count, split
into one sub-pool per NUMA node like `--kt-threadpool-count` (`_get_cpu_infer`: pool i gets
`n // p + (i < n % p)` threads), a `MOEConfig` with per-expert weight pointers, the method's MoE
class picked from what the loaded variant compiled in, `load_weights_task`, then
`forward_task(...)` submitted and `sync()`ed per timed forward.

Measured per method, expert shape and thread count: the time of one MoE layer forward against the
token count (`Curve(kind="cpu_moe", x_unit="tokens")`, params as in `kttune.hw.profile`). Routing is
uniform random top-k. Thread counts include the whole pool (`threads == cores`), where the driving
thread is starved (docs/sglang-kt.md#the-cpuinfer-thread-cliff: 8 ms vs 0.3 ms for one token on the GPU box).

Without kt-kernel the same curves come from `kttune.kernels.cpu_moe` (torch), labelled
`backend="torch-cpu"`. The layer itself is `kttune.kernels.kt_moe.KtMoeLayer` over experts of
`kttune.kernels.expert_weights`; this module plans and measures.
"""

from __future__ import annotations

import gc
import itertools
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from kttune.errors import UserError
from kttune.hw.profile import CpuInfo, Curve, Point
from kttune.kernels.expert_weights import HostExperts, expert_nbytes
from kttune.kernels.kt_ext import KtKernel, kt_kernel_error, load_kt_kernel
from kttune.kernels.kt_moe import KtMoeLayer, kt_class_name, kt_method_leaks
from kttune.probes.common import (
    KtPoolTask,
    NullReporter,
    Reporter,
    kt_thread_counts,
    measure,
    probe_thread_counts,
    law_retime,
    retime,
    retime_by_thread_law,
)
from kttune.spec.kt_classes import kt_matmul_above
from kttune.spec.moe_shape import MoeLayerShape
from kttune.units import GIB

# Most copies of one layer the timed calls cycle over (`CpuMoeOptions.cold_bytes`).
MAX_COLD_COPIES = 64

# Methods this probe can build weights for, in the order they are measured.
PROBE_METHODS = ("AMXINT4", "AMXINT8", "BF16", "FP8", "FP8_PERCHANNEL", "RAWINT4", "MXFP4", "MXFP8")
# Those measured when none is asked for, with `CpuMoeOptions.model_methods` beside them: the model's
# own method for `--model` (DeepSeek-V4-Flash, gpt-oss and MiniMax-M3 ship MX experts), MXFP4 for a
# probe without a model (`kttune.spec.methods.UNASKED_MX`).
DEFAULT_METHODS = ("AMXINT4", "AMXINT8", "BF16", "FP8", "FP8_PERCHANNEL", "RAWINT4")


# Without a model: a small shape for --quick (fits anywhere, seconds per curve on 2 cores) and two
# representative shapes for the full probe (Qwen3-30B-A3B's and DeepSeek-V3's experts).
QUICK_SHAPE = MoeLayerShape(hidden=1024, inter=512, experts=32, top_k=8, name="small H1024 I512 E32 k8")
FULL_SHAPES = (
    MoeLayerShape(hidden=2048, inter=768, experts=128, top_k=8, name="Qwen3-30B-A3B experts"),
    MoeLayerShape(hidden=7168, inter=2048, experts=256, top_k=8, name="DeepSeek-V3 experts"),
)


def shape_from_model(model: Any) -> MoeLayerShape:
    """The expert shape the CPU probe measures of a `kttune.spec.model_spec.ModelSpec` (every method
    it runs; labelled "<model> experts")."""
    return MoeLayerShape.of_model(model, name=f"{model.name} experts")


def token_series(max_tokens: int, quick: bool) -> list[int]:
    """1 up to `max_tokens` geometrically (x4 in quick mode, x2 otherwise), ending at max_tokens."""
    step = 4 if quick else 2
    xs, t = [], 1
    while t < max_tokens:
        xs.append(t)
        t *= step
    xs.append(max_tokens)
    return sorted(set(xs))


def with_switch_points(tokens: Sequence[int], matmul_above: int | None) -> list[int]:
    """`tokens` with a point on each side of the length where kt-kernel switches GEMM kernels
    (`kttune.spec.kt_classes.kt_matmul_above`): the last length on the vector-matrix kernel and one a
    quarter past it on the matrix-matrix one, where the series spans the switch. A fit on both
    kernels needs each measured near the switch: a powers-of-two series leaves Kimi-K2's 192 between
    128 and 256 on the H200 box, where the call at 192 took 1.5x the call at 256
    (docs/cost-model.md#kt-kernels-two-gemm-kernels)."""
    xs = sorted(set(tokens))
    if matmul_above is None or not xs or not xs[0] < matmul_above < xs[-1]:
        return xs
    return sorted(set(xs) | {matmul_above, min(xs[-1], matmul_above + max(1, matmul_above // 4))})


def thread_series(cores: int, quick: bool) -> list[int]:
    """Thread counts to measure on `cores` cores: the same as stage A and the pipeline
    (`kttune.probes.common.kt_thread_counts`), so quick and full probes, and both paths, answer for
    the same `--kt-cpuinfer` values."""
    return kt_thread_counts(cores, quick)


def supported_methods(kt: KtKernel | None, isa: Sequence[str] = ()) -> list[str]:
    """The probe's methods the host can run (all of `PROBE_METHODS` with a compiled class)."""
    if kt is None:
        return ["BF16"]
    return [m for m in PROBE_METHODS if kt_class_name(kt, m, isa)]


def host_bytes_needed(method: str, shape: MoeLayerShape, max_tokens: int, threadpools: int = 1) -> tuple[int, int]:
    """(weights, scratch) bytes of host RAM a kt-kernel layer needs at its peak: the source weights,
    kt-kernel's own copy (BF16/FP8 copy through a per-pool temporary; AMX quantizes from a bf16
    temporary) and the forward scratch sized by `max_len` (`operators/avx2/moe_base.hpp`: per pool,
    `max_len * k + E` rows of activations and fp32 outputs). Approximate, on the safe side."""
    from kttune.spec.methods import bytes_per_expert, get_method

    e, h, i = shape.experts, shape.hidden, shape.inter
    src = e * expert_nbytes(method, h, i)
    if method in ("BF16", "FP8", "FP8_PERCHANNEL", "MXFP4", "MXFP8"):
        weights = 3 * src
    elif method == "RAWINT4":
        weights = 2 * src
    else:  # AMX online quantization: bf16 source + bf16 per-pool temporary + quantized copy
        weights = 2 * src + e * bytes_per_expert(get_method(method).cpu_format, h, i)
    rows = max_tokens * shape.top_k + e
    scratch = threadpools * rows * (10 * h + 14 * i + 320) + (threadpools + 1) * max_tokens * h * 4
    return int(weights), int(scratch * 1.25)


def available_ram_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


# ---- the probe -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuMoeOptions:
    """What to measure. Empty `methods`/`threads` mean: every method the host supports; the
    default thread series (`thread_series`). `max_point_s` caps one forward's predicted time: larger
    token counts are skipped with that reason (quick mode keeps the whole probe under a minute)."""

    shapes: tuple[MoeLayerShape, ...]
    tokens: tuple[int, ...]
    methods: tuple[str, ...] = ()
    threads: tuple[int, ...] = ()
    quick: bool = False
    sweep_threads_on_first_shape_only: bool = True
    max_point_s: float = 5.0
    warmup: int = 2
    repeats: int = 5
    min_total_s: float = 0.3
    max_repeats: int = 30
    ram_fraction: float = 0.7  # of the RAM available when a layer is built
    seed: int = 0
    # Expert weights the timed calls cycle over: a layer whose weights are fewer is built this many
    # times over (`cold_copies`, each call on the next copy), so each call reads its experts from
    # DRAM as a server's forward reads every layer's in turn, not from the last-level cache where one
    # small layer stays between calls. 0 (the probe's default): one layer. Measured on the H200 box
    # (`benchmarks/bench_cpu_moe_cold.py`): the quick layer over copies to 2x the L3 runs BF16 1.2-1.8x
    # slower at 1-256 tokens, but predicts eight models' own curves no better (mean 16% / 18% against
    # 18% / 14% from the one layer, two rounds): not the default (docs/probe.md#the-quick-layer-in-the-cache).
    cold_bytes: int = 0
    # Methods measured beside DEFAULT_METHODS when `methods` is empty, where the host runs them: the
    # method the probed model is served with (`kttune probe --model`), else `UNASKED_MX`.
    model_methods: tuple[str, ...] = ()


@dataclass(frozen=True)
class CpuMoeTask(KtPoolTask):
    """One cpu_moe curve: the layer's expert shape and the token counts timed."""

    shape: MoeLayerShape
    tokens: tuple[int, ...]
    numa_nodes: tuple[int, ...] = ()  # the pool's nodes when not every node (a one-node pool)


@dataclass
class CpuMoePlan:
    tasks: list[CpuMoeTask]
    backend: str
    notes: list[str] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return sum(1 + len(t.tokens) for t in self.tasks)

    def by_layer(self) -> list["CpuMoePlan"]:
        """One plan per (method, expert shape), in this plan's order, without the notes: the curves
        whose thread counts are measured, and timed again by the thread law, together
        (`probe_cpu_moe`)."""
        keys = list(dict.fromkeys((t.method, t.shape) for t in self.tasks))
        return [CpuMoePlan([t for t in self.tasks if (t.method, t.shape) == k], self.backend) for k in keys]

    @staticmethod
    def joined(plans: Sequence["CpuMoePlan"]) -> "CpuMoePlan":
        """The plans' tasks in one plan, in order, without the notes."""
        return CpuMoePlan([t for p in plans for t in p.tasks], plans[0].backend)


def plan_cpu_moe(opts: CpuMoeOptions, cpu: CpuInfo, cores: int, numa_ids: Sequence[int]) -> CpuMoePlan:
    """The list of (shape, method, thread count) curves to measure. Raises UserError on a method
    or thread count that this host cannot run."""
    kt = load_kt_kernel()
    supported = supported_methods(kt, cpu.isa)
    notes: list[str] = []
    if opts.methods:
        methods = []
        for m in opts.methods:
            key = m.strip().upper().replace("-", "_")
            if key not in PROBE_METHODS:
                raise UserError(f"the CPU probe cannot measure method {m!r}", "use some of " + ", ".join(PROBE_METHODS))
            if key not in supported:
                why = "kt-kernel is not importable" if kt is None else f"kt-kernel {kt.variant} has no kernel for it"
                raise UserError(f"method {key} cannot run on this host ({why})", "use some of " + ", ".join(supported))
            methods.append(key)
    else:
        methods = [m for m in supported if m in DEFAULT_METHODS or m in opts.model_methods]
    if kt is None:
        from kttune.extras import KT_KERNEL_INSTALL

        notes.append(
            f"kt-kernel not importable ({kt_kernel_error()}): CPU MoE timed with the torch fallback "
            f"(backend torch-cpu); for kt-kernel's own times: {KT_KERNEL_INSTALL}"
        )
    from kttune.probes.inventory import node_physical_cores, smt_logical

    all_threads = probe_thread_counts(cores, opts.quick, opts.threads, smt_logical(cpu, cores))
    for t in all_threads:
        if t < 1:
            raise UserError(f"thread count {t} is not positive", "pass --threads with counts of 1 or more")
    if opts.threads and max(all_threads) > (os.cpu_count() or cores):
        notes.append(f"thread counts above the {os.cpu_count()} CPUs oversubscribe the cores")
    edge = sorted(set(all_threads) & set(kt_thread_counts(cores, opts.quick))) or all_threads
    # Thread counts away from the edge only locate the optimum: every other token count suffices.
    sparse = tuple(sorted(set(opts.tokens[::2]) | {max(opts.tokens)})) if opts.tokens else ()
    pools = max(1, len(numa_ids))
    tasks = []
    for si, shape in enumerate(opts.shapes):
        shape_threads = all_threads if (si == 0 or not opts.sweep_threads_on_first_shape_only) else edge
        for method in methods:
            above = _matmul_above(kt, method, cpu, shape)
            for t in shape_threads:
                p = min(pools, t)
                while shape.inter % p:
                    p -= 1
                tokens = tuple(opts.tokens) if (t in edge or opts.threads or opts.quick) else sparse
                tasks.append(CpuMoeTask(method, t, p, shape=shape, tokens=tuple(with_switch_points(tokens, above))))
            if si == 0 and pools > 1 and not opts.threads:
                node = numa_ids[0]
                tasks += _one_node_tasks(opts, cpu, method, shape, node, node_physical_cores(cpu, node), above)
    if pools > 1 and not opts.threads:
        notes.append(
            f"{pools} NUMA nodes: the first shape is also measured on node {numa_ids[0]} alone (one pool), "
            "so `--kt-threadpool-count` and `--kt-numa-nodes` are chosen from measurements"
        )
    return CpuMoePlan(tasks=tasks, backend=kt.backend if kt else "torch-cpu", notes=notes)


def _matmul_above(kt: KtKernel | None, method: str, cpu: CpuInfo, shape: MoeLayerShape) -> int | None:
    """Where the class kt-kernel runs `method` with on this host switches GEMM kernels at `shape`."""
    return kt_matmul_above(kt_class_name(kt, method, cpu.isa), shape.experts, shape.top_k) if kt else None


def _one_node_tasks(
    opts: CpuMoeOptions,
    cpu: CpuInfo,
    method: str,
    shape: MoeLayerShape,
    node: int,
    node_cores: int,
    matmul_above: int | None,
) -> list[CpuMoeTask]:
    """A pool on one NUMA node (`--kt-threadpool-count 1 --kt-numa-nodes N`) at that node's own
    thread counts (its cores less the spare ones, and above them on SMT)."""
    from kttune.probes.inventory import smt_logical

    if node_cores < 2:
        return []
    counts = probe_thread_counts(node_cores, opts.quick, (), smt_logical(cpu, node_cores))
    tokens = tuple(with_switch_points(opts.tokens, matmul_above))
    return [CpuMoeTask(method, t, 1, shape=shape, tokens=tokens, numa_nodes=(node,)) for t in counts]


def _fit_shape(
    method: str, shape: MoeLayerShape, max_tokens: int, pools: int, budget: int
) -> tuple[MoeLayerShape, int, list[dict]]:
    """Shrink the layer to fit `budget` bytes: first fewer experts (down to 2 x top-k), then fewer
    tokens. Returns (shape, max_tokens, skipped entries with reasons)."""
    skipped: list[dict] = []
    gib = GIB
    e = shape.experts
    w, s = host_bytes_needed(method, shape, max_tokens, pools)
    while w + s > budget and e > 2 * shape.top_k:
        e = max(2 * shape.top_k, e // 2)
        w, s = host_bytes_needed(method, shape.with_experts(e), max_tokens, pools)
    if e != shape.experts:
        w0, s0 = host_bytes_needed(method, shape, max_tokens, pools)
        skipped.append(
            {
                "x": None,
                "reason": f"experts reduced from {shape.experts} to {e}: {method} layer needs {(w0 + s0) / gib:.1f} GiB, "
                f"{budget / gib:.1f} GiB usable",
            }
        )
        shape = shape.with_experts(e)
    t = max_tokens
    while w + s > budget and t > 1:
        t //= 2
        w, s = host_bytes_needed(method, shape, t, pools)
    if t != max_tokens:
        skipped.append(
            {"x": None, "reason": f"tokens above {t} skipped: scratch for {max_tokens} tokens does not fit in RAM"}
        )
    if w + s > budget:
        raise MemoryError(f"{method} {shape.label} needs {(w + s) / gib:.1f} GiB, {budget / gib:.1f} GiB usable")
    return shape, t, skipped


def _inputs(tokens: int, shape: MoeLayerShape, seed: int) -> tuple[Any, Any, Any, Any]:
    import torch

    from kttune.kernels.cpu_moe import random_routing

    g = torch.Generator().manual_seed(seed + tokens)
    x = torch.randn(tokens, shape.hidden, generator=g).to(torch.bfloat16)
    ids, w = random_routing(tokens, shape.experts, shape.top_k, seed=seed + tokens)
    out = torch.empty(tokens, shape.hidden, dtype=torch.bfloat16)
    return x, ids, w, out


def layer_nbytes(method: str, shape: MoeLayerShape) -> int:
    """Bytes of a layer's expert weights in `method`'s source format (what a forward reads)."""
    return shape.experts * expert_nbytes(method, shape.hidden, shape.inter)


def cold_copies(method: str, shape: MoeLayerShape, cold_bytes: int, budget: int, max_tokens: int) -> int:
    """How many copies of a layer the timed calls cycle over: enough that their expert weights reach
    `cold_bytes` (at most `MAX_COLD_COPIES`, and as many as fit in `budget` bytes); 1 for a layer at
    least that large."""
    layer = layer_nbytes(method, shape)
    if cold_bytes <= layer or layer <= 0:
        return 1
    w, s = host_bytes_needed(method, shape, max_tokens)
    fit = max(1, budget // max(1, w + s))
    return int(max(1, min(MAX_COLD_COPIES, fit, -(-cold_bytes // layer))))


# A (method, shape)'s layers that kt-kernel would keep past this many bytes are measured in a process of
# their own (kttune.probes.run): kt-kernel 0.7.2 never frees an AMX-family layer, and the curve of each
# thread count builds its own (docs/probe.md#the-cpu-moe-step-and-kt-kernels-kept-layers).
ISOLATE_ABOVE_BYTES = 2 * GIB


def kept_layer_bytes(plan: CpuMoePlan, opts: CpuMoeOptions, cpu: CpuInfo) -> int:
    """About how many bytes of layers measuring `plan` leaves behind in its process: per curve, the
    layer and its cold copies, where kt-kernel cannot free the class that runs the method
    (`kttune.spec.kt_classes.kt_class_leaks`); 0 without kt-kernel (the torch fallback frees its own)."""
    kt = load_kt_kernel()
    if kt is None:
        return 0
    total, budget = 0, int(available_ram_bytes() * opts.ram_fraction)
    for t in plan.tasks:
        if not kt_method_leaks(kt, t.method, cpu.isa):
            continue
        copies = cold_copies(t.method, t.shape, opts.cold_bytes, budget, max(t.tokens)) if opts.cold_bytes else 1
        total += copies * layer_nbytes(t.method, t.shape)
    return total


def _timer(run: Callable[[int], Callable[[], object]], opts: CpuMoeOptions) -> Callable[[int], Point]:
    """One point's timing at `n` tokens by the options' protocol (warm-up, repeats, minimum time)."""

    def timed(n: int) -> Point:
        return measure(
            run(n),
            x=n,
            warmup=opts.warmup,
            repeats=opts.repeats,
            min_total_s=opts.min_total_s,
            max_repeats=opts.max_repeats,
        )

    return timed


def _measure_curve(
    run: Callable[[int], Callable[[], object]],
    task: CpuMoeTask,
    tokens: Sequence[int],
    opts: CpuMoeOptions,
    reporter: Reporter,
    label: str,
) -> tuple[list[Point], list[dict]]:
    """Time `run(tokens)()` for each token count; skip sizes whose predicted time (linear from the
    last measured point) exceeds `opts.max_point_s`. After the curve, a point that took little time to
    time, or scattered, is timed again and the median of its timings kept (`kttune.probes.common.retime`)."""
    points: list[Point] = []
    skipped: list[dict] = []
    timed = _timer(run, opts)
    for n in tokens:
        if points:
            last = points[-1]
            predicted_s = last.t_ms / 1e3 * n / last.x
            if predicted_s > opts.max_point_s:
                skipped.append(
                    {
                        "x": n,
                        "reason": f"predicted {predicted_s:.1f} s per forward > {opts.max_point_s:g} s budget per point",
                    }
                )
                reporter.step(f"{label}: skip {n} tokens")
                continue
        pt = timed(n)
        points.append(pt)
        reporter.step(f"{label}: {n} tok {pt.t_ms:.2f} ms")
    return retime(points, lambda p: timed(int(p.x)), reporter, label), skipped


def _forward(layers: list[KtMoeLayer], shape: MoeLayerShape, seed: int) -> Callable[[int], Callable[[], object]]:
    """`run(n)`: one forward of n tokens, each call on the next of `layers` (the cold copies)."""

    def run(n: int) -> Callable[[], object]:
        x, ids, rw, out = _inputs(n, shape, seed)
        turn = itertools.cycle(layers)
        return lambda: next(turn).forward(x, ids, rw, out)

    return run


# The reason a curve's token count above what fits in RAM is skipped with.
NO_RAM = "does not fit in RAM"


@dataclass(frozen=True)
class _Built:
    """What one task's curve was measured on, so a later pass can time its points again."""

    task: CpuMoeTask
    shape: MoeLayerShape  # as fitted to the RAM (`_fit_shape`)
    tokens: int  # the largest forward the layers were built for
    weights: Any  # HostExperts of copy 0
    copies: int
    index: int  # the curve's place in the probe's list


def _kt_layers(b: _Built, opts: CpuMoeOptions, cpu: CpuInfo, kt: KtKernel, numa_ids: Sequence[int]) -> list[KtMoeLayer]:
    """The layer (and its cold copies, each from its own source) `b`'s curve is timed on; closes what
    it built before raising."""
    layers: list[KtMoeLayer] = []
    try:
        for i in range(b.copies):
            # each copy its own source too: RAWINT4 reads its int4 weights in place
            src = (
                b.weights
                if i == 0
                else HostExperts.random(
                    b.task.method, b.shape.hidden, b.shape.inter, b.shape.experts, seed=opts.seed + i
                )
            )
            layers.append(
                KtMoeLayer(
                    src,
                    top_k=b.shape.top_k,
                    threads=b.task.threads,
                    threadpools=b.task.threadpools,
                    numa_nodes=list(b.task.numa_nodes) or list(numa_ids),
                    max_tokens=b.tokens,
                    isa=cpu.isa,
                    kt=kt,
                )
            )
    except Exception:
        for lay in layers:
            lay.close()
        raise
    return layers


def probe_cpu_moe(
    opts: CpuMoeOptions,
    cpu: CpuInfo,
    reporter: Reporter | None = None,
    *,
    cores: int | None = None,
    numa_ids: Sequence[int] | None = None,
    plan: CpuMoePlan | None = None,
    law: bool = True,
) -> list[Curve]:
    """Measure the CPU MoE curves of `plan` (default: `plan_cpu_moe(opts, ...)`). One curve per
    (shape, method, threads). Never raises for a size that does not fit: it shrinks or skips it and
    says why (in `Curve.skipped` and to the reporter). With `law`, once a (method, shape)'s thread
    counts are all measured, the points slower than a larger pool allows are timed again
    (`law_by_pool`); without, the caller does that (curves measured in processes of their own:
    `retime_apart`)."""
    from kttune.probes.inventory import numa_nodes_with_cpus, usable_cores

    reporter = reporter or NullReporter()
    cores = cores or usable_cores(cpu)
    numa_ids = list(numa_ids) if numa_ids is not None else list(numa_nodes_with_cpus(cpu))
    plan = plan or plan_cpu_moe(opts, cpu, cores, numa_ids)
    for n in plan.notes:
        reporter.note(n)
    kt = load_kt_kernel()
    curves: list[Curve] = []
    weights_cache: dict[tuple, tuple[MoeLayerShape, int, list[dict], Any]] = {}
    built: list[_Built] = []  # the current (method, shape)'s kt-kernel curves

    def law_pass() -> None:
        """The thread law over the current (method, shape)'s curves, per pool (every node, or one)."""
        if not law:
            built.clear()
            return
        of_curve = {id(curves[b.index]): b for b in built}

        def again(c: Curve, points: list[Point], label: str) -> list[Point]:
            return _retime_on(of_curve[id(c)], points, label, opts, cpu, kt, numa_ids, reporter)

        idx = [b.index for b in built]
        for i, c in zip(idx, law_by_pool([curves[i] for i in idx], reporter, again)):
            curves[i] = c
        built.clear()

    for task in plan.tasks:
        label = f"cpu_moe {task.method} {task.threads}t"
        key = (task.method, task.shape)
        try:
            if key not in weights_cache:
                if built:
                    law_pass()
                weights_cache.clear()
                gc.collect()
                budget = int(available_ram_bytes() * opts.ram_fraction)
                shape, max_tok, skipped0 = _fit_shape(
                    task.method, task.shape, max(task.tokens), task.threadpools, budget
                )
                for s in skipped0:
                    reporter.note(f"{label} {task.shape.label}: {s['reason']}")
                w = (
                    HostExperts.random(task.method, shape.hidden, shape.inter, shape.experts, seed=opts.seed)
                    if kt is not None
                    else None
                )
                weights_cache[key] = (shape, max_tok, skipped0, w)
            shape, max_tok, skipped0, w = weights_cache[key]
        except MemoryError as e:
            reporter.note(f"{label}: skipped, {e}")
            reporter.step(f"{label}: skipped", advance=1 + len(task.tokens))
            continue
        tokens = [n for n in task.tokens if n <= max_tok]
        skipped = list(skipped0) + [{"x": n, "reason": NO_RAM} for n in task.tokens if n > max_tok]
        if skipped[len(skipped0) :]:
            reporter.step(f"{label}: skipped sizes", advance=len(task.tokens) - len(tokens))
        b = None
        if kt is not None:
            copies = (
                cold_copies(
                    task.method, shape, opts.cold_bytes, int(available_ram_bytes() * opts.ram_fraction), max(tokens)
                )
                if opts.cold_bytes
                else 1
            )
            b = _Built(task, shape, max(tokens), w, copies, len(curves))
            try:
                layers = _kt_layers(b, opts, cpu, kt, numa_ids)
            except Exception as e:
                reporter.note(f"{label}: kt-kernel could not build the layer ({type(e).__name__}: {e}); skipped")
                reporter.step(f"{label}: failed", advance=1 + len(tokens))
                continue
            layer = layers[0]
            reporter.step(f"{label}: loaded {layer.kernel_class}" + (f" x {copies}" if copies > 1 else ""))
            source = copies * layer_nbytes(task.method, shape)
            try:
                points, skipped_t = _measure_curve(
                    _forward(layers, shape, opts.seed), task, tokens, opts, reporter, label
                )
                points = [replace(p, extra={**p.extra, "source_bytes": source}) for p in points]
            finally:
                for lay in layers:
                    lay.close()
            backend, kernel = kt.backend, layer.kernel_class
        else:
            points, skipped_t = _torch_curve(task, shape, tokens, opts, reporter, label)
            backend, kernel = "torch-cpu", "kttune.kernels.cpu_moe.moe_forward(bf16)"
        curves.append(
            Curve(
                kind="cpu_moe",
                x_unit="tokens",
                points=tuple(points),
                params=moe_curve_params(task.method, task.threads, task.threadpools, shape, kernel, task.numa_nodes),
                backend=backend,
                skipped=tuple(skipped + skipped_t),
            )
        )
        if b is not None:
            built.append(b)
    if built:
        law_pass()
    weights_cache.clear()
    gc.collect()
    return curves


def law_by_pool(
    curves: list[Curve], reporter: Reporter, curve_again: Callable[[Curve, list[Point], str], list[Point]]
) -> list[Curve]:
    """`curves` (one method and shape at several thread counts) with the thread law applied per pool
    (every node, or the one-node curves), in their order (`retime_by_thread_law`): `curve_again` times
    a curve's named points again (`_retime_on` here, `retime_apart` in a process of its own)."""
    out = list(curves)
    for nodes in dict.fromkeys(tuple(c.params.get("numa_nodes") or ()) for c in curves):
        idx = [i for i, c in enumerate(curves) if tuple(c.params.get("numa_nodes") or ()) == nodes]
        for i, c in zip(idx, retime_by_thread_law([curves[i] for i in idx], None, reporter, "cpu_moe", curve_again)):
            out[i] = c
    return out


def retime_apart(
    opts: CpuMoeOptions,
    cpu: CpuInfo,
    reporter: Reporter | None = None,
    *,
    task: CpuMoeTask,
    curve: Curve,
    points: list[Point],
    label: str,
    numa_ids: Sequence[int],
) -> list[Point]:
    """`points` of `curve` (measured for `task` by `probe_cpu_moe(law=False)`) timed again as the
    thread law does (`law_retime`), on a layer built again as the curve's was: the experts it was
    fitted to, its cold copies (from its points' `source_bytes`), scratch for its largest forward. For a
    curve measured in a process of its own (kttune.probes.run): run in one too, it builds the layer
    once for all its points and leaves nothing behind."""
    reporter = reporter or NullReporter()
    kt = load_kt_kernel()
    prm = curve.params
    shape = replace(task.shape, hidden=int(prm["hidden"]), inter=int(prm["inter"]), experts=int(prm["experts"]))
    source = curve.points[0].extra.get("source_bytes") if curve.points else None
    no_ram = {s.get("x") for s in curve.skipped if s.get("reason") == NO_RAM}
    b = _Built(
        task,
        shape,
        max(n for n in task.tokens if n not in no_ram),
        HostExperts.random(task.method, shape.hidden, shape.inter, shape.experts, seed=opts.seed),
        max(1, int(source) // layer_nbytes(task.method, shape)) if source else 1,
        0,
    )
    return _retime_on(b, points, label, opts, cpu, kt, numa_ids, reporter)


def _retime_on(
    b: _Built,
    points: list[Point],
    label: str,
    opts: CpuMoeOptions,
    cpu: CpuInfo,
    kt: KtKernel,
    numa_ids: Sequence[int],
    reporter: Reporter,
) -> list[Point]:
    """`points` of the curve `b` describes, timed again as the thread law does (`law_retime`) on its
    layers built again: once for all the points (a model's own layer is gigabytes: seconds to build),
    at the first timing, so that a build that fails is a timing that fails (the timings taken kept),
    and closed after. Each point keeps the bytes its layers read."""
    layers: list[KtMoeLayer] = []
    timer: list[Callable[[int], Point]] = []

    def remeasure(p: Point) -> Point:
        if not timer:
            layers.extend(_kt_layers(b, opts, cpu, kt, numa_ids))
            timer.append(_timer(_forward(layers, b.shape, opts.seed), opts))
        pt = timer[0](int(p.x))
        return replace(pt, extra={**pt.extra, "source_bytes": p.extra.get("source_bytes")})

    try:
        return law_retime(points, remeasure, reporter, label)
    finally:
        for lay in layers:
            lay.close()


def moe_curve_params(
    method: str, threads: int, threadpools: int, shape: MoeLayerShape, kernel: str, numa_nodes: Sequence[int] = ()
) -> dict[str, Any]:
    """The params of a kt-kernel MoE curve (`cpu_moe`, `cpu_moe_shape`: `kttune.hw.curve_kinds.MoeCurveShape`
    and the class that ran it): every expert of the layer on the CPU."""
    return {
        "method": method,
        "threads": threads,
        "threadpools": threadpools,
        **({"numa_nodes": list(numa_nodes)} if numa_nodes else {}),
        "hidden": shape.hidden,
        "inter": shape.inter,
        "experts": shape.experts,
        "top_k": shape.top_k,
        "cpu_experts": shape.experts,
        "kernel": kernel,
    }


def _torch_curve(
    task: CpuMoeTask, shape: MoeLayerShape, tokens: Sequence[int], opts: CpuMoeOptions, reporter: Reporter, label: str
):
    """The fallback: the same layer in torch (bf16 weights, bf16 compute) with `threads` intra-op
    threads."""
    import torch

    from kttune.kernels.cpu_moe import TorchCpuMoE

    layer = TorchCpuMoE.random(shape.experts, shape.hidden, shape.inter, torch.bfloat16, seed=opts.seed)
    reporter.step(f"{label}: torch layer built")
    before = torch.get_num_threads()
    torch.set_num_threads(task.threads)
    try:

        def run(n: int) -> Callable[[], object]:
            x, ids, rw, _ = _inputs(n, shape, opts.seed)
            return lambda: layer.forward(x, ids, rw)

        return _measure_curve(run, task, tokens, opts, reporter, label)
    finally:
        torch.set_num_threads(before)
