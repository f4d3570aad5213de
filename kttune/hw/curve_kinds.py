"""The curve kinds a hardware profile holds, one row each: what a curve's x is, which part of the
machine its time depends on, and the rule `kttune.hw.derive` moves it to another machine by. The
profile reader accepts only these kinds (kttune.hw.profile), and derive has a rule for each, so a
kind nothing knows how to move can never pass as "measured" on a machine that was not measured.

Derive rules (docs/derive.md states each with its check):

- `cpu_threads`: kt-kernel calls. A fixed cost per call (the fastest call measured) stays; of the
  rest, a serial share fitted on the measured thread sweep stays and the other part scales with
  threads, the ISA class and NUMA sub-pools, never faster than the target's DRAM bandwidth allows
  for the bytes the call moves. Moves when the CPU changes.
- `gpu_roofline`: GPU kernels. The fitted fixed part (launches, host-side work of the call) stays;
  the rest scales by the ratio of the two GPUs' roofline times for the point's flops and bytes.
  Moves when the GPU changes.
- `pcie_link`: host <-> GPU copies. The fitted fixed part stays; the rest scales by the PCIe rate
  ratio; copies to every GPU at once keep the measured host limit.
- `pipeline_overlap`: the measured A -> B -> C pipeline of a whole layer. Kept as measured when
  nothing changes; otherwise its times no longer hold and only its overlap ratio (layer time over
  the slowest stage alone, a property of the pipeline's code) is carried, `use: overlap`.
- `host_cpu`: what kt-kernel holds in host RAM on this CPU and kt-kernel build: kept when the CPU
  is unchanged, dropped when it changes.
- `allreduce`: re-derived for the target GPU count and link (ring model fitted on a measured curve,
  else NCCL's own latency and bandwidth model).
Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CurveKind:
    name: str
    x_unit: str
    depends_on: str  # "cpu" | "gpu" | "pcie" | "cpu+gpu" | "gpus"
    derive: str  # one of DERIVE_RULES


DERIVE_RULES = ("cpu_threads", "gpu_roofline", "pcie_link", "pipeline_overlap", "host_cpu", "allreduce")

KINDS: dict[str, CurveKind] = {k.name: k for k in (
    CurveKind("cpu_moe", "tokens", "cpu", "cpu_threads"),
    CurveKind("stage_a_write", "bytes", "cpu", "cpu_threads"),
    CurveKind("h2d", "bytes", "pcie", "pcie_link"),
    CurveKind("d2h", "bytes", "pcie", "pcie_link"),
    CurveKind("stage_c_repack", "bytes", "gpu", "gpu_roofline"),
    CurveKind("gpu_moe", "tokens", "gpu", "gpu_roofline"),
    CurveKind("gpu_gemm", "tokens", "gpu", "gpu_roofline"),
    CurveKind("attention", "context", "gpu", "gpu_roofline"),
    CurveKind("pipeline", "bytes", "cpu+gpu", "pipeline_overlap"),
    CurveKind("host_ram", "tokens", "cpu", "host_cpu"),
    CurveKind("allreduce", "bytes", "gpus", "allreduce"),
)}

CURVE_KINDS = tuple(KINDS)
