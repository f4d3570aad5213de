"""What the GPU probes share: the expert and attention shapes they measure, NUMA placement of host
buffers next to a GPU, the PCIe link's theoretical rate, and CUDA-event timing.

Imports torch lazily where it can, so `kttune.probes` stays importable on machines without it.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

from kttune.hw.gpu_table import PCIE_GTS, pcie_gbps
from kttune.hw.profile import Point
from kttune.kernels.attention_shape import AttentionShape
from kttune.probes.common import point_from_samples
from kttune.spec.loader import load_model
from kttune.spec.methods import UNASKED_MX
from kttune.spec.moe_shape import MoeLayerShape

# ---- shapes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShapeSet:
    """The shapes a GPU probe run measures: from the user's model, or a representative set."""

    moe: tuple[MoeLayerShape, ...]  # each with the KT method of its layerwise path (tp = 1)
    attention: tuple[AttentionShape, ...]
    gemm: tuple[tuple[int, int], ...]  # (hidden, out) of bf16 GEMMs
    notes: tuple[str, ...] = field(default_factory=tuple)
    blocks: tuple = ()  # ModelSpecs whose attention block (norms, attention, router) is timed
    # layers the layerwise pipeline alone streams, beside `moe`'s: another expert size of a method,
    # so the cost model separates the loop's cost per step from its cost per byte (NARROW_LAYERS)
    pipeline_only: tuple[MoeLayerShape, ...] = ()


# Representative shapes when no model is given (docs/model-configs.md#sizes-derived-from-the-configs): a small bf16 MoE and the
# DeepSeek-V3 / Kimi-K2 expert shape in its FP8 and RAWINT4 checkpoints.
QWEN3_30B_A3B = MoeLayerShape(hidden=2048, inter=768, experts=128, top_k=8, method="BF16", name="Qwen3-30B-A3B")
DEEPSEEK_V3 = MoeLayerShape(hidden=7168, inter=2048, experts=256, top_k=8, method="FP8", name="DeepSeek-V3")
KIMI_K2 = MoeLayerShape(hidden=7168, inter=2048, experts=384, top_k=8, method="RAWINT4", name="Kimi-K2")
# Without a model the pipeline also streams a narrow layer of the BF16 and FP8 methods: a model's layer
# the probe did not stream is read from two expert sizes of its method, a cost per step (sglang-kt's
# loop moves one expert a step) apart from a cost per byte (`kttune.cost.components._fit_pipeline_steps`;
# docs/probe.md#the-pipeline). The representative layer's hidden size with a third (BF16) or a
# quarter (FP8) of its intermediate size: no model's shape. Measured on three H100 instances
# (2026-12-05, `benchmarks/bench_pipeline_narrow.py`): the runner's layerwise forwards of nine models
# 4-25% off on average per probe against 8-28% from the representative layers alone, better in each
# of six probes. RAWINT4 has none: every RAWINT4 checkpoint in the catalog is Kimi-K2's layer, which the
# probe streams itself.
NARROW_LAYERS = (
    MoeLayerShape(hidden=2048, inter=256, experts=256, top_k=8, method="BF16", name="narrow-2048x256"),
    MoeLayerShape(hidden=7168, inter=512, experts=96, top_k=8, method="FP8", name="narrow-7168x512"),
)
QWEN3_ATTN = AttentionShape(
    "gqa", hidden=2048, heads=32, kv_heads=4, head_dim=128, v_head_dim=128, name="Qwen3-30B-A3B"
)
DEEPSEEK_ATTN = AttentionShape(
    "mla",
    hidden=7168,
    heads=128,
    kv_heads=128,
    head_dim=192,
    v_head_dim=128,
    kv_lora_rank=512,
    rope_dim=64,
    name="DeepSeek-V3",
)

# The bundled models whose attention blocks a probe without a model times: one GQA with q/k norm, one MLA.
REPRESENTATIVE_BLOCKS = ("qwen3-30b-a3b", "deepseek-v3")

# The layer a probe without a model streams for each MX method its CPU probe times unasked
# (`kttune.spec.methods.UNASKED_MX`), since 2026-12-07: kt-kernel's MXFP4 writer is not RAWINT4's (at
# gpt-oss's 14 MB experts about 1.2x its time per byte on the H100 box), and a profile with RAWINT4's
# loop alone read gpt-oss's MXFP4 layerwise load 20-24% fast by bytes, where the same instance's
# gpt-oss-20b loop read gpt-oss-120b's 128-expert layer 2% off (docs/probe.md#the-pipeline). As for
# RAWINT4 (Kimi-K2's layer), a bundled model's own layer: gpt-oss-20b's 32 experts (448 MB streamed).
UNASKED_MX_MODELS = {"MXFP4": "gpt-oss-20b"}


@lru_cache(maxsize=1)
def _representative_blocks() -> tuple:
    """REPRESENTATIVE_BLOCKS' specs, read once: a probe plans its GPU steps more than once."""
    return tuple(load_model(n) for n in REPRESENTATIVE_BLOCKS)


@lru_cache(maxsize=None)
def unasked_mx_layer(method: str) -> MoeLayerShape:
    """The layer a probe without a model streams for the unasked MX `method` (UNASKED_MX_MODELS)."""
    return MoeLayerShape.of_model(load_model(UNASKED_MX_MODELS[method]), method)


LAYERWISE_GPU_METHODS = ("BF16", "FP8", "FP8_PERCHANNEL", "RAWINT4", "MXFP4")


def shapes_for(model, methods: tuple[str, ...] = ()) -> ShapeSet:
    """Shapes of `model` (a `kttune.spec.model_spec.ModelSpec`), or the representative set if None.
    `methods` (the probe's --methods): the model's expert shape once per method among them that has a
    layerwise GPU path, so the pipeline is measured in the bytes and stages the runner and the server
    stream for that method (glm-4.7 in FP8_PERCHANNEL streams half its BF16 layer, through another
    kt-kernel writer); none of them: the model's default method, as without `methods`."""
    if model is None:
        asked = {m.upper() for m in methods}
        mx = tuple(unasked_mx_layer(m) for m in UNASKED_MX if not asked or m in asked)
        return ShapeSet(
            moe=(QWEN3_30B_A3B, DEEPSEEK_V3, KIMI_K2),
            attention=(QWEN3_ATTN, DEEPSEEK_ATTN),
            gemm=((2048, 2048), (2048, 6144), (7168, 7168), (7168, 18432)),
            notes=(
                "no model given: representative shapes Qwen3-30B-A3B (bf16), DeepSeek-V3 (FP8), Kimi-K2 (RAWINT4); "
                "the layerwise pipeline also streams a narrow BF16 and FP8 layer (docs/probe.md#the-pipeline)"
                + ("".join(f" and {s.name}'s {s.method} layer" for s in mx)),
            ),
            blocks=_representative_blocks(),
            pipeline_only=NARROW_LAYERS + mx,
        )
    notes = []
    asked = [m.upper() for m in methods]
    layerwise = list(dict.fromkeys(m for m in asked if m in LAYERWISE_GPU_METHODS))
    if asked and not layerwise:
        notes.append(
            f"{model.name}: none of {', '.join(asked)} has a layerwise GPU path; the GPU probes use the "
            "model's default method"
        )
    if not layerwise:
        method = model.default_method.upper()
        if method not in LAYERWISE_GPU_METHODS:
            notes.append(f"{model.name}: method {method} has no layerwise GPU path; GPU experts measured as BF16")
            method = "BF16"
        layerwise = [method]
    moe = tuple(MoeLayerShape.of_model(model, m) for m in layerwise)
    # The curve's shape: MLA's KV heads are its query heads; GQA carries no latent or rope split.
    common = dict(
        hidden=model.hidden_size,
        heads=model.num_attention_heads,
        head_dim=model.head_dim,
        v_head_dim=model.v_head_dim,
        name=model.name,
    )
    if model.compressed_attention is not None:
        # DeepSeek-V4's sparse kernels are SGLang's (FlashMLA, its indexer): the probe times dense
        # attention at the representative shapes, whose flop rate the cost model charges them at
        notes.append(
            f"{model.name}: its compressed sparse attention runs SGLang's kernels, which kttune does not "
            "run; attention measured at the representative shapes (docs/deepseek-v4.md#prefill)"
        )
        attn = DEEPSEEK_ATTN
    elif model.attention == "mla":
        attn = AttentionShape(
            "mla",
            kv_heads=model.num_attention_heads,
            kv_lora_rank=model.kv_lora_rank,
            rope_dim=model.qk_rope_head_dim,
            **common,
        )
    else:
        attn = AttentionShape("gqa", kv_heads=model.num_kv_heads, **common)
    h = model.hidden_size
    gemm = ((h, h), (h, max(model.dense_intermediate_size, model.shared_expert_intermediate_size, h) * 2))
    blocks = (model,) if model.compressed_attention is None else _representative_blocks()
    return ShapeSet(moe=moe, attention=(attn,), gemm=gemm, notes=tuple(notes), blocks=blocks)


# ---- PCIe ----------------------------------------------------------------------------------------


def pcie_theoretical_gbps(gen: int | None, width: int | None) -> float | None:
    """One direction's theoretical rate in GB/s (`kttune.hw.gpu_table.pcie_gbps`: Gen5 x16 = 63.0
    GB/s), None when the link is unknown. Before TLP/DLLP protocol overhead (a 256 B max payload
    with ~24 B of header and framing leaves about 91% of it, ~57 GB/s, for data); the probes report
    their ratio against this raw figure."""
    if not gen or not width or gen not in PCIE_GTS:
        return None
    return pcie_gbps(gen, width)


# ---- NUMA ----------------------------------------------------------------------------------------


def gpu_numa_node(index: int, pci_bus_id: str | None = None) -> int | None:
    """NUMA node of GPU `index` from sysfs (via NVML's PCI bus id); None when unknown (-1 in sysfs)."""
    bus = pci_bus_id
    if bus is None:
        try:
            import pynvml

            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            bus = pynvml.nvmlDeviceGetPciInfo(h).busId
            bus = bus.decode() if isinstance(bus, bytes) else bus
        except Exception:
            return None
    bus = bus.lower()
    # NVML gives "00000000:17:00.0"; sysfs uses a 4-digit domain.
    parts = bus.split(":")
    if len(parts) == 3 and len(parts[0]) > 4:
        bus = parts[0][-4:] + ":" + parts[1] + ":" + parts[2]
    p = Path("/sys/bus/pci/devices") / bus / "numa_node"
    try:
        n = int(p.read_text().strip())
    except (OSError, ValueError):
        n = -1
    if n >= 0:
        return n
    # sysfs says -1 (no affinity reported, common in VMs): on a one-node host that node is 0
    nodes = (
        [d for d in Path("/sys/devices/system/node").glob("node[0-9]*")]
        if Path("/sys/devices/system/node").exists()
        else []
    )
    return 0 if len(nodes) == 1 else None


def node_cpus(node: int) -> set[int]:
    p = Path(f"/sys/devices/system/node/node{node}/cpulist")
    try:
        text = p.read_text().strip()
    except OSError:
        return set()
    cpus: set[int] = set()
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            cpus.update(range(int(a), int(b) + 1))
        elif part:
            cpus.add(int(part))
    return cpus


@contextmanager
def bound_to_node(node: int | None) -> Iterator[int | None]:
    """Run the block with this process bound to `node`'s CPUs, so pinned buffers allocated (and first
    touched) inside land on that node's memory. Restores the previous affinity. Yields the node
    actually bound (None when unknown or binding failed)."""
    if node is None or not hasattr(os, "sched_setaffinity"):
        yield None
        return
    cpus = node_cpus(node) & os.sched_getaffinity(0)
    if not cpus:
        yield None
        return
    old = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
        yield node
    finally:
        os.sched_setaffinity(0, old)


# ---- timing --------------------------------------------------------------------------------------


def cuda_time_point(
    fn: Callable[[], object],
    *,
    x: float,
    warmup: int = 2,
    repeats: int = 5,
    min_total_ms: float = 200.0,
    max_repeats: int = 50,
    stream=None,
    extra: dict | None = None,
) -> Point:
    """Median/p10/p90 of `fn` timed with CUDA events on `stream` (each repeat its own event pair,
    the host synchronised on the end event). Repeats until `repeats` runs and `min_total_ms` of GPU
    time, at most `max_repeats`."""
    import torch

    stream = stream or torch.cuda.current_stream()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples: list[float] = []
    total = 0.0
    while len(samples) < repeats or (total < min_total_ms and len(samples) < max_repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        with torch.cuda.stream(stream):
            fn()
        end.record(stream)
        end.synchronize()
        ms = start.elapsed_time(end)
        samples.append(ms)
        total += ms
    return point_from_samples(x, samples, extra)


def free_host_bytes() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:
        return 0
