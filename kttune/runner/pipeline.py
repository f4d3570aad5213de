"""The layerwise three-stage pipeline over one full MoE layer (docs/sglang-kt.md#the-two-prefill-paths):

    A  stage A writer (kt-kernel `write_weight_scale_to_buffer_task`, or torch CPU copies) fills a
       pinned host slot with the next `group` experts in GPU layout
    B  the copy stream moves the slot to the GPU: straight into the layer tensors for byte-copy
       methods; for RAWINT4 and MXFP4 as one copy into an entry of a GPU staging ring
    C  the post stream repacks `post_batch` ring entries at a time (RAWINT4 and MXFP4: our Triton
       repack into the layout our 4-bit MoE reads; sglang-kt runs Marlin's repack and prepare there)

with `slots` host slots, a ring of 2 x post_batch staging entries, and CUDA events guarding their
reuse: slot i is written again only after its copy has left the host; a ring half is overwritten
only after the repack that read it. Two drivers (see LayerPipeline): a Python loop, or everything
enqueued on CUDA streams with stage A submitted by kt-kernel's stream callbacks.

Slots of one or two experts keep the expert just written in the last-level cache when the DMA reads
it (DDIO), so the copy does not compete with stage A for DRAM bandwidth (seeds/kt-layerwise-prefill.txt).
kt-kernel's workers spin: with one per core but one, the driving thread and the CUDA callback thread
starve, so the stage A thread count is part of what the probe varies.

The mechanism the path runner's layerwise forwards run (kttune.runner.path_runner) and the pipeline
probe measures (kttune.probes.gpu_pipeline). Reported per layer: each stage alone (same slots and group), the overlapped layer time and the
overlap efficiency = layer time / slowest stage alone (1.0 is perfect overlap).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kttune.probes.common import quantiles


@dataclass(frozen=True)
class PipelineConfig:
    slots: int = 2  # pinned host slots
    group: int = 1  # experts per step
    post_batch: int = 1  # steps per stage C launch (RAWINT4, MXFP4; needs group 1 when > 1)
    driver: str = "host"  # "host" or "stream" (see LayerPipeline)

    def __post_init__(self):
        if self.slots < 2 or self.group < 1 or self.post_batch < 1:
            raise ValueError(f"pipeline needs slots >= 2, group >= 1, post_batch >= 1 (got {self})")
        if self.post_batch > 1 and self.group > 1:
            raise ValueError("post_batch > 1 needs group 1 (one expert per ring entry)")
        if self.driver not in ("host", "stream"):
            raise ValueError(f"driver must be 'host' or 'stream', not {self.driver!r}")

    @classmethod
    def from_label(cls, label: str) -> "PipelineConfig":
        """The configuration a `label()` names ("slots=2,group=1", "slots=2,group=2,driver=stream");
        fields left out take their defaults. Raises ValueError for anything else."""
        fields = {}
        for part in (p.strip() for p in label.split(",") if p.strip()):
            key, sep, value = part.partition("=")
            if not sep or key not in ("slots", "group", "post_batch", "driver"):
                raise ValueError(
                    f"pipeline configuration {label!r}: {part!r} is not slots=, group=, post_batch= or driver="
                )
            fields[key] = value if key == "driver" else int(value)
        return cls(**fields)

    def label(self) -> str:
        s = f"slots={self.slots},group={self.group}"
        if self.post_batch != 1:
            s += f",post_batch={self.post_batch}"
        if self.driver != "host":
            s += f",driver={self.driver}"
        return s


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
    a_in_pipeline_ms: float = 0.0  # stage A inside the overlapped run (host wait, or stream events)
    b_in_pipeline_ms: float = 0.0  # copy-stream busy time inside the overlapped run (diagnose only)
    notes: list[str] = field(default_factory=list)
    threads: int | None = None  # stage A worker threads (kt-kernel)
    host_ms: dict = field(default_factory=dict)  # diagnose: where the driving thread spent the layer

    @property
    def slowest_stage_ms(self) -> float:
        return max(self.stage_a_ms, self.stage_b_ms, self.stage_c_ms)

    @property
    def overlap(self) -> float:
        return self.layer_ms / self.slowest_stage_ms if self.slowest_stage_ms > 0 else float("nan")

    def extra(self) -> dict:
        out = {
            "stage_a_ms": round(self.stage_a_ms, 3),
            "stage_b_ms": round(self.stage_b_ms, 3),
            "stage_c_ms": round(self.stage_c_ms, 3),
            "layer_ms": round(self.layer_ms, 3),
            "slowest_stage_ms": round(self.slowest_stage_ms, 3),
            "overlap": round(self.overlap, 4),
            "overlap_ratio": round(self.overlap, 4),  # the key kttune.cost reads
            "slots": self.config.slots,
            "group": self.config.group,
            "post_batch": self.config.post_batch,
            "driver": self.config.driver,
            "a_in_pipeline_ms": round(self.a_in_pipeline_ms, 3),
            "b_in_pipeline_ms": round(self.b_in_pipeline_ms, 3),
            "h2d_gbps_alone": round(self.layer_bytes / (self.stage_b_ms * 1e-3) / 1e9, 2) if self.stage_b_ms else None,
            "layer_gbps": round(self.layer_bytes / (self.layer_ms * 1e-3) / 1e9, 2) if self.layer_ms else None,
        }
        if self.host_ms:
            out["host_ms"] = {k: round(v, 3) for k, v in self.host_ms.items()}
        return out


def _kind_offsets(kinds, group: int) -> dict[str, int]:
    """Byte offset of each tensor kind inside a slot (HostSlot's layout: kinds in order, [group, ...])."""
    out, off = {}, 0
    for k in kinds:
        out[k.name] = off
        off += k.nbytes * group
    return out


class GpuLayer:
    """The GPU side: the full-layer tensors (sglang's lazily allocated slot) and, for methods with a
    stage C, a ring of `ring` raw staging entries, each the byte image of one host slot, so that
    stage B moves a step with one copy and stage C reads its tensors through strided views."""

    def __init__(self, kinds, experts: int, ring: int, group: int, device, repack: bool):
        import torch

        from kttune.kernels.expert_weights import word_kinds

        if repack:  # stage C reads MXFP4's bytes as int32 words (kttune.kernels.int4)
            kinds = word_kinds(kinds)
        self.kinds, self.experts, self.repack = kinds, experts, repack
        self.dst: dict = {}
        self.ring = None
        self.ring_views: dict = {}  # name -> [ring, group, *shape]
        if not repack:
            for k in kinds:
                self.dst[k.name] = torch.empty((experts,) + k.shape, dtype=k.dtype, device=device)
            return
        for k in kinds:  # repacked: [E, in/8, out] words, [E, in/32, out] scales
            out_f, in_w = k.shape
            self.dst[k.name] = torch.empty((experts, in_w, out_f), dtype=k.dtype, device=device)
        slot_bytes = sum(k.nbytes for k in kinds) * group
        self.ring = torch.empty((ring, slot_bytes), dtype=torch.uint8, device=device)
        for k in kinds:
            off = _kind_offsets(kinds, group)[k.name]
            raw = self.ring[:, off : off + k.nbytes * group]
            self.ring_views[k.name] = raw.view(k.dtype).view((ring, group) + k.shape)


class LayerPipeline:
    """One layer's pipeline state: host experts, writer, pinned slots, GPU layer, streams.

    Two drivers run the same three stages:
    - "host": the Python thread submits write(s+1) to kt-kernel, issues copy(s) and repack(s), then
      waits for write(s+1) (and, before reusing a slot, for the copy that last read it).
    - "stream": the whole layer is enqueued up front on CUDA streams. Stage A runs through
      kt-kernel's `submit_with_cuda_stream`/`sync_with_cuda_stream` (host callbacks on a writer
      stream, as sglang-kt submits CPU experts), and events order everything: the writer stream
      waits for slot i's copy before writing it again, the copy stream waits for each write and for
      the repack that last read its ring entry. No Python runs between two steps.
    """

    def __init__(
        self,
        host,
        writer,
        config: PipelineConfig,
        device,
        experts: int | None = None,
        diagnose: bool = False,
        first: int = 0,
        tp: int = 1,
        barrier=None,
        slot_factory=None,
    ):
        import torch

        from kttune.kernels.expert_weights import HostSlot
        from kttune.spec.methods import REPACKED_METHODS

        if config.driver == "stream" and not getattr(writer, "stream_capable", False):
            raise ValueError(f"driver 'stream' needs a writer that submits on CUDA streams ({writer.backend} does not)")
        self.host, self.writer, self.config = host, writer, config
        self.device = torch.device(device)
        self.experts = experts or host.experts
        self.repack = host.method in REPACKED_METHODS
        cuda = self.device.type == "cuda"  # on a CPU device (tests) the stages run one after another
        self.cuda = cuda
        kinds = host.slot_kinds(tp)
        self.barrier = barrier  # TP: called after each step's write (sglang-kt's per-expert barrier)
        # TP: kttune.runner.tp_slots.SharedSlots (every rank's slot mapped into rank 0, whose writer fills them all)
        make = slot_factory or (lambda kinds, group, i: HostSlot(kinds, group, pin=cuda))
        self.slots = [make(kinds, config.group, i) for i in range(config.slots)]
        # experts first..experts-1 are streamed (the path runner's BF16 layerwise copies 0..first-1
        # from the GPU-resident experts instead, as sglang-kt does)
        self.first = first
        self.steps = [
            range(e0, min(e0 + config.group, self.experts)) for e0 in range(first, self.experts, config.group)
        ]
        pb = self.post_batch = config.post_batch if self.repack else 1
        self.ring_size = 2 * pb  # stage B fills one half of the ring while stage C reads the other
        # stage C batches: consecutive steps [s0, s1) repacked together
        self.batches = [(s0, min(s0 + pb, len(self.steps))) for s0 in range(0, len(self.steps), pb)]
        self.gpu = GpuLayer(kinds, self.experts, self.ring_size, config.group, self.device, self.repack)
        self.copy_stream = torch.cuda.Stream(self.device) if cuda else None
        self.post_stream = torch.cuda.Stream(self.device) if cuda else None
        self.writer_stream = torch.cuda.Stream(self.device) if cuda and config.driver == "stream" else None
        self.layer_bytes = (self.experts - first) * sum(k.nbytes for k in kinds)
        self.repack_backend = None
        self.diagnose = diagnose  # per-step timing (costs host time on the driving thread)

    # -- the three stages of one step ----------------------------------------------------------
    def _copy(self, s: int) -> None:
        """Stage B of step s (caller has made copy_stream current)."""
        r = self.steps[s]
        n = len(r)
        slot = self.slots[s % len(self.slots)]
        if self.repack:
            self.gpu.ring[s % self.ring_size].copy_(slot.buffer, non_blocking=True)
        else:
            for name, v in slot.views.items():
                self.gpu.dst[name][r.start : r.stop].copy_(v[:n], non_blocking=True)

    def _post(self, b: int) -> None:
        """Stage C of batch b (caller has made post_stream current)."""
        from kttune.kernels.int4 import repack_int4

        s0, s1 = self.batches[b]
        e0, e1 = self.steps[s0].start, self.steps[s1 - 1].stop
        r0 = s0 % self.ring_size
        v, d = self.gpu.ring_views, self.gpu.dst
        if self.config.group == 1:  # ring entries r0.. hold one expert each
            src = {name: t[r0 : r0 + (s1 - s0), 0] for name, t in v.items()}
        else:  # one step: its `group` experts sit in one entry
            src = {name: t[r0, : e1 - e0] for name, t in v.items()}
        _, _, b1 = repack_int4(src["w13"], src["s13"], d["w13"][e0:e1], d["s13"][e0:e1])
        repack_int4(src["w2"], src["s2"], d["w2"][e0:e1], d["s2"][e0:e1])
        self.repack_backend = b1

    def _batch_of(self, s: int) -> int:
        return s // self.post_batch

    def _closes_batch(self, s: int) -> bool:
        """Step s is the last of its stage C batch (the repack runs after its copy)."""
        return self.repack and s == self.batches[self._batch_of(s)][1] - 1

    # -- stages alone ---------------------------------------------------------------------------
    def stage_a_alone_ms(self) -> float:
        t0 = time.perf_counter()
        for s in range(len(self.steps)):
            self.writer.submit(self.steps[s], self.slots[s % len(self.slots)])
            self.writer.wait()
        return (time.perf_counter() - t0) * 1e3

    def _alone_ms(self, stream, step, count: int) -> float:
        """`count` steps (or batches) of one stage alone on its stream, timed with CUDA events (on a
        CPU device, one after another by the host clock)."""
        import torch

        if not self.cuda:
            t0 = time.perf_counter()
            for s in range(count):
                step(s)
            return (time.perf_counter() - t0) * 1e3
        torch.cuda.synchronize(self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record()
            for s in range(count):
                step(s)
            end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def stage_b_alone_ms(self) -> float:
        return self._alone_ms(self.copy_stream, self._copy, len(self.steps))

    def stage_c_alone_ms(self) -> float:
        return self._alone_ms(self.post_stream, self._post, len(self.batches)) if self.repack else 0.0

    def run_serial(self) -> None:
        """Every stage of every step one after another on the current device (no streams): the CPU
        check of the slot, ring and batch bookkeeping."""
        for s in range(len(self.steps)):
            self.writer.submit(self.steps[s], self.slots[s % len(self.slots)])
            self.writer.wait()
            if self.barrier is not None:
                self.barrier()
            self._copy(s)
            if self._closes_batch(s):
                self._post(self._batch_of(s))

    # -- overlapped ------------------------------------------------------------------------------
    def _issue_copy_and_post(self, s: int, after, h2d_done: list, post_done: list, timing: list | None):
        """Queue copy(s) on the copy stream (after event `after`, if any) and, when s closes a stage C
        batch, that batch's repack on the post stream."""
        import torch

        with torch.cuda.stream(self.copy_stream):
            if after is not None:
                self.copy_stream.wait_event(after)
            b = self._batch_of(s)
            if self.repack and s == self.batches[b][0] and post_done[b % 2] is not None:
                self.copy_stream.wait_event(post_done[b % 2])  # ring half last read by batch b-2
            if timing is not None:
                cs, ce = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                cs.record()
                timing.append((cs, ce))
            else:
                ce = torch.cuda.Event()
            self._copy(s)
            ce.record()
        h2d_done[s % len(self.slots)] = ce
        if self._closes_batch(s):
            with torch.cuda.stream(self.post_stream):
                self.post_stream.wait_event(ce)
                self._post(b)
                ev = torch.cuda.Event()
                ev.record()
                post_done[b % 2] = ev

    def _run_host(self, copy_times, host: dict) -> float:
        """Host-driven layer; returns host ms spent waiting on stage A."""
        n_slots = len(self.slots)
        h2d_done = [None] * n_slots
        post_done = [None, None]
        clock = time.perf_counter
        a_wait = 0.0
        ta = clock()
        self.writer.submit(self.steps[0], self.slots[0])
        self.writer.wait()
        a_wait += clock() - ta
        steps = len(self.steps)
        for s in range(steps):
            nxt = s + 1
            t0 = clock()
            if self.writer.asynchronous and nxt < steps:
                # Keep stage A busy: start write(s+1) before spending host time on issuing copy(s).
                j = nxt % n_slots
                if h2d_done[j] is not None:
                    h2d_done[j].synchronize()  # slot j's previous copy has left the host
                t1 = clock()
                self.writer.submit(self.steps[nxt], self.slots[j])
            else:
                t1 = clock()
            tb = clock()
            if self.barrier is not None:
                # TP (sglang-kt's loop): rank 0 has waited for its write of s and submitted s+1, each
                # rank has waited for its own copy of s-1; no rank copies s before all are here
                self.barrier()
            t2 = clock()
            self._issue_copy_and_post(s, None, h2d_done, post_done, copy_times)
            t3 = clock()
            if nxt < steps:
                if not self.writer.asynchronous:  # a synchronous writer works here, after copy(s) is queued
                    j = nxt % n_slots
                    if h2d_done[j] is not None:
                        h2d_done[j].synchronize()
                    self.writer.submit(self.steps[nxt], self.slots[j])
                self.writer.wait()
            t4 = clock()
            a_wait += t4 - t3
            if self.diagnose:
                for k, dt in (
                    ("wait_copy", t1 - t0),
                    ("submit_a", tb - t1),
                    ("barrier", t2 - tb),
                    ("issue_bc", t3 - t2),
                    ("wait_a", t4 - t3),
                ):
                    host[k] = host.get(k, 0.0) + dt * 1e3
        return a_wait * 1e3

    def _run_stream(self, copy_times, a_times) -> float:
        """Stream-driven layer: enqueue everything, the streams and kt-kernel's callbacks do the rest."""
        import torch

        n_slots = len(self.slots)
        h2d_done = [None] * n_slots
        post_done = [None, None]
        w = self.writer_stream
        for s in range(len(self.steps)):
            i = s % n_slots
            if h2d_done[i] is not None:
                w.wait_event(h2d_done[i])  # slot i's previous copy has left the host
            if a_times is not None:
                st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                st.record(w)
            self.writer.submit_on_stream(w, self.steps[s], self.slots[i])
            a_ev = en if a_times is not None else torch.cuda.Event()
            a_ev.record(w)
            if a_times is not None:
                a_times.append((st, en))
            self._issue_copy_and_post(s, a_ev, h2d_done, post_done, copy_times)
        return float("nan")

    def run(self) -> tuple[float, float, float]:
        """One overlapped layer. Returns (layer_ms, stage A ms inside it, copy-stream busy ms). On a
        CPU device the layer runs serially (`run_serial`), the parts inside it unknown (NaN)."""
        import torch

        copy_times = [] if self.diagnose else None
        a_times = [] if self.diagnose else None
        self.host_ms: dict = {}
        if not self.cuda:
            t0 = time.perf_counter()
            self.run_serial()
            return (time.perf_counter() - t0) * 1e3, float("nan"), float("nan")
        torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        if self.config.driver == "stream":
            a_ms = self._run_stream(copy_times, a_times)
            self.host_ms["enqueue"] = (time.perf_counter() - t0) * 1e3
        else:
            a_ms = self._run_host(copy_times, self.host_ms)
        torch.cuda.synchronize(self.device)
        layer_ms = (time.perf_counter() - t0) * 1e3
        if a_times:
            a_ms = sum(x.elapsed_time(y) for x, y in a_times)
        b_busy = sum(a.elapsed_time(b) for a, b in copy_times) if copy_times else float("nan")
        return layer_ms, a_ms, b_busy

    def measure(self, repeats: int = 3) -> PipelineResult:
        # warm-up (Triton compile, first-touch of GPU memory, kt-kernel thread wake-up)
        self.stage_a_alone_ms()
        self.stage_b_alone_ms()
        self.stage_c_alone_ms()
        self.run()
        a = [self.stage_a_alone_ms() for _ in range(repeats)]
        b = [self.stage_b_alone_ms() for _ in range(repeats)]
        c = [self.stage_c_alone_ms() for _ in range(repeats)]
        runs, hosts = [], []
        for _ in range(repeats):
            runs.append(self.run())
            hosts.append(dict(self.host_ms))
        lp10, lmed, lp90 = quantiles([r[0] for r in runs])
        med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
        host_ms = {k: med([h.get(k, 0.0) for h in hosts]) for k in hosts[0]} if hosts and hosts[0] else {}
        return PipelineResult(
            config=self.config,
            experts=self.experts,
            layer_bytes=self.layer_bytes,
            stage_a_ms=med(a),
            stage_b_ms=med(b),
            stage_c_ms=med(c),
            layer_ms=lmed,
            layer_ms_p10=lp10,
            layer_ms_p90=lp90,
            repeats=repeats,
            a_in_pipeline_ms=med([r[1] for r in runs]),
            b_in_pipeline_ms=med([r[2] for r in runs]),
            host_ms=host_ms if self.diagnose or self.config.driver == "stream" else {},
        )
