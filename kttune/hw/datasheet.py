"""Hardware profiles derived from datasheets, clearly labelled as such (provenance kind
"datasheet"). They exist so `kttune search` runs on a machine that has not been probed; a measured
profile (`kttune probe`) replaces them. Every curve here is a roofline evaluated at the sizes a probe
would measure, from the figures and efficiency factors written below.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

from kttune.cost.features import attention_prefill_flops, gemm_features, moe_features
from kttune.hw.fingerprint import fingerprint
from kttune.hw.profile import (
    CpuInfo, Curve, GpuInfo, HardwareProfile, Inventory, NumaNode, Point, Provenance, SoftwareInfo,
)
from kttune.spec.methods import METHODS, bytes_per_expert
from kttune.units import GIB


# Shapes the datasheet curves are evaluated at (a probe without --model measures the same set).
REPRESENTATIVE_SHAPES = (
    {"hidden": 2048, "inter": 768, "experts": 128, "top_k": 8},  # Qwen3-30B-A3B
    {"hidden": 7168, "inter": 2048, "experts": 256, "top_k": 8},  # DeepSeek-V3
)
TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384)
COPY_BYTES = tuple(int(2**e) for e in range(20, 34, 2))  # 1 MiB .. 8 GiB


@dataclass(frozen=True)
class CpuSheet:
    model: str
    cores: int
    numa_nodes: int
    ram_bytes: int
    dram_gbps: float  # sustained read bandwidth the MoE kernels see
    tflops: dict[str, float]  # effective kt-kernel rate per method at `cores - 1` threads
    isa: tuple[str, ...]
    forward_overhead_ms: float = 0.05
    write_gbps: float = 25.0  # stage A: write_weight_scale_to_buffer into a pinned slot
    # Measured fact (docs/sglang-kt.md#the-cpuinfer-thread-cliff): a pool that fills every core starves the driving thread: a 1-token
    # forward took 8 ms with 16 threads on 16 cores, 0.3 ms with 15.
    full_core_stall_ms: float = 8.0


@dataclass(frozen=True)
class GpuSheet:
    name: str
    vram_bytes: int
    hbm_gbps: float
    bf16_tflops: float  # dense, datasheet
    fp8_tflops: float
    pcie_gen: int
    pcie_width: int
    efficiency: float = 0.6  # share of datasheet TFLOP/s large GEMMs reach
    pcie_efficiency: float = 0.85  # pinned H2D share of the link's rate
    launch_ms: float = 0.02


def pcie_gbps(gen: int, width: int) -> float:
    """Theoretical one-direction rate: GT/s per lane x lanes x encoding (8b/10b up to Gen2,
    128b/130b from Gen3) / 8 bits."""
    gts = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}[gen]
    enc = 0.8 if gen <= 2 else 128 / 130
    return gts * width * enc / 8


def _moe_points(sheet_rate_flops_ms: float, bw_bytes_ms: float, overhead: float, shape: dict, method: str, tokens=TOKENS):
    bpe = bytes_per_expert(METHODS[method].cpu_format, shape["hidden"], shape["inter"])
    pts = []
    for m in tokens:
        f = moe_features(m, shape["hidden"], shape["inter"], shape["experts"], shape["top_k"], shape["experts"], bpe)
        t = overhead + f[1] / bw_bytes_ms + f[2] / sheet_rate_flops_ms
        pts.append(Point(x=m, t_ms=t, n=0))
    return tuple(pts)


def datasheet_profile(cpu: CpuSheet, gpu: GpuSheet, n_gpus: int = 1, machine: str = "", sources: tuple[str, ...] = ()) -> HardwareProfile:
    curves: list[Curve] = []
    threads_opts = sorted({max(1, cpu.cores // 2), cpu.cores - 1, cpu.cores})
    bw = cpu.dram_gbps * 1e6  # bytes per ms
    for method, tflops in cpu.tflops.items():
        for th in threads_opts:
            share = min(th, cpu.cores - 1) / (cpu.cores - 1)
            stall = cpu.full_core_stall_ms if th >= cpu.cores else 0.0
            for shape in REPRESENTATIVE_SHAPES:
                pts = _moe_points(tflops * 1e9 * share * (1.0 if th < cpu.cores else 0.55), bw * min(1.0, share * 1.5),
                                  cpu.forward_overhead_ms + stall, shape, method)
                curves.append(Curve("cpu_moe", "tokens", pts, {
                    "method": method, "threads": th, "threadpools": cpu.numa_nodes, **shape,
                    "cpu_experts": shape["experts"]}, backend="datasheet"))
        if METHODS[method].layerwise:
            pts = tuple(Point(x=b, t_ms=0.01 + b / (cpu.write_gbps * 1e6), n=0) for b in COPY_BYTES[:5])
            curves.append(Curve("stage_a_write", "bytes", pts, {"method": method, "threads": cpu.cores - 1}, backend="datasheet"))
    link = pcie_gbps(gpu.pcie_gen, gpu.pcie_width)
    for kind in ("h2d", "d2h"):
        for pinned, eff in ((True, gpu.pcie_efficiency), (False, 0.35)):
            pts = tuple(Point(x=b, t_ms=0.01 + b / (link * eff * 1e6), n=0) for b in COPY_BYTES)
            curves.append(Curve(kind, "bytes", pts, {"gpu": 0, "pinned": pinned, "numa": 0, "link_gbps": link}, backend="datasheet"))
    hbm = gpu.hbm_gbps * 1e6
    rates = {"BF16": gpu.bf16_tflops, "FP8": gpu.fp8_tflops, "FP8_PERCHANNEL": gpu.fp8_tflops,
             "RAWINT4": gpu.bf16_tflops, "MXFP8": gpu.fp8_tflops, "MXFP4": gpu.bf16_tflops}
    for method, tf in rates.items():
        for shape in REPRESENTATIVE_SHAPES:
            pts = _moe_points(tf * 1e9 * gpu.efficiency * 0.7, hbm * 0.7, gpu.launch_ms * 3, shape, method)
            curves.append(Curve("gpu_moe", "tokens", pts, {"method": method, **shape}, backend="datasheet"))
    # stage C: int4 Marlin repack reads and writes each byte once, at about a quarter of HBM rate.
    pts = tuple(Point(x=b, t_ms=gpu.launch_ms + 2 * b / (hbm * 0.25), n=0) for b in COPY_BYTES[:5])
    curves.append(Curve("stage_c_repack", "bytes", pts, {"method": "RAWINT4"}, backend="datasheet"))
    for hidden, out in ((2048, 4096), (7168, 18432)):
        pts = []
        for m in TOKENS:
            f = gemm_features(m, hidden, out)
            pts.append(Point(x=m, t_ms=gpu.launch_ms + max(f[1] / hbm, f[2] / (gpu.bf16_tflops * 1e9 * gpu.efficiency)), n=0))
        curves.append(Curve("gpu_gemm", "tokens", tuple(pts), {"hidden": hidden, "out": out}, backend="datasheet"))
    for attn, heads, kvh, hd, vd in (("gqa", 32, 4, 128, 128), ("mla", 128, 128, 192, 128)):
        pts = tuple(
            Point(x=ctx, t_ms=gpu.launch_ms * 2 + attention_prefill_flops(ctx, 0, heads, hd, vd) / (gpu.bf16_tflops * 1e9 * 0.4), n=0)
            for ctx in (256, 1024, 4096, 16384, 65536))
        curves.append(Curve("attention", "context", pts, {"attention": attn, "heads": heads, "kv_heads": kvh, "head_dim": hd,
                                                          "v_head_dim": vd}, backend="datasheet"))
    per_node = cpu.cores // cpu.numa_nodes
    inv = Inventory(
        cpu=CpuInfo(model=cpu.model, physical_cores=cpu.cores, logical_cpus=cpu.cores, sockets=cpu.numa_nodes,
                    numa_nodes=tuple(NumaNode(i, tuple(range(i * per_node, (i + 1) * per_node)), cpu.ram_bytes // cpu.numa_nodes)
                                     for i in range(cpu.numa_nodes)),
                    isa=cpu.isa, ram_total_bytes=cpu.ram_bytes, ram_available_bytes=int(cpu.ram_bytes * 0.9),
                    mem_bandwidth_gbps=cpu.dram_gbps),
        gpus=tuple(GpuInfo(index=i, name=gpu.name, vram_total_bytes=gpu.vram_bytes, vram_free_bytes=gpu.vram_bytes,
                           pcie_gen=gpu.pcie_gen, pcie_width=gpu.pcie_width, pcie_gen_max=gpu.pcie_gen,
                           pcie_width_max=gpu.pcie_width, numa_node=0) for i in range(n_gpus)),
        software=SoftwareInfo(kt_kernel="0.7.2", sglang="0.7.2 (sglang-kt)", sglang_is_kt_fork=True,
                              sglang_has_layerwise_threshold=True),
    )
    prov = Provenance(
        kind="datasheet",
        machine=machine or f"{gpu.name} x{n_gpus} (PCIe Gen{gpu.pcie_gen} x{gpu.pcie_width}) + {cpu.model}",
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        tool_version="kttune datasheet",
        notes=("DERIVED FROM DATASHEETS, NOT MEASURED: rooflines with the efficiency factors in "
               "kttune/hw/datasheet.py; run `kttune probe` on the real machine for a measured profile",),
        sources=sources,
    )
    return HardwareProfile(provenance=prov, inventory=inv, curves=tuple(curves), fingerprint=fingerprint(inv))


H200_BOX = (
    CpuSheet(model="Intel Xeon (Sapphire Rapids class, AMX), 16 cores", cores=16, numa_nodes=1, ram_bytes=128 * GIB,
             dram_gbps=120.0, tflops={"AMXINT4": 12.0, "AMXINT8": 12.0, "BF16": 6.0, "FP8": 5.0, "RAWINT4": 8.0},
             isa=("amx_bf16", "amx_int8", "amx_tile", "avx512f", "avx512_bf16", "avx512_vnni", "avx2", "fma")),
    GpuSheet(name="NVIDIA H200", vram_bytes=141 * 10**9, hbm_gbps=4800, bf16_tflops=989, fp8_tflops=1979, pcie_gen=5, pcie_width=16),
)
RTX4090_BOX = (
    CpuSheet(model="Intel Xeon (AMX), 2 sockets x 32 cores", cores=64, numa_nodes=2, ram_bytes=1024 * GIB,
             dram_gbps=400.0, tflops={"AMXINT4": 40.0, "AMXINT8": 40.0, "BF16": 20.0, "FP8": 16.0, "RAWINT4": 26.0},
             isa=("amx_bf16", "amx_int8", "amx_tile", "avx512f", "avx512_bf16", "avx512_vnni", "avx2", "fma")),
    GpuSheet(name="NVIDIA GeForce RTX 4090", vram_bytes=24 * GIB, hbm_gbps=1008, bf16_tflops=165, fp8_tflops=330, pcie_gen=4, pcie_width=16),
)
