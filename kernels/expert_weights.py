"""Routed-expert weights, one module for every user: their formats per KT method, random synthesis,
quantisation from dense weights, and stage A (experts written in the GPU layout into host slots).

Formats (docs/weight-formats.md). One expert has three matrices, gate and up `[I, H]` and down
`[H, I]` (`[out_features, in_features]`, the checkpoint layout), plus the method's scales:

| method (source format) | weight | scale |
|---|---|---|
| BF16, AMXINT4, AMXINT8 (bf16) | bf16 `[out, in]` | none (AMX methods quantise inside kt-kernel) |
| FP8 (fp8_block) | e4m3fn `[out, in]` | fp32 `[ceil(out/128), ceil(in/128)]` (`weight_scale_inv`) |
| FP8_PERCHANNEL (fp8_channel) | e4m3fn `[out, in]` | fp32 `[out]` |
| RAWINT4 (int4_g32) | int32 `[out, in/8]`, nibble j of word w = element 8w+j, stored q+8 | bf16 `[out, in/32]` |
| MXFP4 (mxfp4) | uint8 `[out, in/2]`, e2m1 codes, element 2j in the low nibble | bf16 `[out, in/32]`, powers of two |
| MXFP8 (mxfp8) | e4m3fn `[out, in]` | uint8 `[out, in/32]`, ue8m0 |

The RAWINT4 words are the compressed-tensors `weight_packed` tensors; kt-kernel reads the same bytes
(it accepts uint8 `[out, in/2]` too: identical memory). The MX formats are `kttune.kernels.mx`'s. The
byte count of one expert is `kttune.spec.methods.bytes_per_expert` of the source format, but for
MXFP4, whose ue8m0 scale bytes kt-kernel's loader hands the kernel as bf16 (one more byte per 32
weights); the tensor shapes here must add up to it (tests/kernels/test_expert_weights.py holds them
to it).

Stage A writes one GPU rank's share of an expert (I/tp rows of gate and up, I/tp columns of down)
into a slot laid out per tensor kind as the GPU layer reads it (sglang's `w13_weight` [E, 2I, H],
`w2_weight` [E, H, I] and their scales):

    w13 = cat(gate, up) rows   s13 = cat(gate_scale, up_scale) rows   w2 = down   s2 = down_scale

Two writers fill a slot: `KtExpertWriter` (kt-kernel's `write_weight_scale_to_buffer_task`, what
sglang-kt runs, asynchronous, can be submitted on a CUDA stream) and `TorchExpertWriter` (torch
copies of the same bytes, where kt-kernel is not importable; labelled so by the probes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from kttune.kernels import int4 as int4_fmt
from kttune.kernels import mx
from kttune.spec.methods import FP8_BLOCK, get_method, host_bytes_per_expert
from kttune.units import MIB

FP8_E4M3_MAX = 448.0
INT4_GROUP = int4_fmt.GROUP

# kt-kernel quantises AMXINT4/AMXINT8 online from bf16 (AMXMoEWrapper.load_weights_from_tensors).
ONLINE_QUANTIZED = ("AMXINT4", "AMXINT8")
# Methods whose experts this module can hold and write.
METHODS = ("BF16", "FP8", "FP8_PERCHANNEL", "RAWINT4", "AMXINT4", "AMXINT8", "MXFP4", "MXFP8")
# Methods whose experts stage A streams in layerwise prefill (docs/weight-formats.md).
LAYERWISE_METHODS = ("BF16", "FP8", "FP8_PERCHANNEL", "RAWINT4", "MXFP4")


def norm_method(method: str) -> str:
    return method.strip().upper().replace("-", "_")


def source_format(method: str) -> str:
    """The format (`kttune.spec.methods.FORMATS`) of `method`'s experts in host RAM as kt-kernel is
    handed them."""
    m = norm_method(method)
    return "bf16" if m in ONLINE_QUANTIZED else get_method(m).cpu_format


def expert_nbytes(method: str, hidden: int, inter: int) -> int:
    """Bytes of one expert in host RAM as kt-kernel is handed it (`host_bytes_per_expert` of the source
    format: MXFP4's scales in bf16); the tensor kinds add up to it (tests/kernels/test_expert_weights.py)."""
    return host_bytes_per_expert(source_format(method), hidden, inter)


def write_nbytes(method: str, hidden: int, inter: int, tp: int = 1) -> int:
    """Bytes stage A writes for one expert into the slots of all `tp` GPU ranks (MXFP4's scales in
    bf16, as kt-kernel writes them)."""
    return tp * host_bytes_per_expert(source_format(method), hidden, inter // tp)


# ---- tensor kinds -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorKind:
    name: str
    shape: tuple[int, ...]  # per expert
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()


def host_kinds(method: str, hidden: int, inter: int) -> tuple[TensorKind, ...]:
    """Per-expert tensors in host RAM: gate, up, down, then gate_scale, up_scale, down_scale where the
    format has scales."""
    h, i = hidden, inter
    fmt = source_format(method)
    if fmt == "bf16":
        w = ((i, h), (i, h), (h, i))
        return tuple(TensorKind(n, s, torch.bfloat16) for n, s in zip(("gate", "up", "down"), w))
    if fmt in ("fp8_block", "fp8_channel"):
        mats = tuple(
            TensorKind(n, s, torch.float8_e4m3fn) for n, s in zip(("gate", "up", "down"), ((i, h), (i, h), (h, i)))
        )
        if fmt == "fp8_block":
            bi, bh = math.ceil(i / FP8_BLOCK), math.ceil(h / FP8_BLOCK)
            sc = ((bi, bh), (bi, bh), (bh, bi))
        else:
            sc = ((i,), (i,), (h,))
        return mats + tuple(
            TensorKind(n, s, torch.float32) for n, s in zip(("gate_scale", "up_scale", "down_scale"), sc)
        )
    if fmt == "int4_g32":
        if h % INT4_GROUP or i % INT4_GROUP:
            raise ValueError(f"RAWINT4 needs H and I divisible by {INT4_GROUP} (got H={h}, I={i})")
        p = int4_fmt.PACK
        mats = tuple(
            TensorKind(n, s, torch.int32)
            for n, s in zip(("gate", "up", "down"), ((i, h // p), (i, h // p), (h, i // p)))
        )
        g = INT4_GROUP
        return mats + tuple(
            TensorKind(n, s, torch.bfloat16)
            for n, s in zip(("gate_scale", "up_scale", "down_scale"), ((i, h // g), (i, h // g), (h, i // g)))
        )
    if fmt in ("mxfp4", "mxfp8"):
        g = mx.GROUP
        if h % g or i % g:
            raise ValueError(f"{fmt.upper()} needs H and I divisible by {g} (got H={h}, I={i})")
        if fmt == "mxfp4":
            mats = tuple(
                TensorKind(n, s, torch.uint8)
                for n, s in zip(("gate", "up", "down"), ((i, h // 2), (i, h // 2), (h, i // 2)))
            )
            scale_dtype = torch.bfloat16
        else:
            mats = tuple(
                TensorKind(n, s, torch.float8_e4m3fn) for n, s in zip(("gate", "up", "down"), ((i, h), (i, h), (h, i)))
            )
            scale_dtype = torch.uint8
        return mats + tuple(
            TensorKind(n, s, scale_dtype)
            for n, s in zip(("gate_scale", "up_scale", "down_scale"), ((i, h // g), (i, h // g), (h, i // g)))
        )
    raise ValueError(f"no expert weight layout for method {method!r} ({', '.join(METHODS)})")


def slot_kinds(method: str, hidden: int, inter: int, tp: int = 1) -> tuple[TensorKind, ...]:
    """Per-expert tensors of one GPU rank's layer (w13, s13, w2, s2), as stage A writes them."""
    m = norm_method(method)
    if m not in LAYERWISE_METHODS:
        raise ValueError(f"no layerwise expert layout for method {method!r} ({', '.join(LAYERWISE_METHODS)})")
    if inter % tp:
        raise ValueError(f"expert width {inter} is not divisible by tp={tp}")
    k = {t.name: t for t in host_kinds(m, hidden, inter // tp)}
    out = [TensorKind("w13", (2 * k["gate"].shape[0],) + k["gate"].shape[1:], k["gate"].dtype)]
    if "gate_scale" in k:
        gs = k["gate_scale"]
        out.append(TensorKind("s13", (2 * gs.shape[0],) + gs.shape[1:], gs.dtype))
    out.append(TensorKind("w2", k["down"].shape, k["down"].dtype))
    if "down_scale" in k:
        out.append(TensorKind("s2", k["down_scale"].shape, k["down_scale"].dtype))
    return tuple(out)


def word_kinds(kinds: Sequence[TensorKind]) -> tuple[TensorKind, ...]:
    """Slot kinds (`slot_kinds`) as stage C reads them: MXFP4's uint8 `[out, in/2]` matrices as the
    int32 `[out, in/8]` words of the same bytes (`kttune.kernels.int4.mxfp4_words`); every other kind unchanged."""
    return tuple(
        TensorKind(k.name, k.shape[:-1] + (k.shape[-1] // 4,), torch.int32)
        if k.dtype == torch.uint8 and k.name in ("w13", "w2")
        else k
        for k in kinds
    )


def kinds_nbytes(kinds: Sequence[TensorKind]) -> int:
    return sum(k.nbytes for k in kinds)


# ---- quantisation ---------------------------------------------------------------------------------------


def quantize_fp8_block(w: torch.Tensor, block: int = FP8_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """`w` `[N, K]` -> (e4m3fn `[N, K]`, fp32 scale `[ceil(N/b), ceil(K/b)]`), `w ~= q * scale` per block
    (DeepSeek's `weight_scale_inv` convention)."""
    n, k = w.shape
    nb, kb = math.ceil(n / block), math.ceil(k / block)
    padded = torch.zeros(nb * block, kb * block)
    padded[:n, :k] = w.to(torch.float32)
    blocks = padded.view(nb, block, kb, block)
    scale = (blocks.abs().amax(dim=(1, 3)) / FP8_E4M3_MAX).clamp(min=1e-12)
    q = (blocks / scale[:, None, :, None]).view(nb * block, kb * block)[:n, :k]
    return q.to(torch.float8_e4m3fn).contiguous(), scale.contiguous()


def dequant_fp8_block(q: torch.Tensor, scale: torch.Tensor, block: int = FP8_BLOCK) -> torch.Tensor:
    n, k = q.shape
    s = scale.float().repeat_interleave(block, 0)[:n].repeat_interleave(block, 1)[:, :k]
    return q.to(torch.float32) * s


def quantize_fp8_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`w` `[N, K]` -> (e4m3fn `[N, K]`, fp32 scale `[N]`), one scale per output row."""
    s = (w.float().abs().amax(dim=-1) / FP8_E4M3_MAX).clamp_min(1e-12)
    return (w.float() / s.unsqueeze(-1)).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn), s.contiguous()


def dequant_fp8_channel(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.to(torch.float32) * scale.float().unsqueeze(-1)


_QUANT = {
    "fp8_block": (quantize_fp8_block, dequant_fp8_block),
    "fp8_channel": (quantize_fp8_channel, dequant_fp8_channel),
    "int4_g32": (int4_fmt.quantize_int4_g32, int4_fmt.dequantize_int4_g32),
    "mxfp4": (mx.quantize_mxfp4, mx.dequant_mxfp4),
    "mxfp8": (mx.quantize_mxfp8, mx.dequant_mxfp8),
}


# ---- random synthesis -----------------------------------------------------------------------------------


def fill_random_(t: torch.Tensor, seed: int = 0, block_bytes: int = 64 * MIB) -> None:
    """Fill a (large) tensor with non-zero random bytes quickly: one random block, tiled. Byte values
    stay away from the fp8 NaN codes (0x7f/0xff) so any fp8 view is finite."""
    flat = t.view(torch.uint8).view(-1)
    g = torch.Generator().manual_seed(seed)
    n = min(block_bytes, flat.numel())
    block = torch.randint(1, 0x70, (n,), dtype=torch.uint8, generator=g)
    block |= torch.randint(0, 2, (n,), dtype=torch.uint8, generator=g) << 7
    blk = block.to(flat.device)
    for off in range(0, flat.numel(), n):
        m = min(n, flat.numel() - off)
        flat[off : off + m].copy_(blk[:m])


def _random_expert(kind: TensorKind, g: torch.Generator) -> torch.Tensor:
    """One expert's tensor of `kind` with values a layer can compute with: bf16 weights ~ N(0, 1/in),
    fp8/int4 weights as random codes (no NaN), scales small and positive. FP8 block scales are one
    value per matrix, so reading them as per-row scales (`kttune.kernels.gpu_experts` on CUDA) computes
    the same layer."""
    if kind.name.endswith("scale") and kind.dtype == torch.uint8:  # ue8m0 codes: 2^-10 to 2^-7
        return torch.randint(mx.UE8M0_BIAS - 10, mx.UE8M0_BIAS - 6, kind.shape, dtype=torch.uint8, generator=g)
    if kind.name.endswith("scale") and kind.dtype == torch.float32 and len(kind.shape) == 2:
        return torch.full(kind.shape, float(torch.rand((), generator=g)) * 2e-3 + 5e-4)
    if kind.name.endswith("scale"):
        return (torch.rand(kind.shape, generator=g) * 2e-3 + 5e-4).to(kind.dtype)
    if kind.dtype == torch.bfloat16:
        fan_in = kind.shape[-1]
        return (torch.randn(kind.shape, generator=g) / math.sqrt(fan_in)).to(torch.bfloat16)
    t = torch.empty(kind.shape, dtype=kind.dtype)
    fill_random_(t, int(torch.randint(0, 2**31 - 1, (1,), generator=g)))
    return t


class HostExperts:
    """One layer's routed experts in host RAM, in `method`'s source format: one `[E, ...]` tensor per
    kind (`host_kinds`); `gate[e]` etc. are what kt-kernel loads for expert e."""

    def __init__(self, method: str, hidden: int, inter: int, tensors: dict[str, torch.Tensor]):
        self.method = norm_method(method)
        self.hidden, self.inter = hidden, inter
        self.kinds = host_kinds(self.method, hidden, inter)
        self.experts = int(tensors["gate"].shape[0])
        for k in self.kinds:
            t = tensors[k.name]
            if tuple(t.shape[1:]) != k.shape or t.dtype != k.dtype:
                raise ValueError(f"{k.name}: got {tuple(t.shape)} {t.dtype}, want [E, {k.shape}] {k.dtype}")
        self._t = {k.name: tensors[k.name] for k in self.kinds}
        self._content: tuple | None = None  # what `random` drew, while no tensor was written since
        self._versions: tuple[int, ...] = ()

    # the tensors, by name
    gate = property(lambda self: self._t["gate"])
    up = property(lambda self: self._t["up"])
    down = property(lambda self: self._t["down"])
    gate_scale = property(lambda self: self._t.get("gate_scale"))
    up_scale = property(lambda self: self._t.get("up_scale"))
    down_scale = property(lambda self: self._t.get("down_scale"))

    @classmethod
    def empty(cls, method: str, hidden: int, inter: int, experts: int) -> "HostExperts":
        kinds = host_kinds(method, hidden, inter)
        return cls(method, hidden, inter, {k.name: torch.empty((experts,) + k.shape, dtype=k.dtype) for k in kinds})

    @classmethod
    def random(
        cls, method: str, hidden: int, inter: int, experts: int, seed: int = 0, distinct: int | None = None
    ) -> "HostExperts":
        """Random experts. `distinct` experts are drawn and tiled over the layer (timing does not depend
        on the values; a 384-expert layer fills at memcpy speed). Default: every expert distinct when the
        layer is at most 64 MiB, else 4."""
        layer = cls.empty(method, hidden, inter, experts)
        if distinct is None:
            distinct = experts if layer.nbytes <= 64 * MIB else 4
        distinct = max(1, min(distinct, experts))
        g = torch.Generator().manual_seed(seed)
        for k in layer.kinds:
            dst = layer._t[k.name]
            for e in range(distinct):
                dst[e].copy_(_random_expert(k, g))
            for e0 in range(distinct, experts, distinct):
                n = min(distinct, experts - e0)
                dst[e0 : e0 + n].copy_(dst[:n])
        layer._content = ("random", layer.method, hidden, inter, experts, seed, distinct)
        layer._versions = tuple(t._version for t in layer._t.values())
        return layer

    @property
    def content_key(self) -> tuple | None:
        """Names these experts' values where `random` drew them and no tensor was written in place
        since (torch's version counter): two layers of one key hold the same weights. None otherwise."""
        if self._content is None or tuple(t._version for t in self._t.values()) != self._versions:
            return None
        return self._content

    @classmethod
    def from_dense(cls, method: str, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> "HostExperts":
        """`method`'s experts quantised from dense `[E, I, H]`, `[E, I, H]`, `[E, H, I]` weights."""
        e, i, h = gate.shape
        fmt = source_format(method)
        ts: dict[str, torch.Tensor] = {}
        if fmt == "bf16":
            for n, w in (("gate", gate), ("up", up), ("down", down)):
                ts[n] = w.to(torch.bfloat16).contiguous()
        else:
            quant = _QUANT[fmt][0]
            for n, w in (("gate", gate), ("up", up), ("down", down)):
                qs = [quant(w[x].float()) for x in range(e)]
                ts[n] = torch.stack([a for a, _ in qs]).contiguous()
                ts[n + "_scale"] = torch.stack([b for _, b in qs]).contiguous()
        return cls(method, h, i, ts)

    def dense(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """fp32 (gate, up, down) `[E, I, H]`, `[E, I, H]`, `[E, H, I]` the format encodes. AMX methods:
        the bf16 source (kt-kernel quantises it further)."""
        fmt = source_format(self.method)
        out = []
        for n in ("gate", "up", "down"):
            w = self._t[n]
            if fmt == "bf16":
                out.append(w.float())
            else:
                deq = _QUANT[fmt][1]
                s = self._t[n + "_scale"]
                out.append(torch.stack([deq(w[x], s[x]) for x in range(self.experts)]))
        return out[0], out[1], out[2]

    def tensors(self) -> list[torch.Tensor]:
        return list(self._t.values())

    def slot_kinds(self, tp: int = 1) -> tuple[TensorKind, ...]:
        return slot_kinds(self.method, self.hidden, self.inter, tp)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._t.values())

    def expected(self, e: int, tp: int = 1, rank: int = 0) -> dict[str, torch.Tensor]:
        """What stage A must put into GPU rank `rank`'s slot for expert `e` (the checks' reference)."""
        i, r = self.inter // tp, rank
        rows = slice(r * i, (r + 1) * i)
        out = {"w13": torch.cat([self.gate[e][rows], self.up[e][rows]])}
        down = self.down[e]
        out["w2"] = down[:, r * down.shape[1] // tp : (r + 1) * down.shape[1] // tp]
        if self.gate_scale is not None:
            gs, us, ds = self.gate_scale[e], self.up_scale[e], self.down_scale[e]
            srows = slice(r * gs.shape[0] // tp, (r + 1) * gs.shape[0] // tp)
            out["s13"] = torch.cat([gs[srows], us[srows]])
            out["s2"] = ds if ds.dim() == 1 else ds[:, r * ds.shape[1] // tp : (r + 1) * ds.shape[1] // tp]
        return out


# ---- stage A: slots and writers -------------------------------------------------------------------------


class HostSlot:
    """`group` experts' worth of pinned (or pageable) host memory, one `[group, ...]` view per kind.
    `buffer` (uint8, `nbytes(kinds, group)` long) lays the views over memory the caller owns (the
    shared mapping of `kttune.runner.tp_slots.SharedSlots`); else the slot allocates its own. `peers`: at TP, the same slot
    of every GPU rank in rank order (rank 0's view of them), which stage A fills in one write."""

    def __init__(self, kinds: Sequence[TensorKind], group: int, pin: bool = True, buffer: torch.Tensor | None = None):
        self.kinds, self.group = tuple(kinds), group
        if buffer is None:
            buffer = torch.empty(self.nbytes(kinds, group), dtype=torch.uint8, pin_memory=pin)
        self.buffer = buffer
        self.buffer.fill_(0)  # touch the pages (NUMA placement follows the caller's binding)
        self.peers: tuple[HostSlot, ...] = (self,)
        self.views: dict[str, torch.Tensor] = {}
        off = 0
        for k in self.kinds:
            n = k.nbytes * group
            self.views[k.name] = self.buffer[off : off + n].view(k.dtype).view((group,) + k.shape)
            off += n

    def ptrs(self, j: int) -> tuple[int, int, int, int]:
        """(w13, s13, w2, s2) addresses of the slot's j-th expert (0 where the method has no scale)."""
        v = self.views
        return tuple(v[n][j].data_ptr() if n in v else 0 for n in ("w13", "s13", "w2", "s2"))  # type: ignore[return-value]

    @staticmethod
    def nbytes(kinds: Sequence[TensorKind], group: int) -> int:
        return kinds_nbytes(kinds) * group

    def peer_ptrs(self, j: int) -> tuple[list[int], list[int], list[int], list[int]]:
        """(w13, s13, w2, s2) address lists over `peers` (one per GPU rank) of their j-th expert: the
        arguments of kt-kernel's `write_weight_scale_to_buffer_task`."""
        return tuple(list(x) for x in zip(*(p.ptrs(j) for p in self.peers)))  # type: ignore[return-value]


class TorchExpertWriter:
    """Stage A by torch CPU copies (synchronous: `submit` does the work)."""

    backend = "torch-cpu copy_"
    asynchronous = False
    stream_capable = False

    def __init__(self, host: HostExperts):
        self.host = host

    def submit(self, experts: range, slot: HostSlot) -> None:
        """Each of the slot's `peers` (its own slot at TP 1, every rank's at TP) gets its rank's share."""
        tp = len(slot.peers)
        for j, e in enumerate(experts):
            for r, peer in enumerate(slot.peers):
                for name, src in self.host.expected(e, tp, r).items():
                    peer.views[name][j].copy_(src)

    def wait(self) -> None:
        pass

    def close(self) -> None:
        pass


class KtExpertWriter:
    """Stage A by kt-kernel: the layer is loaded into a kt-kernel MoE of the method (as sglang-kt's
    NativeMoEWrapper does) and `write_weight_scale_to_buffer_task` writes each expert into the slot on
    kt-kernel's `threads` workers. With `layer`, an already built `KtMoeLayer` over `host` is used
    (the hybrid path's CPU layer writes for the layerwise path too, as in sglang-kt)."""

    asynchronous = True
    stream_capable = True  # kt-kernel's submit_with_cuda_stream (needs a CUDA stream: GPU only)

    def __init__(self, host: HostExperts, threads: int, numa_node: int = 0, layer: Any = None):
        from kttune.kernels.kt_moe import KtMoeLayer

        self.host, self.threads = host, threads
        self._own = layer is None
        self.layer = layer or KtMoeLayer.for_writer(host, threads=threads, numa_nodes=(numa_node,))
        self.cpu = self.layer.cpu_infer
        self.backend = f"kt-kernel:{self.layer.variant} {self.layer.kernel_class}.write_weight_scale_to_buffer_task"

    def _tasks(self, experts: range, slot: HostSlot):
        for j, e in enumerate(experts):
            yield self.layer.write_task(int(e), *slot.peer_ptrs(j))  # one rank's share per peer

    def submit(self, experts: range, slot: HostSlot) -> None:
        for task in self._tasks(experts, slot):
            self.cpu.submit(task)

    def wait(self) -> None:
        self.cpu.sync()

    def submit_on_stream(self, stream: Any, experts: range, slot: HostSlot) -> None:
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
        if self._own and self.layer is not None:
            self.layer.close()
        self.layer = None
        self.cpu = None


def kt_available() -> bool:
    from kttune.kernels.kt_ext import load_kt_kernel

    return load_kt_kernel() is not None


def make_writer(host: HostExperts, threads: int, prefer_kt: bool = True) -> tuple[Any, list[str]]:
    """kt-kernel's writer where it runs this method here, else torch's; and notes saying which."""
    notes: list[str] = []
    if prefer_kt and kt_available():
        try:
            return KtExpertWriter(host, threads), notes
        except Exception as e:  # kt-kernel present but refuses this method/CPU
            notes.append(f"kt-kernel writer unavailable for {host.method}: {e}; stage A by torch CPU copies")
    elif prefer_kt:
        notes.append("kt-kernel not importable: stage A by torch CPU copies (not kt-kernel's writer)")
    return TorchExpertWriter(host), notes
