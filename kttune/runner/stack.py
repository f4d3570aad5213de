"""K consecutive MoE decoder layers of a model at its real shapes with random weights, ready for
both prefill paths: per layer the attention block, norms, router and shared experts on the device and
the n GPU-resident experts; one set of routed experts in host RAM in the method's format, loaded into
one kt-kernel MoE (the hybrid path's CPU experts and the layerwise path's stage A writer); the
layerwise full-layer slot, allocated at the first layerwise forward as sglang-kt does.

The routed experts in host RAM (and in kt-kernel) are shared by the K layers: one layer of a large
model is 1-11 GB, far beyond any cache, so reusing it does not make a layer faster, and K distinct
copies would not fit the host's RAM three times over (kt-kernel keeps its own copy).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from kttune.kernels.attention_shape import attention_shape
from kttune.kernels.decoder import Attention, LayerWeights, RouterSpec
from kttune.kernels.expert_weights import HostExperts, TorchExpertWriter, norm_method
from kttune.kernels.gpu_experts import GpuExperts
from kttune.spec.methods import get_method
from kttune.spec.model_spec import ModelSpec


@dataclass(frozen=True)
class StackOptions:
    layers: int = 2  # K
    gpu_experts: int = 0  # n per layer (experts 0..n-1, sglang's `uniform` placement)
    cpuinfer: int = 0  # kt-kernel worker threads; 0 = cores - 3 (see kttune.probes.gpu_pipeline)
    max_tokens: int = 4096  # largest forward (chunk) the device-side buffers are sized for
    # largest hybrid forward: kt-kernel's `max_len` (its scratch grows with it: a Kimi-K2 layer at
    # 65536 tokens would need ~50 GB of host scratch); 0 = max_tokens
    cpu_max_tokens: int = 0
    tp: int = 1
    rank: int = 0
    seed: int = 0
    device: str = ""  # "" = cuda when available, else cpu
    prefer_kt: bool = True


def default_cpuinfer() -> int:
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    return max(1, n - 3) if n > 4 else max(1, n)


def small_spec(spec: ModelSpec, hidden: int = 256, inter: int = 128, experts: int = 16, heads: int = 4) -> ModelSpec:
    """The model's architecture at small shapes (the CPU variant): same attention kind, router, top-k
    (capped at experts/2), shared experts, layer kinds; narrower everything."""
    kv = max(1, heads * spec.num_kv_heads // max(1, spec.num_attention_heads)) if spec.attention == "gqa" else heads
    over: dict[str, Any] = dict(
        hidden_size=hidden,
        moe_intermediate_size=inter,
        num_experts=experts,
        top_k=min(spec.top_k, experts // 2),
        num_attention_heads=heads,
        num_kv_heads=kv,
        shared_expert_intermediate_size=inter if spec.shared_expert_intermediate_size else 0,
    )
    if spec.attention == "mla":
        over.update(
            kv_lora_rank=64, q_lora_rank=96 if spec.q_lora_rank else 0, qk_rope_head_dim=16, head_dim=48, v_head_dim=32
        )
    else:
        over.update(head_dim=32, v_head_dim=32)
    return replace(spec, **over)


@dataclass
class Layer:
    layer_id: int
    attn: Attention
    w: LayerWeights
    resident: GpuExperts | None  # the n GPU experts (rank's I/tp share)


@dataclass
class PathStack:
    spec: ModelSpec
    router: RouterSpec
    method: str
    opts: StackOptions
    device: torch.device
    layers: list[Layer]
    host: HostExperts
    cpu: Any  # KtMoeLayer, or None (torch fallback)
    cpu_backend: str
    writer: Any
    notes: list[str] = field(default_factory=list)
    pipeline: Any = None  # LayerPipeline, built at the first layerwise forward
    buffers: dict = field(default_factory=dict)
    cpu_dense: tuple | None = None  # torch fallback weights
    # every kt-kernel MoE built for this stack, by worker thread count: kept until close, since
    # kt-kernel 0.7.2 never frees a closed layer's weight copy (docs/path-runner.md#memory-across-configurations)
    kt_by_threads: dict = field(default_factory=dict)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def streams_resident(self) -> bool:
        """Whether the layerwise load re-sends GPU-resident experts (docs/weight-formats.md)."""
        return get_method(self.method).layerwise_resends_gpu_experts

    def set_gpu_experts(self, n: int) -> None:
        """Move the GPU/CPU split to n experts per layer (resident experts rebuilt, kt-kernel's mask
        updated, the layerwise slot re-allocated at the next layerwise forward)."""
        if not 0 <= n <= self.spec.num_experts:
            raise ValueError(f"gpu experts {n} outside 0..{self.spec.num_experts}")
        self.opts = replace(self.opts, gpu_experts=n)
        for layer in self.layers:
            layer.resident = None
        self.pipeline = None
        if self.is_cuda:
            torch.cuda.empty_cache()
        for layer in self.layers:
            layer.resident = (
                GpuExperts.from_host(self.host, range(n), self.device, self.opts.tp, self.opts.rank) if n else None
            )
        if self.cpu is not None:
            self.cpu.set_gpu_experts(n)

    def set_threads(self, threads: int) -> None:
        """Serve the CPU experts and stage A with `threads` kt-kernel workers: the MoE built for that
        count (built now, and then kept, if it is new), its GPU mask set to the current split."""
        if threads == self.opts.cpuinfer and threads in self.kt_by_threads:
            return
        if threads not in self.kt_by_threads:
            self.kt_by_threads[threads] = _cpu_side(self.spec, self.method, self.host, self.opts, threads, self.notes)
        self.cpu, self.cpu_backend, self.writer = self.kt_by_threads[threads]
        self.opts = replace(self.opts, cpuinfer=threads)
        self.pipeline = None  # the layerwise pipeline drives this writer
        if self.cpu is not None:
            self.cpu.set_gpu_experts(self.opts.gpu_experts)

    def close(self) -> None:
        for cpu, _, writer in self.kt_by_threads.values():
            if writer is not None:
                writer.close()  # a KtExpertWriter over the layer leaves the layer to us
            if cpu is not None:
                cpu.close()
        self.kt_by_threads.clear()
        self.pipeline = None


def build_stack(spec: ModelSpec, router: RouterSpec, method: str, opts: StackOptions) -> PathStack:
    """Build the K layers. Raises ValueError for a configuration the model cannot take."""
    method = norm_method(method)
    dev = torch.device(opts.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    e, n, k = spec.num_experts, opts.gpu_experts, opts.layers
    if not 0 <= n <= e:
        raise ValueError(f"gpu experts {n} outside 0..{e}")
    if k < 1:
        raise ValueError("need at least one layer")
    notes: list[str] = []
    inter_tp = spec.moe_intermediate_size // opts.tp
    ids = list(spec.moe_layer_ids[:k]) if len(spec.moe_layer_ids) >= k else list(range(k))
    host = HostExperts.random(method, spec.hidden_size, spec.moe_intermediate_size, e, seed=opts.seed)
    layers = []
    for j, lid in enumerate(ids):
        attn = Attention(attention_shape(spec, lid), dev, seed=opts.seed + 100 * j, tp=opts.tp, rank=opts.rank)
        w = LayerWeights.random(
            spec.hidden_size,
            e,
            spec.shared_expert_intermediate_size,
            router,
            dev,
            seed=opts.seed + j,
            tp=opts.tp,
            rank=opts.rank,
        )
        res = GpuExperts.from_host(host, range(n), dev, opts.tp, opts.rank) if n else None
        layers.append(Layer(lid, attn, w, res))
    threads = opts.cpuinfer or default_cpuinfer()
    cpu, backend, writer = _cpu_side(spec, method, host, opts, threads, notes)
    if inter_tp * opts.tp != spec.moe_intermediate_size:
        raise ValueError(f"expert width {spec.moe_intermediate_size} not divisible by tp {opts.tp}")
    st = PathStack(
        spec, router, method, replace(opts, cpuinfer=threads), dev, layers, host, cpu, backend, writer, notes
    )
    st.cpu_dense = _torch_cpu_weights(host) if cpu is None and opts.rank == 0 else None
    st.kt_by_threads[threads] = (cpu, backend, writer)
    _alloc_buffers(st)
    return st


def _torch_cpu_weights(host: HostExperts) -> tuple:
    g, u, d = host.dense()
    return (g.to(torch.bfloat16), u.to(torch.bfloat16), d.to(torch.bfloat16))


def _cpu_side(spec: ModelSpec, method: str, host: HostExperts, opts: StackOptions, threads: int, notes: list[str]):
    """The CPU experts for `threads` kt-kernel workers (rank 0: a kt-kernel MoE over the host experts,
    or None for torch's fallback) and the layerwise stage A writer: (cpu, backend, writer)."""
    cpu, backend, writer = None, "", None
    is_rank0 = opts.rank == 0
    n = opts.gpu_experts
    if opts.prefer_kt and is_rank0:
        from kttune.kernels.kt_ext import load_kt_kernel, kt_kernel_error

        kt = load_kt_kernel()
        if kt is None:
            from kttune.extras import KT_KERNEL_INSTALL

            notes.append(f"kt-kernel not importable ({kt_kernel_error()}): CPU experts by torch; {KT_KERNEL_INSTALL}")
        else:
            from kttune.kernels.kt_moe import KtMoeLayer

            try:
                cpu = KtMoeLayer(
                    host,
                    top_k=spec.top_k,
                    threads=threads,
                    max_tokens=opts.cpu_max_tokens or opts.max_tokens,
                    isa=None,
                    writer=get_method(method).layerwise,
                    gpu_experts=n,  # the mask filled before the build, as sglang-kt builds it
                )
                backend = f"kt-kernel:{kt.variant} {cpu.kernel_class} ({threads} threads)"
            except Exception as ex:  # noqa: BLE001 - kt-kernel refuses this method here
                notes.append(f"kt-kernel could not build the {method} layer ({ex}): CPU experts by torch")
                cpu = None
    if cpu is None and is_rank0:
        backend = "torch-cpu (kttune.kernels.cpu_moe.moe_forward)"
    if opts.tp > 1 and not is_rank0 and get_method(method).layerwise:
        # sglang-kt at TP: rank 0's writer fills every rank's share of the expert into that rank's
        # slot (shared memory, kttune.runner.tp_slots); the other ranks only barrier and copy
        from kttune.runner.tp_slots import PeerWritten

        writer = PeerWritten()
    elif is_rank0 and get_method(method).layerwise:
        if cpu is not None and cpu.can_write_buffer:
            from kttune.kernels.expert_weights import KtExpertWriter

            writer = KtExpertWriter(host, threads, layer=cpu)
        else:
            writer = TorchExpertWriter(host)
    return cpu, backend, writer


def _alloc_buffers(st: PathStack) -> None:
    """Pinned host buffers for the hybrid path's D2H / H2D (sglang-kt's `KExpertsCPUBuffer`) and the
    device-side copy of the CPU output (rows = the largest forward)."""
    m, h, k = st.opts.max_tokens, st.spec.hidden_size, st.spec.top_k
    pin = st.is_cuda
    b = st.buffers
    b["x"] = torch.empty(m, h, dtype=torch.bfloat16, pin_memory=pin)
    b["ids"] = torch.empty(m, k, dtype=torch.int64, pin_memory=pin)
    b["w"] = torch.empty(m, k, dtype=torch.float32, pin_memory=pin)
    b["out"] = torch.empty(m, h, dtype=torch.bfloat16, pin_memory=pin)
    if st.is_cuda:
        b["out_dev"] = torch.empty(m, h, dtype=torch.bfloat16, device=st.device)
