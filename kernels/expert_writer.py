"""Stage A of the layerwise pipeline: write experts, in the layout the GPU layer reads, into pinned
host slots.

Host experts are kept per matrix as the checkpoint stores them (`HostExperts`). A slot holds
`group` experts; per tensor kind it is laid out [group, ...] so that stage B moves one tensor kind of
a whole step with one copy into the GPU layer `[E, ...]` tensors (sglang's `w13_weight` [E, 2I, H],
`w2_weight` [E, H, I] and, for quantised methods, their scales):

    w13 = cat(gate, up) rows   s13 = cat(gate_scale, up_scale) rows   w2 = down   s2 = down_scale

Two writers fill a slot:
- `KtExpertWriter`: kt-kernel's `write_weight_scale_to_buffer_task` (what sglang-kt runs) on
  kt-kernel's worker threads; asynchronous (`submit` then `wait`).
- `TorchExpertWriter`: torch CPU `copy_` of the same bytes on torch's intra-op threads; synchronous.
  Used where kt-kernel is not importable (and labelled as such by the probes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kttune.spec.methods import FP8_BLOCK


@dataclass(frozen=True)
class TensorKind:
    name: str  # w13, s13, w2, s2
    shape: tuple[int, ...]  # per expert
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()


def expert_tensor_kinds(method: str, hidden: int, inter: int) -> tuple[TensorKind, ...]:
    """Per-expert tensors of the GPU layer for a KT method (tp = 1), as stage A writes them."""
    h, i = hidden, inter
    m = method.upper()
    if m == "BF16":
        return (TensorKind("w13", (2 * i, h), torch.bfloat16), TensorKind("w2", (h, i), torch.bfloat16))
    if m == "RAWINT4":
        return (
            TensorKind("w13", (2 * i, h // 8), torch.int32),
            TensorKind("s13", (2 * i, h // 32), torch.bfloat16),
            TensorKind("w2", (h, i // 8), torch.int32),
            TensorKind("s2", (h, i // 32), torch.bfloat16),
        )
    if m == "FP8":
        bi, bh = math.ceil(i / FP8_BLOCK), math.ceil(h / FP8_BLOCK)
        return (
            TensorKind("w13", (2 * i, h), torch.float8_e4m3fn),
            TensorKind("s13", (2 * bi, bh), torch.float32),
            TensorKind("w2", (h, i), torch.float8_e4m3fn),
            TensorKind("s2", (bh, bi), torch.float32),
        )
    if m == "FP8_PERCHANNEL":
        return (
            TensorKind("w13", (2 * i, h), torch.float8_e4m3fn),
            TensorKind("s13", (2 * i,), torch.float32),
            TensorKind("w2", (h, i), torch.float8_e4m3fn),
            TensorKind("s2", (h,), torch.float32),
        )
    raise ValueError(f"no layerwise expert layout for method {method!r} (BF16, RAWINT4, FP8, FP8_PERCHANNEL)")


def expert_bytes(kinds: tuple[TensorKind, ...]) -> int:
    return sum(k.nbytes for k in kinds)


class HostExperts:
    """One layer's experts in host RAM as the checkpoint stores them: gate/up/down (and their scales)
    as [E, ...] tensors; `gate[e]` etc. are the per-expert matrices kt-kernel loads."""

    def __init__(self, method: str, hidden: int, inter: int, experts: int, *, fill: bool = True, seed: int = 0):
        self.method, self.hidden, self.inter, self.experts = method.upper(), hidden, inter, experts
        self.kinds = expert_tensor_kinds(method, hidden, inter)
        k = {t.name: t for t in self.kinds}
        half = lambda t: (t.shape[0] // 2,) + t.shape[1:]  # noqa: E731 - gate or up half of w13/s13
        self.gate = torch.empty((experts,) + half(k["w13"]), dtype=k["w13"].dtype)
        self.up = torch.empty_like(self.gate)
        self.down = torch.empty((experts,) + k["w2"].shape, dtype=k["w2"].dtype)
        self.gate_scale = self.up_scale = self.down_scale = None
        if "s13" in k:
            self.gate_scale = torch.empty((experts,) + half(k["s13"]), dtype=k["s13"].dtype)
            self.up_scale = torch.empty_like(self.gate_scale)
            self.down_scale = torch.empty((experts,) + k["s2"].shape, dtype=k["s2"].dtype)
        if fill:
            self.fill_random(seed)

    def tensors(self) -> list[torch.Tensor]:
        return [t for t in (self.gate, self.up, self.down, self.gate_scale, self.up_scale, self.down_scale) if t is not None]

    def fill_random(self, seed: int = 0) -> None:
        """Finite, non-zero random contents (weights as random bytes; scales as small positive floats)."""
        from kttune.probes.gpu_common import fill_random_

        for j, t in enumerate((self.gate, self.up, self.down)):
            fill_random_(t, seed + j)
        for t in (self.gate_scale, self.up_scale, self.down_scale):
            if t is not None:
                t.copy_(torch.rand(t.shape, generator=torch.Generator().manual_seed(seed + 7)) * 0.01 + 0.001)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def expected(self, e: int) -> dict[str, torch.Tensor]:
        """What a writer must put in a slot for expert `e` (for checks)."""
        out = {"w13": torch.cat([self.gate[e], self.up[e]]), "w2": self.down[e]}
        if self.gate_scale is not None:
            out["s13"] = torch.cat([self.gate_scale[e], self.up_scale[e]])
            out["s2"] = self.down_scale[e]
        return out


class HostSlot:
    """`group` experts' worth of pinned (or pageable) host memory, one [group, ...] view per kind."""

    def __init__(self, kinds: tuple[TensorKind, ...], group: int, pin: bool = True):
        self.kinds, self.group = kinds, group
        total = sum(k.nbytes for k in kinds) * group
        self.buffer = torch.empty(total, dtype=torch.uint8, pin_memory=pin)
        self.buffer.fill_(0)  # touch the pages (NUMA placement follows the caller's binding)
        self.views: dict[str, torch.Tensor] = {}
        off = 0
        for k in kinds:
            n = k.nbytes * group
            self.views[k.name] = self.buffer[off : off + n].view(k.dtype).view((group,) + k.shape)
            off += n


class TorchExpertWriter:
    """Stage A by torch CPU copies (synchronous: `submit` does the work)."""

    backend = "torch-cpu copy_"
    asynchronous = False
    stream_capable = False

    def __init__(self, host: HostExperts):
        self.host = host

    def submit(self, experts: range, slot: HostSlot) -> None:
        h = self.host
        i = h.gate.shape[1]
        for j, e in enumerate(experts):
            v = slot.views
            v["w13"][j, :i].copy_(h.gate[e])
            v["w13"][j, i:].copy_(h.up[e])
            v["w2"][j].copy_(h.down[e])
            if h.gate_scale is not None:
                si = h.gate_scale.shape[1]
                v["s13"][j, :si].copy_(h.gate_scale[e])
                v["s13"][j, si:].copy_(h.up_scale[e])
                v["s2"][j].copy_(h.down_scale[e])

    def wait(self) -> None:
        pass

    def close(self) -> None:
        pass


def kt_available() -> bool:
    try:
        import kt_kernel  # noqa: F401

        return True
    except Exception:
        return False


def kt_cpu_infer(threads: int, numa_node: int = 0):
    """The process's kt-kernel CPUInfer with one pool of `threads` workers on `numa_node`
    (kttune.kernels.kt_pool: pools are built once per process, as sglang-kt does)."""
    from kt_kernel import kt_kernel_ext as ext

    from kttune.kernels.kt_pool import cpu_infer

    return cpu_infer(ext, threads, 1, [numa_node])


class KtExpertWriter:
    """Stage A by kt-kernel: the layer is loaded into a kt-kernel MoE of the method (as sglang-kt's
    NativeMoEWrapper does), and `write_weight_scale_to_buffer_task` writes each expert into the slot
    on kt-kernel's `threads` worker threads."""

    asynchronous = True
    stream_capable = True  # kt-kernel's submit_with_cuda_stream (needs a CUDA stream: GPU only)

    def __init__(self, host: HostExperts, threads: int, numa_node: int = 0):
        from kt_kernel import kt_kernel_ext as ext

        from kttune.kernels.kt_moe import KtMoe, class_candidates

        self.host = host
        self.threads = threads
        self.cpu = kt_cpu_infer(threads, numa_node)
        names = class_candidates(ext.moe, host.method, writer=True)
        if not names:
            raise RuntimeError(f"kt-kernel has no {host.method} MoE with write_weight_scale_to_buffer_task")
        errors = []
        for name in names:  # a class compiled in may still refuse this CPU at construction
            try:
                self._kt = KtMoe(ext, self.cpu, name, host.method, hidden=host.hidden, inter=host.inter, top_k=1,
                                 max_len=1, gate=host.gate, up=host.up, down=host.down, gate_scale=host.gate_scale,
                                 up_scale=host.up_scale, down_scale=host.down_scale)
                break
            except RuntimeError as ex:
                errors.append(f"{name}: {ex}")
        else:
            raise RuntimeError("; ".join(errors))
        self.moe = self._kt.moe
        self.backend = f"kt-kernel:{getattr(ext, '__cpu_variant__', '?')} {name}.write_weight_scale_to_buffer_task"

    def _tasks(self, experts: range, slot: HostSlot):
        v = slot.views
        for j, e in enumerate(experts):
            ptr = lambda name: [v[name][j].data_ptr()] if name in v else [0]  # noqa: E731
            yield self.moe.write_weight_scale_to_buffer_task(1, int(e), ptr("w13"), ptr("s13"), ptr("w2"), ptr("s2"))

    def submit(self, experts: range, slot: HostSlot) -> None:
        for task in self._tasks(experts, slot):
            self.cpu.submit(task)

    def wait(self) -> None:
        self.cpu.sync()

    def submit_on_stream(self, stream, experts: range, slot: HostSlot) -> None:
        """Enqueue the writes of `experts` on CUDA `stream` and make the stream wait for them: kt-kernel
        submits each task from a host callback when the stream reaches it (`submit_with_cuda_stream`)
        and a second callback blocks the stream until the pool is done (`sync_with_cuda_stream`)."""
        h = int(stream.cuda_stream)
        for task in self._tasks(experts, slot):
            self.cpu.submit_with_cuda_stream(h, task)
        self.cpu.sync_with_cuda_stream(h, 0)

    def close(self) -> None:
        if self.cpu is not None:
            self.cpu.sync()
        self.moe = None
        self._kt = None
        self.cpu = None
