"""One kt-kernel MoE layer over host experts (`kttune.kernels.expert_weights.HostExperts`).

It is built the way sglang-kt's wrappers build it (`NativeMoEWrapper.load_weights`,
`AMXMoEWrapper.load_weights_from_tensors`, kt-kernel 0.7.2 `kt_kernel/utils/amx.py`; see
docs/weight-formats.md): a `MOEConfig` with per-expert weight pointers (one flat bf16 pointer per
matrix for the online-quantised AMX methods), the method's class picked from what the loaded
extension variant compiled in, then `load_weights_task`. The layer then serves

- the CPU side of the hybrid path: `forward` (submit + sync) or `submit_on_stream` / `sync_on_stream`
  (kt-kernel's `submit_with_cuda_stream` / `sync_with_cuda_stream`, as sglang-kt's KT wrapper runs
  CPU experts behind the D2H copies); experts whose entry in `gpu_mask` is true are skipped by the
  C++ side (they run on the GPU);
- stage A of the layerwise path: `write_task` (`write_weight_scale_to_buffer_task`).
"""

from __future__ import annotations

import gc
from typing import Any, Sequence

from kttune.kernels.expert_weights import ONLINE_QUANTIZED, HostExperts
from kttune.kernels.kt_ext import KtKernel, host_cpu_flags, load_kt_kernel, quiet_stdout
from kttune.kernels import kt_spares
from kttune.kernels.kt_pool import cpu_infer
from kttune.spec.kt_classes import KT_CLASS_PREFERENCE, kt_class_leaks
from kttune.spec.methods import FP8_BLOCK


def class_candidates(
    moe_module: Any, method: str, isa: Sequence[str] | None = None, *, writer: bool = False
) -> list[str]:
    """kt-kernel MoE class names for `method`, most preferred first, that the loaded variant
    compiled in (and, with `isa`, whose extra ISA needs the host meets; with `writer`, that have
    `write_weight_scale_to_buffer_task`)."""
    names = set(dir(moe_module))
    out = []
    for name, needs in KT_CLASS_PREFERENCE.get(method.upper(), ()):
        if name not in names or (isa is not None and not all(f in isa for f in needs)):
            continue
        if writer and not hasattr(getattr(moe_module, name), "write_weight_scale_to_buffer_task"):
            continue
        out.append(name)
    return out


def kt_class_name(kt: KtKernel, method: str, isa: Sequence[str] = ()) -> str | None:
    """The MoE class kt-kernel would run `method` with on this host, or None if not compiled in."""
    found = class_candidates(kt.ext.moe, method, isa)
    return found[0] if found else None


def kt_method_leaks(kt: KtKernel, method: str, isa: Sequence[str] = ()) -> bool:
    """Whether the class kt-kernel would run `method` with here keeps its packed layer after the
    layer is destroyed (`kttune.spec.kt_classes.kt_class_leaks`); False where none is compiled in."""
    kernel = kt_class_name(kt, method, isa)
    return kernel is not None and kt_class_leaks(kernel, kt.version)


def expert_ptrs(t: Any) -> list[int]:
    """One address per expert of an `[E, ...]` tensor."""
    base = t.data_ptr()
    stride = t[0].numel() * t.element_size()
    return [base + e * stride for e in range(t.shape[0])]


def moe_config(ext: Any, experts: int, top_k: int, hidden: int, inter: int, mask_ptr: int) -> Any:
    """kt-kernel's `MOEConfig` with its GPU-expert mask at `mask_ptr` (a bool per expert, true: on the
    GPU, skipped by the CPU forward).

    kt-kernel 0.7.2 binds two constructors of five ints: `(experts, top_k, hidden, inter,
    num_gpu_experts)` with a 32-bit count, then `(..., gpu_experts_mask)` with a pointer, and pybind11
    takes the first that converts. A mask whose address fits in 31 bits (the GPU box's Python heap
    lies there) is read as a count, and the config's mask pointer is left null: every expert is then
    computed (docs/path-runner.md#kt-kernels-gpu-expert-mask). kt-kernel's own wrapper, which sglang-kt
    uses, passes a pinned mask, whose address does not fit. Where the first constructor took the
    address, the config is built without a mask and the pointer set on it; its `num_gpu_experts`
    (which 0.7.2's forward does not read: it skips by the mask) stays 0."""
    cfg = ext.moe.MOEConfig(experts, top_k, hidden, inter, mask_ptr)
    if getattr(cfg, "gpu_experts_mask", mask_ptr) != mask_ptr:
        cfg = ext.moe.MOEConfig(experts, top_k, hidden, inter)
        cfg.gpu_experts_mask = mask_ptr
    return cfg


class KtMoeLayer:
    """One MoE layer on kt-kernel's extension, on the process's worker pool for its thread count.

    `forward(x, ids, weights, out)`: `x` bf16 `[T, H]`, routing ids int64 `[T, k]`, weights fp32
    `[T, k]`, `out` bf16 `[T, H]`. Keeps alive every tensor the C++ side reads through raw pointers;
    `close()` frees the layer (the worker pool stays: kttune.kernels.kt_pool), or, for a class
    kt-kernel cannot free, keeps it for the next layer of the same random weights
    (kttune.kernels.kt_spares). `isa` names the host's ISA flags a class may need beyond its build
    (None: this host's own, /proc/cpuinfo); `refused` lists the classes that refused the CPU all the same."""

    def __init__(
        self,
        host: HostExperts,
        *,
        top_k: int,
        threads: int,
        threadpools: int = 1,
        numa_nodes: Sequence[int] | None = None,
        max_tokens: int = 1024,
        isa: Sequence[str] | None = (),
        kt: KtKernel | None = None,
        writer: bool = False,
        gpu_experts: int = 0,
        gpu_mask: Any = None,
    ) -> None:
        import torch

        bad_mask = gpu_mask is not None and (
            gpu_experts
            or gpu_mask.dtype != torch.bool
            or gpu_mask.shape != (host.experts,)
            or gpu_mask.is_cuda
            or not gpu_mask.is_contiguous()
        )
        if bad_mask:
            raise ValueError(
                f"gpu_mask must be a contiguous host bool tensor of {host.experts} experts (and no gpu_experts)"
            )
        kt = kt or load_kt_kernel()
        if kt is None:
            raise RuntimeError("kt-kernel is not importable")
        method = host.method
        # Only classes this CPU runs are built: kt-kernel 0.7.2 registers a layer's scratch with its
        # process-wide buffer before a class refuses the CPU (AVX-VNNI-256 RawInt4 without AVX-VNNI),
        # then frees the layer but not the registration, and the next layer that grows the buffer writes
        # into the freed memory (docs/path-runner.md#a-refused-kt-kernel-class-corrupts-the-heap).
        names = class_candidates(kt.ext.moe, method, host_cpu_flags() if isa is None else isa, writer=writer)
        if not names:
            raise RuntimeError(
                f"kt-kernel {kt.variant} has no {method} MoE class"
                + (" with write_weight_scale_to_buffer_task" if writer else "")
            )
        if threadpools < 1 or threads < threadpools:
            raise ValueError(f"need threads >= threadpools >= 1 (got {threads} threads, {threadpools} pools)")
        if host.inter % threadpools:
            raise ValueError(f"expert width {host.inter} is not divisible by {threadpools} thread pools")
        self.kt, self.host, self.method, self.variant = kt, host, method, kt.variant
        self.threads, self.threadpools = threads, threadpools
        # AMX kernels size activation buffers in M_STEP rows (32): keep max_len a multiple of 64, as
        # --chunked-prefill-size values are.
        self.max_tokens = max(64, -(-max_tokens // 64) * 64)
        nodes = list(numa_nodes) if numa_nodes is not None else list(range(threadpools))
        experts = host.experts
        # true: the expert runs on the GPU, skipped here; filled before the build, as sglang-kt passes its
        # mask (`moe_config` keeps its address a pointer). `gpu_mask` places them other than first.
        # A caller's own mask stays the caller's, and a layer masked at its build may have left the
        # masked experts unloaded (kt-kernel's loaders may skip them): neither is kept for another.
        content = host.content_key if gpu_mask is None and not gpu_experts else None
        self._spare_key = (
            (kt.variant, kt.version, tuple(names), content, top_k, self.max_tokens, threads, threadpools)
            + tuple(nodes[:threadpools])
            if content is not None
            else None
        )
        spare = kt_spares.take(self._spare_key) if self._spare_key is not None else None
        if gpu_mask is not None:
            self.gpu_mask = gpu_mask  # the caller's own tensor, kept alive: kt-kernel reads it by its address
        else:  # a kept layer's mask is the one its config holds
            self.gpu_mask = spare.mask if spare is not None else torch.zeros(experts, dtype=torch.bool)
            self.set_gpu_experts(gpu_experts)
        self._map = torch.arange(experts, dtype=torch.int64)
        self._bsz = torch.zeros(1, dtype=torch.int32)
        errors = []
        self.refused: list[str] = []  # classes that refused this CPU at construction (see above)
        with quiet_stdout():
            self.cpu_infer = cpu_infer(kt.ext, threads, threadpools, nodes)
            if spare is not None:  # built before, of these very weights: nothing to load
                self.moe, self._cfg, self.kernel_class = spare.moe, spare.cfg, spare.kernel_class
                return
            for name in names:  # a class compiled in may still refuse this CPU at construction
                try:
                    self.moe = self._build(kt.ext, name, top_k, threadpools)
                    self.kernel_class = name
                    break
                except RuntimeError as ex:
                    errors.append(f"{name}: {ex}")
                    self.refused.append(name)
            else:
                raise RuntimeError("; ".join(errors))

    @classmethod
    def for_writer(cls, host: HostExperts, *, threads: int, numa_nodes: Sequence[int] = (0,)) -> "KtMoeLayer":
        """A layer used only by stage A (top-1, one token of scratch)."""
        return cls(host, top_k=1, threads=threads, numa_nodes=numa_nodes, max_tokens=1, isa=None, writer=True)

    def _build(self, ext: Any, cls_name: str, top_k: int, pools: int) -> Any:
        h = self.host
        cfg = moe_config(ext, h.experts, top_k, h.hidden, h.inter, self.gpu_mask.data_ptr())
        cfg.layer_idx = 0
        cfg.pool = self.cpu_infer.backend_
        cfg.max_len = self.max_tokens
        if self.method in ONLINE_QUANTIZED:
            cfg.gate_proj, cfg.up_proj, cfg.down_proj = h.gate.data_ptr(), h.up.data_ptr(), h.down.data_ptr()
            cfg.load = False
            cfg.save = False
        else:
            none = [0] * h.experts
            cfg.gate_projs, cfg.up_projs, cfg.down_projs = (
                [expert_ptrs(h.gate)],
                [expert_ptrs(h.up)],
                [expert_ptrs(h.down)],
            )
            cfg.gate_scales = [expert_ptrs(h.gate_scale) if h.gate_scale is not None else none]
            cfg.up_scales = [expert_ptrs(h.up_scale) if h.up_scale is not None else none]
            cfg.down_scales = [expert_ptrs(h.down_scale) if h.down_scale is not None else none]
            qc = cfg.quant_config
            if self.method == "FP8":
                qc.bits, qc.group_size, qc.zero_point = 8, FP8_BLOCK, False
            elif self.method == "FP8_PERCHANNEL":
                qc.bits, qc.per_channel, qc.zero_point = 8, True, False
            elif self.method in ("RAWINT4", "MXFP4", "MXFP8"):  # group scales: the group from their shape
                bits = 8 if self.method == "MXFP8" else 4
                qc.bits, qc.group_size, qc.zero_point = bits, h.hidden // h.gate_scale.shape[-1], False
        self._cfg = cfg
        moe = getattr(ext.moe, cls_name)(cfg)
        self.cpu_infer.submit(moe.load_weights_task(self._map.data_ptr()))
        self.cpu_infer.sync()
        return moe

    def set_gpu_experts(self, n: int) -> None:
        """The first `n` experts on the GPU (skipped here), the rest on the CPU: the mask rewritten in
        place, so the address kt-kernel's config holds stays the mask's."""
        self.gpu_mask.zero_()
        self.gpu_mask[:n] = True

    @property
    def can_write_buffer(self) -> bool:
        return hasattr(self.moe, "write_weight_scale_to_buffer_task")

    def _forward_task(self, x: Any, ids: Any, weights: Any, out: Any) -> Any:
        t = x.shape[0]
        if t > self.max_tokens:
            raise ValueError(f"{t} tokens exceed the layer's max_len {self.max_tokens}")
        self._bsz[0] = t
        return self.moe.forward_task(
            self._bsz.data_ptr(), ids.shape[1], ids.data_ptr(), weights.data_ptr(), x.data_ptr(), out.data_ptr(), False
        )

    def forward(self, x: Any, ids: Any, weights: Any, out: Any) -> None:
        """One layer forward on host tensors, submitted and waited for."""
        self.cpu_infer.submit(self._forward_task(x, ids, weights, out))
        self.cpu_infer.sync()

    def submit(self, x: Any, ids: Any, weights: Any, out: Any) -> None:
        """Start the forward on the worker pool and return; `cpu_infer.sync()` waits for it."""
        self.cpu_infer.submit(self._forward_task(x, ids, weights, out))

    def submit_on_stream(self, stream_handle: int, x: Any, ids: Any, weights: Any, out: Any) -> None:
        """Enqueue the forward on a CUDA stream (host tensors, pinned): kt-kernel submits it from a host
        callback when the stream reaches it, after the copies queued before it."""
        self.cpu_infer.submit_with_cuda_stream(stream_handle, self._forward_task(x, ids, weights, out))

    def sync_on_stream(self, stream_handle: int) -> None:
        """Make the stream wait until the pool has finished (kt-kernel's `sync_with_cuda_stream`)."""
        self.cpu_infer.sync_with_cuda_stream(stream_handle, 0)

    def write_task(
        self, expert: int, w13: Sequence[int], s13: Sequence[int], w2: Sequence[int], s2: Sequence[int]
    ) -> Any:
        """Stage A task: write one expert, in GPU layout split over `len(w13)` GPU TP ranks, into the
        slot buffers at those addresses."""
        return self.moe.write_weight_scale_to_buffer_task(
            len(w13), int(expert), list(w13), list(s13), list(w2), list(s2)
        )

    def write_expert(
        self, expert: int, w13: Sequence[int], s13: Sequence[int], w2: Sequence[int], s2: Sequence[int]
    ) -> None:
        self.cpu_infer.submit(self.write_task(expert, w13, s13, w2, s2))
        self.cpu_infer.sync()

    def close(self) -> None:
        kept = self._spare_key is not None and hasattr(self, "moe")
        if kept and kt_class_leaks(self.kernel_class, self.kt.version):
            kt_spares.give(self._spare_key, kt_spares.Spare(self.moe, self._cfg, self.gpu_mask, self.kernel_class))
        with quiet_stdout():
            for name in ("moe", "_cfg"):
                if hasattr(self, name):
                    delattr(self, name)
            gc.collect()

    def __enter__(self) -> "KtMoeLayer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
