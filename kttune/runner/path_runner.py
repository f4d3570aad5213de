"""The path runner: prompts of L tokens through K decoder layers, chunk by chunk, on the hybrid and the
layerwise prefill paths of sglang-kt 0.7.2 (docs/sglang-kt.md; the runner itself: docs/path-runner.md).

Per forward of M tokens (a chunk, or the prompt's tail), the switch: layerwise when the method
streams experts and `0 < threshold <= M`, otherwise hybrid (`force` overrides it, to time one path
at every size); the forwards and their paths are kttune.spec.forwards.forward_plan's. Per layer:

- attention block (norm, attention over the cached prefix plus the chunk, o projection, TP
  all-reduce), residual, norm, router;
- hybrid: rank 0 copies hidden states, ids and weights to pinned host buffers on a side stream and
  submits the kt-kernel forward behind them (`submit_with_cuda_stream`), which skips the experts
  masked as GPU-resident, then a `sync_with_cuda_stream` and the H2D copy of its output; meanwhile the
  main stream runs the GPU-resident experts (ids 0..n-1) and the shared experts; the main stream
  waits for the side stream's event and sums;
- layerwise: the layer's experts are streamed through the three-stage pipeline
  (`kttune.runner.pipeline.LayerPipeline`) into the one full-layer slot (BF16 copies its resident
  experts GPU->GPU and streams the rest; the other methods stream every expert), then the GPU MoE
  runs over all experts; layers one after another;
- the routed output is scaled by `routed_scaling_factor`, the shared experts added, TP all-reduce.

On a CPU device (the CPU variant) the same code runs with torch CPU ops for the GPU side: kt-kernel
is submitted without a stream and overlaps with the torch work, and the pipeline runs serially.

Timing is wall clock with the device synchronised at every layer boundary and between the attention
and the MoE part. Peak device memory (allocated, reserved) is recorded per prompt.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from kttune.kernels.cpu_moe import moe_forward
from kttune.kernels.decoder import AttnCache, attention_block, route, swiglu_mlp
from kttune.kernels.gpu_experts import GpuExperts, gpu_subset_moe
from kttune.runner.result import ForwardRecord, PathRun
from kttune.runner.stack import PathStack
from kttune.spec.forwards import forward_plan
from kttune.spec.methods import get_method


@dataclass
class Dist:
    """Tensor parallelism for the runner: this process's rank in a torch.distributed group."""

    rank: int = 0
    tp: int = 1

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        if self.tp > 1:
            import torch.distributed as dist

            dist.all_reduce(t)
        return t

    def barrier(self) -> None:
        if self.tp > 1:
            import torch.distributed as dist

            dist.barrier()


class PathRunner:
    """Runs prompts on a built `PathStack`. `pipeline_config` is the layerwise pipeline's
    configuration (default: sglang-kt 0.7.2's own loop, `SGLANG_KT_PIPELINE`: a host loop, one
    expert a step into two pinned slots, as the server runs it; docs/path-runner.md#pipeline)."""

    def __init__(self, stack: PathStack, pipeline_config: Any = None, dist: Dist | None = None):
        from kttune.runner.pipeline import PipelineConfig

        self.st = stack
        self.dist = dist or Dist(stack.opts.rank, stack.opts.tp)
        cuda = stack.is_cuda
        if pipeline_config is None:
            from kttune.cost.components import SGLANG_KT_PIPELINE

            pipeline_config = PipelineConfig.from_label(SGLANG_KT_PIPELINE)
        self.pipeline_config = pipeline_config
        self.side = torch.cuda.Stream(stack.device) if cuda else None
        self._shared_slots: list = []  # TP: the layerwise slots' factories (kttune.runner.tp_slots), closed with the runner
        self._run_peak = 0  # device peaks of the prompt being run, and of its forward's phases
        self._peaks: dict[str, int] = {}
        self.backends: dict[str, str] = {
            "cpu_experts": stack.cpu_backend or "none (rank > 0)",
            "sglang_ops": _sglang_status(),
        }

    def close(self) -> None:
        """Release what the runner holds beyond its stack (TP: the shared slots' CUDA registrations)."""
        self._sync()
        for f in self._shared_slots:
            f.close()
        self._shared_slots.clear()

    # ---- timing ----------------------------------------------------------------------------------
    def _sync(self) -> None:
        if self.st.is_cuda:
            torch.cuda.synchronize(self.st.device)

    def _now(self) -> float:
        self._sync()
        return time.perf_counter()

    def _phase_end(self, phase: str | None = None) -> tuple[float, float]:
        """Synchronise and take the time the phase that just ran ended; then note its device peak
        (the prompt's in `self._run_peak`, a named phase's in `self._peaks`) and start the next
        one's. Returns (end, resume): the next phase is timed from `resume`, so this bookkeeping
        (`torch.cuda.memory_stats` builds a dict of every allocator counter, 0.5-1.5 ms of host time
        on the H200 box) is charged to no phase: the server runs none of it."""
        t = self._now()
        if self.st.is_cuda:
            peak = torch.cuda.max_memory_allocated(self.st.device)
            if phase:
                self._peaks[phase] = max(self._peaks.get(phase, 0), peak)
            self._run_peak = max(self._run_peak, peak)
            torch.cuda.reset_peak_memory_stats(self.st.device)
        self._bookkeeping()
        return t, time.perf_counter()

    def _bookkeeping(self) -> None:
        """What `_phase_end` does between phases besides the peaks, untimed (nothing; a test's seam
        for host work that must stay out of the phase times)."""

    # ---- the two MoE paths -------------------------------------------------------------------------
    def _cpu_submit(self, h: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> Callable[[], torch.Tensor | None]:
        """Start the CPU experts (rank 0) and return a function giving their output on the device."""
        st, b, t = self.st, self.st.buffers, h.shape[0]
        if self.dist.rank != 0 or st.opts.gpu_experts >= st.spec.num_experts:
            return lambda: None
        if st.cpu is None:  # torch fallback, synchronous
            ids_cpu = ids.cpu().clone()
            ids_cpu[ids_cpu < st.opts.gpu_experts] = -1
            g, u, d = st.cpu_dense
            out = moe_forward(h.cpu(), ids_cpu, w.cpu(), g, u, d, compute_dtype=torch.bfloat16).to(h.device)
            return lambda: out
        # GPU-resident experts go to the CPU as -1 (kt-kernel skips them, as it does deferred
        # experts), besides the layer's gpu_experts_mask
        ids = ids.masked_fill(ids < st.opts.gpu_experts, -1)
        if not st.is_cuda:
            b["x"][:t].copy_(h)
            b["ids"][:t].copy_(ids)
            b["w"][:t].copy_(w)
            st.cpu.submit(b["x"][:t], b["ids"][:t], b["w"][:t], b["out"][:t])

            def wait_cpu() -> torch.Tensor:
                st.cpu.cpu_infer.sync()
                return b["out"][:t]

            return wait_cpu
        main = torch.cuda.current_stream(st.device)
        ready = torch.cuda.Event()
        ready.record(main)
        side, handle = self.side, int(self.side.cuda_stream)
        # the side stream reads these device tensors later: tell the caching allocator, or their
        # blocks (the masked ids above have no other reference) are handed to the main stream's next
        # allocations before the copies have run
        for tensor in (h, ids, w):
            tensor.record_stream(side)
        with torch.cuda.stream(side):
            side.wait_event(ready)
            b["x"][:t].copy_(h, non_blocking=True)
            b["ids"][:t].copy_(ids, non_blocking=True)
            b["w"][:t].copy_(w, non_blocking=True)
            st.cpu.submit_on_stream(handle, b["x"][:t], b["ids"][:t], b["w"][:t], b["out"][:t])
            st.cpu.sync_on_stream(handle)
            b["out_dev"][:t].copy_(b["out"][:t], non_blocking=True)
            done = torch.cuda.Event()
            done.record(side)

        def wait_gpu() -> torch.Tensor:
            main.wait_event(done)
            return b["out_dev"][:t]

        return wait_gpu

    def _hybrid(self, layer, h: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """kt_ep_wrapper's hybrid MoE: gpu_out (the resident experts' fused MoE over every slot, the
        CPU's masked; zeros without resident experts) plus cpu_out (the device copy of kt-kernel's
        output), summed into gpu_out, all bf16."""
        cpu_out = self._cpu_submit(h, ids, w)
        if layer.resident is not None:
            y, b = gpu_subset_moe(layer.resident, h, ids, w)
            self.backends.setdefault("gpu_experts", b)
        else:
            y = torch.zeros(h.shape[0], h.shape[1], dtype=torch.bfloat16, device=h.device)
        c = cpu_out()
        return y if c is None else y.add_(c.to(y.dtype))

    def _layerwise(self, layer, h: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        from kttune.runner.pipeline import LayerPipeline

        st = self.st
        n = st.opts.gpu_experts
        first = 0 if st.streams_resident else n
        if st.pipeline is None:  # sglang-kt allocates the full-layer slot at the first layerwise forward
            tp = self.dist.tp
            cfg = self.pipeline_config
            slots = None
            if tp > 1:  # sglang-kt's loop: one expert a step, closed by a barrier of all ranks, host-driven
                from kttune.runner.pipeline import PipelineConfig
                from kttune.runner.tp_slots import SharedSlots

                cfg = PipelineConfig(2, 1)
                slots = SharedSlots(self.dist, pin=st.is_cuda)
                self._shared_slots.append(slots)
            st.pipeline = LayerPipeline(
                st.host,
                st.writer,
                cfg,
                st.device,
                first=first,
                tp=tp,
                barrier=self.dist.barrier if tp > 1 else None,
                slot_factory=slots,
            )
            if slots is not None:
                st.notes.extend(n for n in slots.notes if n not in st.notes)
            self.backends["layerwise_writer"] = getattr(st.writer, "backend", "")
            self.backends["layerwise_pipeline"] = self.pipeline_config.label()
        pl = st.pipeline
        if first and layer.resident is not None:  # resident experts copied GPU -> GPU
            for name, t in layer.resident.t.items():
                pl.gpu.dst[name][:n].copy_(t)
        if st.is_cuda:
            pl.run()
        else:
            pl.run_serial()
        y, b = GpuExperts(st.method, pl.gpu.dst).forward(h, ids, w)
        self.backends.setdefault("layerwise_moe", b)
        return y

    # ---- one prompt ------------------------------------------------------------------------------
    def run_prompt(
        self, prompt_tokens: int, chunk: int, threshold: int, force: str | None = None, seed: int = 0
    ) -> PathRun:
        st, spec = self.st, self.st.spec
        if min(chunk, prompt_tokens) > st.opts.max_tokens:  # the largest forward, not the flag, must fit
            raise ValueError(f"chunk {chunk} exceeds the stack's buffers ({st.opts.max_tokens} tokens)")
        if force == "layerwise" and not get_method(st.method).layerwise:
            raise ValueError(f"{st.method} has no layerwise path")
        cpu_cap = st.cpu.max_tokens if st.cpu is not None else st.opts.max_tokens
        plan = forward_plan(get_method(st.method).layerwise, prompt_tokens, chunk, threshold, force)
        too_big = [m for path, m, _ in plan if path == "hybrid" and m > cpu_cap]
        if too_big and self.dist.rank == 0 and st.opts.gpu_experts < spec.num_experts:
            raise ValueError(f"hybrid forward of {too_big[0]} tokens exceeds kt-kernel's max_len {cpu_cap}")
        cuda = st.is_cuda
        self.backends["cpu_experts"] = st.cpu_backend or "none (rank > 0)"  # the stack may have switched thread counts
        if cuda:
            torch.cuda.synchronize(st.device)
            torch.cuda.reset_peak_memory_stats(st.device)
        base = torch.cuda.memory_allocated(st.device) if cuda else 0
        self._run_peak = 0
        self.last_hidden = None  # the previous prompt's output is not part of this one's peak
        # the prompt's hidden states are drawn on the device, as the embedding writes them there: drawn
        # on the host, torch's intra-op threads spin on every core after the draw and slowed the first
        # layer's CPU work by 4-20 ms on the H200 box (benchmarks/results/2026-12-01-h200-pcie5-xeon-amx-16c/diag-layer-state.log)
        g = torch.Generator(device=st.device).manual_seed(seed)
        caches = [AttnCache(capacity=prompt_tokens) for _ in st.layers]
        forwards = []
        for path, m, prefix in plan:
            x = torch.randn(m, spec.hidden_size, generator=g, device=st.device, dtype=torch.bfloat16).mul_(0.5)
            pos = torch.arange(prefix, prefix + m, device=st.device)
            lay, att, moe = [], [], []
            self._peaks = {}  # this forward's, by phase
            _, t0 = self._phase_end()
            for layer, cache in zip(st.layers, caches):
                x, (t_attn, t_moe) = self._layer(layer, cache, x, pos, path)
                t2, next_t0 = self._phase_end("moe")  # one boundary: this MoE part's end, the next layer's start
                att.append((t_attn - t0) * 1e3)
                moe.append((t2 - t_moe) * 1e3)
                lay.append(att[-1] + moe[-1])
                t0 = next_t0
            forwards.append(
                ForwardRecord(
                    m,
                    prefix,
                    path,
                    tuple(lay),
                    tuple(att),
                    tuple(moe),
                    self._peaks.get("attn", 0),
                    self._peaks.get("moe", 0),
                )
            )
        self.last_hidden = x  # the last forward's output (the TP tests compare it)
        peak = max(torch.cuda.max_memory_allocated(st.device), self._run_peak) if cuda else 0
        peak_r = torch.cuda.max_memory_reserved(st.device) if cuda else 0
        return PathRun(
            model=spec.name,
            method=st.method,
            tp=self.dist.tp,
            layers_run=len(st.layers),
            model_layers=spec.num_layers,
            model_moe_layers=spec.num_moe_layers,
            gpu_experts=st.opts.gpu_experts,
            chunk=chunk,
            threshold=threshold,
            cpuinfer=getattr(st.cpu, "threads", 0) or 0,
            prompt_tokens=prompt_tokens,
            forwards=tuple(forwards),
            forced_path=force,
            peak_allocated_bytes=int(peak),
            peak_reserved_bytes=int(peak_r),
            baseline_allocated_bytes=int(base),
            buffer_tokens=st.opts.max_tokens,
            layer_weight_bytes=sum(layer.attn.nbytes + layer.w.nbytes for layer in st.layers),
            device=_device_name(st.device),
            backends=dict(self.backends),
            notes=tuple(st.notes),
        )

    def _layer(
        self, layer, cache: AttnCache, x: torch.Tensor, pos: torch.Tensor, path: str
    ) -> tuple[torch.Tensor, tuple[float, float]]:
        """One decoder layer; returns its output and (the end of its attention part, the start of its
        MoE part) (`_phase_end`)."""
        st, w = self.st, layer.w
        # the residual stream is updated in place, as SGLang's fused add-norm does: hidden states,
        # residual (x) and the normed input (h) are what persists through a layer
        h, ids, rw = attention_block(layer.attn, w, x, pos, cache, st.router, st.spec.top_k, self.dist.all_reduce)
        marks = self._phase_end("attn")
        routed = self._layerwise(layer, h, ids, rw) if path == "layerwise" else self._hybrid(layer, h, ids, rw)
        if st.router.scaling != 1.0:
            routed.mul_(st.router.scaling)
        if w.shared_w13 is not None:
            routed.add_(swiglu_mlp(h, w.shared_w13, w.shared_w2))
        return x.add_(self.dist.all_reduce(routed)), marks

    def moe_output(
        self, h: torch.Tensor, path: str, layer_index: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The routed-expert output of layer `layer_index` for normed hidden states h on `path`, with
        the routing used (for the CPU tests' laws)."""
        layer = self.st.layers[layer_index]
        ids, rw = route(h @ layer.w.gate.t(), self.st.router, self.st.spec.top_k, layer.w.bias)
        y = self._layerwise(layer, h, ids, rw) if path == "layerwise" else self._hybrid(layer, h, ids, rw)
        return self.dist.all_reduce(y), ids, rw


def _device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    import platform

    return f"cpu ({platform.processor() or platform.machine()})"


def _sglang_status() -> str:
    """Whether sglang-kt / sgl-kernel import here (their fused MoE ops would be used); kttune's own
    kernels run otherwise."""
    have = []
    for mod in ("sglang", "sgl_kernel"):
        try:
            __import__(mod)
            have.append(mod)
        except Exception:
            pass
    if have:
        return "importable: " + ", ".join(have) + " (runner still uses kttune's kernels for every op)"
    return "sglang and sgl-kernel not importable here: kttune's kernels run every GPU op"
