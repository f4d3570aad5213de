"""The curve kinds a hardware profile holds, one row each: what a curve's x is, the params it must
carry (a typed view of them, `Curve.shape`), which part of the machine its time depends on, the
features the cost model fits its points with, and the rule `kttune.hw.derive` moves it to another
machine by. The profile reader accepts only these kinds and only curves that carry their params
(`check_curve`, kttune.hw.profile), the cost model fits by the row's features
(kttune.cost.components), and derive has a rule for each and refuses a kind without a row, so a
kind nothing knows how to move can never pass as "measured" on a machine that was not measured.

Each kind's x axis and the params its curves carry (the ones its typed view needs are checked):

| kind            | x       | params                                                                 |
|-----------------|---------|------------------------------------------------------------------------|
| cpu_moe         | tokens  | method, threads, threadpools, hidden, inter, experts, top_k, cpu_experts |
| cpu_moe_shape   | tokens  | as cpu_moe, plus kernel and rounds: one of a set of expert shapes timed in shared interleaved rounds, from which the expert-shape law's cost per output element is fitted (kttune.hw.shape_law) |
| stage_a_write   | bytes   | method, threads (bytes = expert bytes written into a pinned slot)      |
| h2d, d2h        | bytes   | gpu (index or "all"), pinned (bool), numa (node of the host buffer)    |
| stage_c_repack  | bytes   | method (bytes of expert weights post-processed on the GPU)             |
| gpu_moe         | tokens  | method, hidden, inter, experts, top_k                                  |
| gpu_gemm        | tokens  | hidden, out (a bf16 [tokens, hidden] x [hidden, out] matmul)           |
| attention       | context | attention (mla/gqa), heads, kv_heads, head_dim, v_head_dim, kv_lora_rank, qk_rope_head_dim (one layer, a prefill of `context` tokens from empty) |
| attention_block | tokens  | the attention keys, model, hidden, block_params (its weights), experts, top_k, qk_norm (one layer's norms, projections, attention and router, wall time as the runner times it) |
| pipeline        | bytes   | method, experts, threads (one full MoE layer streamed A -> B -> C; extra: per-stage ms, overlap) |
| host_ram        | tokens  | method, hidden, inter, experts, top_k, layers, threadpools, kernel (x = max_len; t_ms = time to build the layers; extra: reserved, resident, predicted bytes) |
| allreduce       | bytes   | ranks, backend (nccl/gloo), dtype (one all_reduce of a tensor of x bytes per rank) |

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
- `kt_build`: what a kt-kernel build's class costs per unit of work at one shape against another (the
  `cpu_moe_shape` sets, a ratio the core count and clock cancel in): kept while the target runs the
  same ISA class, dropped when it runs another (its build is another).
- `allreduce`: re-derived for the target GPU count and link (ring model fitted on a measured curve,
  else NCCL's own latency and bandwidth model).
Adding a curve kind is adding a row here (docs/howto-add-a-probe.md). Pure (no torch).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, Callable, ClassVar

from kttune.hw.features import (
    ATTENTION_FEATURES,
    COPY_FEATURES,
    CPU_MOE_FEATURES,
    GEMM_FEATURES,
    MOE_FEATURES,
    attention_block_flops,
    attention_prefill_flops,
    copy_features,
    gemm_features,
    kt_gemm_split,
    matrix_work_per_flop,
    moe_features,
)
from kttune.spec.kt_classes import kt_matmul_above, matrix_output_flops
from kttune.spec.methods import METHODS, bytes_per_expert, host_bytes_per_expert
from kttune.spec.moe_shape import MoeLayerShape

# ---- typed views of a curve's params (the shape keys each kind must carry) ---------------------------


@dataclass(frozen=True)
class MoeCurveShape(MoeLayerShape):
    """The MoE layer (kttune.spec.moe_shape) a `cpu_moe`, `gpu_moe` or `host_ram` curve ran, whose
    method it must name: `cpu_experts` of the `experts` ran (all when absent)."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("method",)  # required although the layer shape defaults it
    cpu_experts: int | None = None

    @property
    def routed_experts(self) -> int:
        return self.experts if self.cpu_experts is None else self.cpu_experts


@dataclass(frozen=True)
class MethodCurveShape:
    """The KT method a stage A, stage C or pipeline curve moved experts of."""

    method: str


@dataclass(frozen=True)
class GemmCurveShape:
    """A bf16 [tokens, hidden] x [hidden, out] matmul."""

    hidden: int
    out: int


@dataclass(frozen=True)
class AttentionCurveShape:
    """One layer's prefill attention (the keys the attention probe writes, kttune.kernels.attention_shape)."""

    attention: str  # mla | gqa
    heads: int
    head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class AttentionBlockCurveShape(AttentionCurveShape):
    """One decoder layer's attention block (norms, projections, attention, router) of a model: the
    keys the attention-block probe writes (probes/gpu_attention.py), with its weights' count."""

    hidden: int = 0
    block_params: int = 0
    REQUIRED: ClassVar[tuple[str, ...]] = ("hidden", "block_params")


def _view(cls: type, kind: str, params: dict[str, Any]) -> Any:
    """`params` as `cls`: every field without a default present, each str field a string and each
    int field a whole number >= 1 (a count of experts on the CPU may be 0); ValueError naming the key."""
    kw = {}
    for f in fields(cls):
        v = params.get(f.name)
        if v is None:
            if _required(cls, f):
                raise ValueError(f"{kind} curve params {_brief(params)} lack {f.name!r}")
            continue
        if f.type == "str":
            if not isinstance(v, str):
                raise ValueError(f"{kind} curve param {f.name} = {v!r} is not a string")
        else:
            lo = 0 if f.name == "cpu_experts" else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{kind} curve param {f.name} = {v!r} is not a whole number >= {lo}")
        kw[f.name] = v
    return cls(**kw)


def _required(cls: type, f: Any) -> bool:
    return (f.default is MISSING and f.default_factory is MISSING) or f.name in getattr(cls, "REQUIRED", ())


def _brief(params: dict[str, Any]) -> str:
    return (
        "{"
        + ", ".join(f"{k}: {v!r}" for k, v in list(params.items())[:4])
        + ("" if len(params) <= 4 else ", ...")
        + "}"
    )


# ---- the cost model's fits -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CostFit:
    """How the cost model fits a kind's points (kttune.cost.components.fit_curves): t_ms = sum of
    non-negative coefficients times `row(curve, x)`, one feature per name (kttune.hw.features)."""

    names: tuple[str, ...]
    row: Callable[[Any, float], tuple[float, ...]]


def _cpu_format(s: MoeCurveShape) -> str:
    """The weight format of a MoE curve's method (BF16 where the method is not one kttune knows)."""
    return METHODS[s.method].cpu_format if s.method in METHODS else "bf16"


def host_expert_bytes(s: MoeCurveShape) -> int:
    """One expert of a `cpu_moe` curve's layer as kt-kernel holds it in host RAM and its calls read it
    (`kttune.spec.methods.host_bytes_per_expert`: MXFP4's scales widened to bf16), the bytes
    `kttune.cost.components.Components.cpu_bytes_per_expert` counts for a model's expert."""
    return host_bytes_per_expert(_cpu_format(s), s.hidden, s.inter)


def _moe_row(c: Any, x: float, expert_bytes: int | None = None) -> tuple:
    """A MoE point's features; an expert's bytes in its method's format unless given."""
    s: MoeCurveShape = c.shape
    if expert_bytes is None:
        expert_bytes = bytes_per_expert(_cpu_format(s), s.hidden, s.inter)
    return moe_features(x, s.hidden, s.inter, s.experts, s.top_k, s.routed_experts, expert_bytes)


def cpu_matmul_above(c: Any) -> int | None:
    """Where the kt-kernel class that measured a `cpu_moe` curve switches to its matrix-matrix GEMM
    (`kttune.spec.kt_classes.kt_matmul_above`; the curve's `kernel` param names the class)."""
    s: MoeCurveShape = c.shape
    return kt_matmul_above(c.params.get("kernel"), s.experts, s.top_k)


def cpu_moe_row(c: Any, x: float, output_flops: float | None = None) -> tuple:
    """A `cpu_moe` point's features (`CPU_MOE_FEATURES`), its matrix kernel's flops weighted by the work
    per flop at the curve's expert shape (`kttune.hw.features.matrix_work_per_flop`) for the cost per
    output element `output_flops`; by default the constant of the class and build that measured the
    curve (`kttune.spec.kt_classes.matrix_output_flops`; a profile that measured its own is read
    through `kttune.hw.shape_law.output_flops_for`)."""
    s: MoeCurveShape = c.shape
    r = matrix_output_flops(c.backend, c.params.get("kernel")) if output_flops is None else output_flops
    return kt_gemm_split(
        _moe_row(c, x, host_expert_bytes(s)), x, cpu_matmul_above(c), matrix_work_per_flop(s.hidden, s.inter, r)
    )


MOE_FIT = CostFit(MOE_FEATURES, _moe_row)
CPU_MOE_FIT = CostFit(CPU_MOE_FEATURES, cpu_moe_row)
COPY_FIT = CostFit(COPY_FEATURES, lambda c, x: copy_features(x))
GEMM_FIT = CostFit(GEMM_FEATURES, lambda c, x: gemm_features(x, c.shape.hidden, c.shape.out))
ATTENTION_FIT = CostFit(
    ATTENTION_FEATURES,
    lambda c, x: (1.0, attention_prefill_flops(x, 0, c.shape.heads, c.shape.head_dim, c.shape.v_head_dim)),
)

ATTENTION_BLOCK_FIT = CostFit(
    ATTENTION_FEATURES,
    lambda c, x: (
        1.0,
        attention_block_flops(x, c.shape.heads, c.shape.head_dim, c.shape.v_head_dim, c.shape.block_params),
    ),
)


# ---- the table ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CurveKind:
    name: str
    x_unit: str
    depends_on: str  # "cpu" | "gpu" | "pcie" | "cpu+gpu" | "gpus"
    derive: str  # one of DERIVE_RULES
    shape: type | None = None  # the typed view of the params (`Curve.shape`); None: no params required
    fit: CostFit | None = None  # None: the cost model does not fit the kind's times (host_ram: its bytes)

    @property
    def required_params(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self.shape) if _required(self.shape, f)) if self.shape else ()

    @property
    def measures_gpu(self) -> bool:
        """Whether a GPU (or its link) is timed: the kinds a CPU-only probe leaves to a shipped profile."""
        return self.depends_on in ("gpu", "pcie", "cpu+gpu")


DERIVE_RULES = ("cpu_threads", "gpu_roofline", "pcie_link", "pipeline_overlap", "host_cpu", "kt_build", "allreduce")

KINDS: dict[str, CurveKind] = {
    k.name: k
    for k in (
        CurveKind("cpu_moe", "tokens", "cpu", "cpu_threads", MoeCurveShape, CPU_MOE_FIT),
        CurveKind("cpu_moe_shape", "tokens", "cpu", "kt_build", MoeCurveShape, None),
        CurveKind("stage_a_write", "bytes", "cpu", "cpu_threads", MethodCurveShape, COPY_FIT),
        CurveKind("h2d", "bytes", "pcie", "pcie_link", None, COPY_FIT),
        CurveKind("d2h", "bytes", "pcie", "pcie_link", None, COPY_FIT),
        CurveKind("stage_c_repack", "bytes", "gpu", "gpu_roofline", MethodCurveShape, COPY_FIT),
        CurveKind("gpu_moe", "tokens", "gpu", "gpu_roofline", MoeCurveShape, MOE_FIT),
        CurveKind("gpu_gemm", "tokens", "gpu", "gpu_roofline", GemmCurveShape, GEMM_FIT),
        CurveKind("attention", "context", "gpu", "gpu_roofline", AttentionCurveShape, ATTENTION_FIT),
        CurveKind("attention_block", "tokens", "gpu", "gpu_roofline", AttentionBlockCurveShape, ATTENTION_BLOCK_FIT),
        CurveKind("pipeline", "bytes", "cpu+gpu", "pipeline_overlap", MethodCurveShape, COPY_FIT),
        CurveKind("host_ram", "tokens", "cpu", "host_cpu", MoeCurveShape, None),
        CurveKind("allreduce", "bytes", "gpus", "allreduce", None, COPY_FIT),
    )
}

CURVE_KINDS = tuple(KINDS)


def curve_kind(kind: str) -> CurveKind:
    """The row of `kind`; ValueError for a kind the table does not hold."""
    row = KINDS.get(kind)
    if row is None:
        raise ValueError(f"unknown curve kind {kind!r} (kttune knows {', '.join(CURVE_KINDS)})")
    return row


def curve_shape(kind: str, params: dict[str, Any]) -> Any:
    """The typed view of a `kind` curve's params (None for kinds without one); ValueError when a
    param it must carry is missing or of the wrong type."""
    row = curve_kind(kind)
    return _view(row.shape, kind, params) if row.shape else None


def check_curve(kind: str, x_unit: str, params: dict[str, Any]) -> None:
    """What the profile reader holds every curve to: a kind of the table, its x unit, its params."""
    row = curve_kind(kind)
    if x_unit != row.x_unit:
        raise ValueError(f"{kind} curve has x_unit {x_unit!r}; its x is in {row.x_unit}")
    curve_shape(kind, params)
