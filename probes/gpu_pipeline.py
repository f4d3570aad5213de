"""The layerwise three-stage pipeline over one full MoE layer (BRIEF §1, kt-sglang.md §3.2):

    A  stage A writer (kt-kernel `write_weight_scale_to_buffer_task`, or torch CPU copies) fills a
       pinned host slot with the next `group` experts in GPU layout
    B  the copy stream moves the previous slot to the GPU (straight into the layer tensors for byte-copy
       methods; into a GPU staging slot for RAWINT4)
    C  the post stream repacks it (RAWINT4: our Triton repack into the layout our int4 MoE reads)

with `slots` host slots (and as many GPU staging slots) and CUDA events guarding their reuse: the
host waits for slot i's copy before writing it again; the copy stream waits for slot i's repack
before overwriting its staging slot. Driving loop, one step = `group` experts:

    write(0); wait
    for s: wait slot of s+1 free; submit write(s+1); issue copy(s) [+ repack(s)]; wait write(s+1)

so write(s+1) runs on the CPU while copy(s) runs on the DMA engine, and the host time spent issuing
copies and repacks stays off stage A's critical path (a synchronous writer, torch's, can only write
after the copy is queued). With one expert per step the
expert just written is still in the last-level cache when the DMA reads it (DDIO), which keeps the
copy from competing with stage A for DRAM bandwidth (seeds/kt-layerwise-prefill.txt).

Reported per layer: each stage alone (same slots and group), the overlapped layer time and the
overlap efficiency = layer time / slowest stage alone (1.0 is perfect overlap).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kttune.hw.profile import Curve, Point
from kttune.probes.common import NullReporter, Reporter, quantiles
from kttune.probes.gpu_common import MoeShape, bound_to_node, free_host_bytes, gpu_numa_node


@dataclass(frozen=True)
class PipelineConfig:
    slots: int = 2
    group: int = 1  # experts per step

    def label(self) -> str:
        return f"slots={self.slots},group={self.group}"


@dataclass
class PipelineResult:
    config: PipelineConfig
    experts: int
    layer_bytes: int
    stage_a_ms: float
    stage_b_ms: float
    stage_c_ms: float
    layer_ms: float
    layer_ms_p10: float = 0.0
    layer_ms_p90: float = 0.0
    repeats: int = 0
    a_in_pipeline_ms: float = 0.0  # host time spent waiting on stage A inside the overlapped run
    b_in_pipeline_ms: float = 0.0  # copy-stream busy time inside the overlapped run (events)
    notes: list[str] = field(default_factory=list)
    threads: int | None = None  # stage A worker threads (kt-kernel)

    @property
    def slowest_stage_ms(self) -> float:
        return max(self.stage_a_ms, self.stage_b_ms, self.stage_c_ms)

    @property
    def overlap(self) -> float:
        return self.layer_ms / self.slowest_stage_ms if self.slowest_stage_ms > 0 else float("nan")

    def extra(self) -> dict:
        return {
            "stage_a_ms": round(self.stage_a_ms, 3),
            "stage_b_ms": round(self.stage_b_ms, 3),
            "stage_c_ms": round(self.stage_c_ms, 3),
            "layer_ms": round(self.layer_ms, 3),
            "slowest_stage_ms": round(self.slowest_stage_ms, 3),
            "overlap": round(self.overlap, 4),
            "overlap_ratio": round(self.overlap, 4),  # the key kttune.cost reads
            "slots": self.config.slots,
            "group": self.config.group,
            "a_in_pipeline_ms": round(self.a_in_pipeline_ms, 3),
            "b_in_pipeline_ms": round(self.b_in_pipeline_ms, 3),
            "h2d_gbps_alone": round(self.layer_bytes / (self.stage_b_ms * 1e-3) / 1e9, 2) if self.stage_b_ms else None,
            "layer_gbps": round(self.layer_bytes / (self.layer_ms * 1e-3) / 1e9, 2) if self.layer_ms else None,
        }


class GpuLayer:
    """The GPU side: the full-layer tensors (sglang's lazily allocated slot) and, for methods with a
    stage C, `slots` GPU staging slots holding raw experts between copy and repack."""

    def __init__(self, kinds, experts: int, slots: int, group: int, device, repack: bool):
        import torch

        self.kinds, self.experts, self.repack = kinds, experts, repack
        self.dst: dict = {}
        self.staging: list[dict] = []
        if not repack:
            for k in kinds:
                self.dst[k.name] = torch.empty((experts,) + k.shape, dtype=k.dtype, device=device)
        else:
            for k in kinds:  # repacked: [E, in/8, out] words, [E, in/32, out] scales
                out_f, in_w = k.shape
                self.dst[k.name] = torch.empty((experts, in_w, out_f), dtype=k.dtype, device=device)
            for _ in range(slots):
                self.staging.append({k.name: torch.empty((group,) + k.shape, dtype=k.dtype, device=device) for k in kinds})


class LayerPipeline:
    """One layer's pipeline state: host experts, writer, pinned slots, GPU layer, streams."""

    def __init__(self, host, writer, config: PipelineConfig, device, experts: int | None = None, diagnose: bool = False):
        import torch

        from kttune.kernels.expert_writer import HostSlot

        self.host, self.writer, self.config = host, writer, config
        self.device = torch.device(device)
        self.experts = experts or host.experts
        self.repack = host.method == "RAWINT4"
        self.slots = [HostSlot(host.kinds, config.group, pin=True) for _ in range(config.slots)]
        self.gpu = GpuLayer(host.kinds, self.experts, config.slots, config.group, self.device, self.repack)
        self.copy_stream = torch.cuda.Stream(self.device)
        self.post_stream = torch.cuda.Stream(self.device)
        self.steps = [range(e0, min(e0 + config.group, self.experts)) for e0 in range(0, self.experts, config.group)]
        self.layer_bytes = self.experts * sum(k.nbytes for k in host.kinds)
        self.repack_backend = None
        self.diagnose = diagnose  # per-step copy timing events (costs host time on the driving thread)

    # -- the three stages of one step ----------------------------------------------------------
    def _copy(self, s: int) -> None:
        """Stage B of step s (caller has made copy_stream current)."""
        r = self.steps[s]
        n = len(r)
        slot = self.slots[s % len(self.slots)].views
        if self.repack:
            st = self.gpu.staging[s % len(self.slots)]
            for name, v in slot.items():
                st[name][:n].copy_(v[:n], non_blocking=True)
        else:
            for name, v in slot.items():
                self.gpu.dst[name][r.start : r.stop].copy_(v[:n], non_blocking=True)

    def _post(self, s: int) -> None:
        """Stage C of step s (caller has made post_stream current)."""
        from kttune.kernels.int4 import repack_int4

        r = self.steps[s]
        n = len(r)
        st = self.gpu.staging[s % len(self.slots)]
        d = self.gpu.dst
        _, _, b1 = repack_int4(st["w13"][:n], st["s13"][:n], d["w13"][r.start : r.stop], d["s13"][r.start : r.stop])
        _, _, b2 = repack_int4(st["w2"][:n], st["s2"][:n], d["w2"][r.start : r.stop], d["s2"][r.start : r.stop])
        self.repack_backend = b1

    # -- stages alone ---------------------------------------------------------------------------
    def stage_a_alone_ms(self) -> float:
        t0 = time.perf_counter()
        for s in range(len(self.steps)):
            self.writer.submit(self.steps[s], self.slots[s % len(self.slots)])
            self.writer.wait()
        return (time.perf_counter() - t0) * 1e3

    def _steps_alone_ms(self, stream, step) -> float:
        """Every step of one stage alone on its stream, timed with CUDA events."""
        import torch

        torch.cuda.synchronize(self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record()
            for s in range(len(self.steps)):
                step(s)
            end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def stage_b_alone_ms(self) -> float:
        return self._steps_alone_ms(self.copy_stream, self._copy)

    def stage_c_alone_ms(self) -> float:
        return self._steps_alone_ms(self.post_stream, self._post) if self.repack else 0.0

    # -- overlapped ------------------------------------------------------------------------------
    def run(self) -> tuple[float, float, float]:
        """One overlapped layer. Returns (layer_ms, host ms waiting on stage A, copy-stream busy ms)."""
        import torch

        n_slots = len(self.slots)
        h2d_done = [None] * n_slots
        post_done = [None] * n_slots
        copy_times = []
        a_wait = 0.0
        torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        ta = time.perf_counter()
        self.writer.submit(self.steps[0], self.slots[0])
        self.writer.wait()
        a_wait += time.perf_counter() - ta
        steps = len(self.steps)
        for s in range(steps):
            i = s % n_slots
            nxt = s + 1
            if self.writer.asynchronous and nxt < steps:
                # Keep stage A busy: start write(s+1) before spending host time on issuing copy(s).
                j = nxt % n_slots
                if h2d_done[j] is not None:
                    h2d_done[j].synchronize()  # slot j's previous copy has left the host
                self.writer.submit(self.steps[nxt], self.slots[j])
            with torch.cuda.stream(self.copy_stream):
                if self.repack and post_done[i] is not None:
                    self.copy_stream.wait_event(post_done[i])
                if self.diagnose:
                    cs, ce = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    cs.record()
                    copy_times.append((cs, ce))
                else:
                    ce = torch.cuda.Event()
                self._copy(s)
                ce.record()
                h2d_done[i] = ce
            if self.repack:
                with torch.cuda.stream(self.post_stream):
                    self.post_stream.wait_event(ce)
                    self._post(s)
                    ev = torch.cuda.Event()
                    ev.record()
                    post_done[i] = ev
            if nxt < steps:
                ta = time.perf_counter()
                if not self.writer.asynchronous:  # a synchronous writer works here, after copy(s) is queued
                    j = nxt % n_slots
                    if h2d_done[j] is not None:
                        h2d_done[j].synchronize()
                    self.writer.submit(self.steps[nxt], self.slots[j])
                self.writer.wait()
                a_wait += time.perf_counter() - ta
        torch.cuda.synchronize(self.device)
        layer_ms = (time.perf_counter() - t0) * 1e3
        b_busy = sum(a.elapsed_time(b) for a, b in copy_times) if copy_times else float("nan")
        return layer_ms, a_wait * 1e3, b_busy

    def measure(self, repeats: int = 3) -> PipelineResult:
        # warm-up (Triton compile, first-touch of GPU memory, kt-kernel thread wake-up)
        self.stage_a_alone_ms()
        self.stage_b_alone_ms()
        self.stage_c_alone_ms()
        self.run()
        a = [self.stage_a_alone_ms() for _ in range(repeats)]
        b = [self.stage_b_alone_ms() for _ in range(repeats)]
        c = [self.stage_c_alone_ms() for _ in range(repeats)]
        runs = [self.run() for _ in range(repeats)]
        lp10, lmed, lp90 = quantiles([r[0] for r in runs])
        med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
        return PipelineResult(
            config=self.config, experts=self.experts, layer_bytes=self.layer_bytes,
            stage_a_ms=med(a), stage_b_ms=med(b), stage_c_ms=med(c),
            layer_ms=lmed, layer_ms_p10=lp10, layer_ms_p90=lp90, repeats=repeats,
            a_in_pipeline_ms=med([r[1] for r in runs]), b_in_pipeline_ms=med([r[2] for r in runs]),
        )


def make_writer(host, threads: int, prefer_kt: bool = True):
    from kttune.kernels.expert_writer import KtExpertWriter, TorchExpertWriter, kt_available

    notes = []
    if prefer_kt and kt_available():
        try:
            return KtExpertWriter(host, threads), notes
        except Exception as e:  # kt-kernel present but refuses this method/CPU
            notes.append(f"kt-kernel writer unavailable for {host.method}: {e}; stage A by torch CPU copies")
    elif prefer_kt:
        notes.append("kt-kernel not importable: stage A by torch CPU copies (not kt-kernel's writer)")
    return TorchExpertWriter(host), notes


# Slots of one or two experts keep the slots LLC-resident (on the GPU box, groups of 4 made stage A
# itself 30-50% slower); more slots give the writer slack when a copy runs late.
DEFAULT_CONFIGS = (PipelineConfig(2, 1), PipelineConfig(3, 1), PipelineConfig(4, 1), PipelineConfig(2, 2))
QUICK_CONFIGS = (PipelineConfig(3, 1), PipelineConfig(2, 2))


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)


def default_threads() -> int:
    return max(1, _cores() - 1)  # leave the driving thread a core (BRIEF §3: 16 of 16 starves it)


def default_thread_options(quick: bool = False) -> tuple[int, ...]:
    """Stage A thread counts to try: cores-1 (the driving thread keeps a core) and cores-3 (room for
    kt-kernel's dispatcher and the CUDA driver's threads too)."""
    n = _cores()
    opts = (n - 1,) if quick else (n - 1, n - 3)
    return tuple(sorted({max(1, t) for t in opts}, reverse=True))


def probe_pipeline_layer(
    shape: MoeShape,
    *,
    gpu: int = 0,
    threads: int | None = None,
    threads_options: tuple[int, ...] | None = None,
    configs=DEFAULT_CONFIGS,
    repeats: int = 3,
    expert_fractions=(0.25, 0.5, 1.0),
    prefer_kt: bool = True,
    reporter: Reporter | None = None,
) -> tuple[Curve | None, list[PipelineResult], list[str]]:
    """Stream one full layer of `shape` through the pipeline for each config (and each stage A thread
    count of `threads_options`); the fastest is then also run on fewer experts (x axis = bytes
    streamed). Returns (curve, all results, notes)."""
    import torch

    from kttune.kernels.expert_writer import HostExperts, expert_bytes, expert_tensor_kinds

    rep = reporter or NullReporter()
    threads = threads or default_threads()
    notes: list[str] = []
    try:
        kinds = expert_tensor_kinds(shape.method, shape.hidden, shape.inter)
    except ValueError as e:
        return None, [], [str(e)]
    layer_bytes = shape.experts * expert_bytes(kinds)
    need_host = 2.2 * layer_bytes  # host experts + kt-kernel's own copy
    if free_host_bytes() and need_host > 0.8 * free_host_bytes():
        return None, [], [f"{shape.name} {shape.method}: pipeline skipped, needs ~{need_host / 2**30:.0f} GiB host RAM, {free_host_bytes() / 2**30:.0f} free"]
    free_dev, _ = torch.cuda.mem_get_info(gpu)
    if 1.3 * layer_bytes > free_dev:
        return None, [], [f"{shape.name} {shape.method}: pipeline skipped, layer {layer_bytes / 2**30:.1f} GiB > free VRAM"]
    device = torch.device("cuda", gpu)
    numa = gpu_numa_node(gpu)
    results: list[PipelineResult] = []
    thread_counts = tuple(threads_options or (threads,))
    best_writer_threads = thread_counts[0]
    with bound_to_node(numa):
        rep.step(f"pipeline {shape.name} {shape.method}: preparing {layer_bytes / 2**30:.1f} GiB layer", 0)
        host = HostExperts(shape.method, shape.hidden, shape.inter, shape.experts)
        backend = ""
        writer = None
        for t in thread_counts:
            if writer is not None:
                writer.close()
            writer, wnotes = make_writer(host, t, prefer_kt)
            notes += wnotes
            backend = writer.backend
            try:
                for cfg in configs:
                    rep.step(f"pipeline {shape.name} {shape.method} threads={t} {cfg.label()}", 0)
                    pl = LayerPipeline(host, writer, cfg, device)
                    res = pl.measure(repeats)
                    res.threads = t
                    res.notes.append(f"stage C: {pl.repack_backend or 'none (byte copy)'}")
                    results.append(res)
                    del pl
                    torch.cuda.empty_cache()
            except BaseException:
                writer.close()
                raise
            if not getattr(writer, "asynchronous", False):
                break  # the torch writer has no thread count to vary
        best = min(results, key=lambda r: r.layer_ms)
        best_writer_threads = best.threads
        ideal = max(min(r.stage_a_ms for r in results), min(r.stage_b_ms for r in results), min(r.stage_c_ms for r in results))
        if getattr(writer, "threads", best.threads) != best.threads:
            writer.close()
            writer, _ = make_writer(host, best.threads, prefer_kt)
        try:
            pts = []
            for frac in expert_fractions:
                e = max(1, int(round(shape.experts * frac)))
                if e == shape.experts:
                    r = best
                else:
                    pl = LayerPipeline(host, writer, best.config, device, experts=e)
                    r = pl.measure(repeats)
                    del pl
                    torch.cuda.empty_cache()
                extra = r.extra() | {"experts_streamed": e, "writer": writer.backend, "threads": best.threads}
                if e == shape.experts:
                    extra["overlap_vs_best_stages"] = round(r.layer_ms / ideal, 4)
                    extra["configs"] = {f"threads={x.threads},{x.config.label()}": {
                        "layer_ms": round(x.layer_ms, 3), "overlap": round(x.overlap, 4),
                        "a": round(x.stage_a_ms, 3), "b": round(x.stage_b_ms, 3), "c": round(x.stage_c_ms, 3)} for x in results}
                pts.append(Point(x=r.layer_bytes, t_ms=r.layer_ms, t_ms_p10=r.layer_ms_p10, t_ms_p90=r.layer_ms_p90, n=r.repeats, extra=extra))
        finally:
            writer.close()
    repack = "triton repack" if shape.method == "RAWINT4" else "no stage C"
    curve = Curve(
        kind="pipeline", x_unit="bytes", points=tuple(pts),
        params={"method": shape.method, "experts": shape.experts, "threads": best_writer_threads if "kt-kernel" in backend else None,
                "hidden": shape.hidden, "inter": shape.inter, "model": shape.name, "gpu": gpu},
        backend=f"A: {backend}; B: cudaMemcpyAsync on a copy stream; C: {repack}",
    )
    return curve, results, notes
