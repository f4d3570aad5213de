"""The pipeline probe: the layerwise three-stage pipeline (kttune.runner.pipeline.LayerPipeline) over
one MoE layer of each shape, per stage A thread count and configuration, written as `pipeline` curves
(per layer: each stage alone, the overlapped layer time and the overlap efficiency).
"""

from __future__ import annotations

from typing import Callable

from kttune.hw.point_quality import RETIME_KEYS, off_per_byte, pool_allows
from kttune.hw.profile import Curve, Point
from kttune.probes.common import NullReporter, Reporter, retime
from kttune.probes.gpu_common import bound_to_node, free_host_bytes, gpu_numa_node
from kttune.runner.pipeline import LayerPipeline, PipelineConfig, PipelineResult
from kttune.spec.methods import REPACKED_METHODS
from kttune.spec.moe_shape import MoeLayerShape
from kttune.units import GIB


# Measured on the GPU box (Kimi-K2 int4 layer, 9.5 GB; benchmarks/bench_pipeline.py): slots of one
# or two experts keep stage A fast (groups of 4 made it 15-40% slower: the slots leave the LLC); the
# stream driver and batched repacks take the host loop off the critical path. Byte-copy methods
# ignore post_batch. Stream configs need kt-kernel's writer; with torch's they run host-driven.
DEFAULT_CONFIGS = (
    PipelineConfig(2, 1),
    PipelineConfig(2, 2),
    PipelineConfig(2, 1, 1, "stream"),
    PipelineConfig(2, 2, 1, "stream"),
    PipelineConfig(3, 1, 4, "stream"),
)
# sglang-kt 0.7.2's own loop (docs/sglang-kt.md#layerwise-prefill-at-tp--1): host-driven, two pinned
# slots, one expert a step; its label is kttune.cost.components.SGLANG_KT_PIPELINE. A server runs it,
# so the probe's curves are timed in it (`probe_pipeline_layer`'s `curve_config`): a model whose layer
# the probe did not stream is read from another shape's curve by bytes, and this loop's cost per byte
# carries from shape to shape where the fastest configuration's does not (docs/probe.md#the-pipeline).
SGLANG_KT_LOOP = PipelineConfig(2, 1)
QUICK_CONFIGS = (SGLANG_KT_LOOP, PipelineConfig(2, 2, 1, "stream"))


# A quick probe streams at most this much of each shape's layer (as its copy probe stops at 2 GiB):
# stage A writes one expert at a time and the copy streams slot by slot, so layer time is linear in
# the bytes streamed once the layer is well past the last-level cache, and the curve's x axis is
# those bytes. Building the whole 10 GB DeepSeek-V3 / Kimi-K2 layers (host weights plus kt-kernel's
# own copy, once per thread count) was most of the quick probe's time on the H200 box
# (benchmarks/results/2026-12-01-h200-pcie5-xeon-amx-16c/quick-probe.md).
QUICK_LAYER_BYTES = 2 * GIB
PIPELINE_REPEATS = 3  # timed layers per point (kttune.probes.gpu_suite.PipelineStep), quick or full
QUICK_EXPERT_FRACTIONS = (0.5, 1.0)  # two points per thread count: the fit needs a slope, not a constant


def expert_stream_bytes(shape: MoeLayerShape) -> int:
    """Bytes one expert of `shape` streams through the pipeline (its slot image: weights + scales, TP 1)."""
    from kttune.kernels.expert_weights import kinds_nbytes, slot_kinds

    return kinds_nbytes(slot_kinds(shape.method, shape.hidden, shape.inter))


def layer_experts(shape: MoeLayerShape, max_layer_bytes: int | None = None) -> int:
    """How many of `shape`'s experts the pipeline probe builds and streams: all of them, or as many as
    fit in `max_layer_bytes` (at least 2 x top-k, so half of them still streams several steps)."""
    if max_layer_bytes is None:
        return shape.experts
    return min(shape.experts, max(2 * shape.top_k, max_layer_bytes // expert_stream_bytes(shape)))


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)


def default_threads() -> int:
    return max(
        1, _cores() - 1
    )  # leave the driving thread a core (docs/sglang-kt.md#the-cpuinfer-thread-cliff: 16 of 16 starves it)


def default_thread_options(quick: bool = False, cores: int | None = None) -> tuple[int, ...]:
    """Stage A thread counts to try: those of every kt-kernel probe (`kt_thread_counts`), largest
    first: on the 16-core GPU box 15 workers made the Kimi-K2 layer 1.5x slower than 13."""
    from kttune.probes.common import kt_thread_counts

    return tuple(sorted(kt_thread_counts(cores or _cores(), quick), reverse=True))


def runnable_configs(configs, writer) -> tuple[PipelineConfig, ...]:
    """`configs` this writer can drive: stream configs become host-driven without a stream writer."""
    from dataclasses import replace

    if getattr(writer, "stream_capable", False):
        return tuple(configs)
    return tuple(dict.fromkeys(replace(c, driver="host") for c in configs))


def kept_writer_bytes(shape: MoeLayerShape, max_layer_bytes: int | None, thread_counts: int) -> int:
    """About how many bytes of kt-kernel writer layers `probe_pipeline_layer` leaves in its process: one
    layer of the experts it streams per thread count, where the class kt-kernel writes `shape`'s method
    with cannot be freed (`kttune.kernels.kt_moe.kt_method_leaks`); 0 without kt-kernel (the torch
    writer keeps nothing)."""
    from kttune.kernels.kt_ext import load_kt_kernel
    from kttune.kernels.kt_moe import kt_method_leaks

    kt = load_kt_kernel()
    if kt is None or not kt_method_leaks(kt, shape.method):
        return 0
    return thread_counts * layer_experts(shape, max_layer_bytes) * expert_stream_bytes(shape)


def probe_pipeline_layer(
    shape: MoeLayerShape,
    *,
    gpu: int = 0,
    threads: int | None = None,
    threads_options: tuple[int, ...] | None = None,
    configs=DEFAULT_CONFIGS,
    repeats: int = 3,
    expert_fractions=(0.25, 0.5, 1.0),
    prefer_kt: bool = True,
    max_layer_bytes: int | None = None,
    reporter: Reporter | None = None,
    device: str = "cuda",
    curve_config: PipelineConfig | None = SGLANG_KT_LOOP,
) -> tuple[list[Curve], list[PipelineResult], list[str]]:
    """Stream one full layer of `shape` through the pipeline for each config at each stage A thread
    count of `threads_options`; per thread count, `curve_config` (sglang-kt's loop, what a server
    runs; the fastest config where it is None or not among `configs`) is also run on fewer experts
    (x axis = bytes streamed), and every config's full layer is kept in the full point's `configs`
    (the cost model's ratio for a run in another configuration). Returns (one curve per thread
    count, all results, notes). A point scattered beyond `SCATTER_LIMIT`, or more than 1.3x another
    point's time per byte (`off_per_byte`), is timed again on a pipeline built anew (`retime`;
    docs/probe.md#disturbed-points). `device` "cpu" runs the stages one after another on the CPU
    (tests; no VRAM or NUMA checks).

    The host layer is built once and serves every thread count; kt-kernel's writer layer is built
    once per thread count (its worker pool is fixed when it loads). With `max_layer_bytes` only the
    first `layer_experts(shape, max_layer_bytes)` experts are built and streamed (`kttune probe
    --quick`); the curve still names the shape's expert count, its points the experts streamed."""
    import torch

    from kttune.kernels.expert_weights import HostExperts, kinds_nbytes, make_writer, slot_kinds

    rep = reporter or NullReporter()
    notes: list[str] = []
    try:
        kinds = slot_kinds(shape.method, shape.hidden, shape.inter)
    except ValueError as e:
        return [], [], [str(e)]
    built = layer_experts(shape, max_layer_bytes)
    if built < shape.experts:
        notes.append(
            f"{shape.name} {shape.method}: pipeline over {built} of {shape.experts} experts "
            f"({built * kinds_nbytes(kinds) / GIB:.1f} of {shape.experts * kinds_nbytes(kinds) / GIB:.1f} GiB): "
            "layer time is linear in the bytes streamed"
        )
    layer_bytes = built * kinds_nbytes(kinds)
    need_host = 2.2 * layer_bytes  # host experts + kt-kernel's own copy
    if free_host_bytes() and need_host > 0.8 * free_host_bytes():
        return (
            [],
            [],
            [
                f"{shape.name} {shape.method}: pipeline skipped, needs ~{need_host / GIB:.0f} GiB host RAM, {free_host_bytes() / GIB:.0f} free"
            ],
        )
    cuda = device == "cuda"
    if cuda:
        free_dev, _ = torch.cuda.mem_get_info(gpu)
        if 1.3 * layer_bytes > free_dev:
            return (
                [],
                [],
                [f"{shape.name} {shape.method}: pipeline skipped, layer {layer_bytes / GIB:.1f} GiB > free VRAM"],
            )
    dev = torch.device("cuda", gpu) if cuda else torch.device(device)
    numa = gpu_numa_node(gpu) if cuda else None
    results: list[PipelineResult] = []
    per_thread: list[tuple[int, str, list[Timed]]] = []  # threads, writer, timed points
    kept_ms: dict[int, dict[int, float]] = {}  # per kt-kernel thread count, experts streamed -> layer ms kept
    with bound_to_node(numa):
        rep.step(f"pipeline {shape.name} {shape.method}: preparing {layer_bytes / GIB:.1f} GiB layer", 0)
        host = HostExperts.random(shape.method, shape.hidden, shape.inter, built)
        for t in tuple(threads_options or (threads or default_threads(),)):
            writer, wnotes = make_writer(host, t, prefer_kt)
            notes += wnotes
            try:
                mine = []
                for cfg in runnable_configs(configs, writer):
                    rep.step(f"pipeline {shape.name} {shape.method} threads={t} {cfg.label()}", 0)
                    pl = LayerPipeline(host, writer, cfg, dev)
                    res = pl.measure(repeats)
                    res.threads = t
                    res.notes.append(f"stage C: {pl.repack_backend or 'none (byte copy)'}")
                    mine.append(res)
                    del pl
                    _free(cuda)
                results += mine
                # the configuration the curve's points are timed in
                timed = next((r for r in mine if r.config == curve_config), None)
                timed = timed or min(mine, key=lambda r: r.layer_ms)

                def measure(cfg: PipelineConfig, e: int) -> PipelineResult:
                    pl = LayerPipeline(host, writer, cfg, dev, experts=None if e == built else e)
                    try:
                        return pl.measure(repeats)
                    finally:
                        del pl
                        _free(cuda)

                runs = []
                for frac in expert_fractions:
                    e = max(1, int(round(built * frac)))
                    runs.append((timed if e == built else measure(timed.config, e), e))
                label = f"pipeline {shape.name} {shape.method} threads={t}"
                kept = retimed_runs(runs, measure, rep, label, pools_allow(t, kept_ms))
                if "kt-kernel" in writer.backend:
                    kept_ms[t] = {e: r.layer_ms for r, e, _ in kept}
                per_thread.append((t, writer.backend, kept))
            finally:
                writer.close()
            if not getattr(writer, "asynchronous", False):
                break  # the torch writer has no thread count to vary
    # the slowest of the best stage-alone times over everything tried: what the stages allow
    ideal = max(
        min(r.stage_a_ms for r in results), min(r.stage_b_ms for r in results), min(r.stage_c_ms for r in results)
    )
    repack = "triton repack" if shape.method in REPACKED_METHODS else "no stage C"
    curves = []
    for t, backend, runs in per_thread:
        pts = []
        for r, e, record in runs:
            extra = r.extra() | {"experts_streamed": e, "writer": backend, "threads": t} | record
            if e == built:
                extra["overlap_vs_best_stages"] = round(r.layer_ms / ideal, 4)
                # every config's full layer; the curve's own as kept (timed again where it was disturbed)
                extra["configs"] = {x.config.label(): _config_record(x) for x in results if x.threads == t} | {
                    r.config.label(): _config_record(r)
                }
            pts.append(
                Point(
                    x=r.layer_bytes,
                    t_ms=r.layer_ms,
                    t_ms_p10=r.layer_ms_p10,
                    t_ms_p90=r.layer_ms_p90,
                    n=r.repeats,
                    extra=extra,
                )
            )
        curves.append(
            Curve(
                kind="pipeline",
                x_unit="bytes",
                points=tuple(sorted(pts, key=lambda p: p.x)),
                params={
                    "method": shape.method,
                    "experts": shape.experts,
                    "threads": t if "kt-kernel" in backend else None,
                    "hidden": shape.hidden,
                    "inter": shape.inter,
                    "model": shape.name,
                    "gpu": gpu,
                },
                backend=f"A: {backend}; B: {'cudaMemcpyAsync on a copy stream' if cuda else 'copy on the CPU'}; C: {repack}; "
                f"driver: {runs[-1][0].config.driver}",
            )
        )
    return curves, results, notes


def _config_record(r: PipelineResult) -> dict:
    """One configuration's full layer as the full point's `configs` keeps it."""
    return {
        "layer_ms": round(r.layer_ms, 3),
        "overlap": round(r.overlap, 4),
        "a": round(r.stage_a_ms, 3),
        "b": round(r.stage_b_ms, 3),
        "c": round(r.stage_c_ms, 3),
    }


# A pipeline point as kept: its result, the experts it streamed, and the record of its timings
# (`RETIME_KEYS` of its extra where it was timed again, else empty).
Timed = tuple[PipelineResult, int, dict]


def pools_allow(threads: int, kept_ms: dict[int, dict[int, float]]) -> dict[int, float]:
    """Per experts streamed, the most a layer streamed by `threads` stage A writers may take by the
    thread law (`kttune.hw.point_quality.pool_allows`), from the layers kept at the larger counts
    already timed (`kept_ms`: per count, experts -> layer ms; the probe times its counts largest first).
    Only stage A depends on the count, so fewer writers take at most the ratio of the counts longer;
    a layer slower than that was timed in a slow moment (H100 instance aq's second quick probe,
    2026-12-07: Qwen3-30B-A3B's layer at 11 threads 70.8 ms beside 44.2 at 13,
    kttune.hw.point_quality.pipeline_slower_than_larger_pools)."""
    out: dict[int, float] = {}
    for hi, layers in kept_ms.items():
        if hi > threads:
            for e, ms in layers.items():
                out[e] = min(out.get(e, float("inf")), pool_allows(ms, hi, threads))
    return out


def retimed_runs(
    runs: list[tuple[PipelineResult, int]],
    measure: Callable[[PipelineConfig, int], PipelineResult],
    reporter: Reporter,
    label: str,
    allowed_ms: dict[int, float] | None = None,
) -> list[Timed]:
    """One thread count's pipeline points, those scattered beyond `SCATTER_LIMIT`, off per byte
    against another point of the same curve or slower than their own stages run in turn
    (`off_per_byte`: a host whose memory bandwidth dropped or that stalled while they were timed,
    which their own spread does not show), or slower than a larger thread count's layer of as many
    experts allows (`allowed_ms`, per experts streamed: `pools_allow`), timed again by `measure` (the
    same config and experts on a pipeline built anew) after the others, the fastest kept (`retime`'s
    `keep="fastest"`: a point here stays one whole run, whose result the curve reports)."""
    results: list[tuple[PipelineResult, int]] = []

    def point(r: PipelineResult, e: int) -> Point:
        results.append((r, e))
        # the stages alone beside the run, which `off_per_byte` holds the layer to (`slower_than_serial`)
        extra = {
            "run": len(results) - 1,
            "stage_a_ms": r.stage_a_ms,
            "stage_b_ms": r.stage_b_ms,
            "stage_c_ms": r.stage_c_ms,
        }
        return Point(
            x=r.layer_bytes, t_ms=r.layer_ms, t_ms_p10=r.layer_ms_p10, t_ms_p90=r.layer_ms_p90, n=r.repeats, extra=extra
        )

    pts = [point(r, e) for r, e in runs]
    slow = {id(p) for p in off_per_byte(Curve("pipeline", "bytes", tuple(pts)))}
    allowed = allowed_ms or {}
    slow |= {id(p) for p, (_, e) in zip(pts, runs) if p.t_ms > allowed.get(e, float("inf"))}

    def again(p: Point) -> Point:
        r, e = results[p.extra["run"]]
        return point(measure(r.config, e), e)

    out = []
    for p in retime(pts, again, reporter, label, every=False, suspect=lambda q: id(q) in slow, keep="fastest"):
        r, e = results[p.extra["run"]]
        out.append((r, e, {k: p.extra[k] for k in RETIME_KEYS if k in p.extra}))
    return out


def _free(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.empty_cache()
