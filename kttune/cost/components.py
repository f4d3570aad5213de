"""The timed components of both prefill paths and of decode, fitted from a hardware profile and
evaluated at a model's shapes. Pure (numpy for the fits, no torch).

`Components` is built once per (profile, model, method, tp) and then evaluated many times by the
search, so every fit is done in the constructor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from kttune.calibration.entries import Calibration
from kttune.cost.features import (
    attention_prefill_flops,
    causal_conv1d_prefill_bytes,
    copy_features,
    gated_delta_rule_prefill_work,
    gemm_features,
    kt_gemm_split,
    matrix_work_per_flop,
    moe_features,
    mla_latent_attention_flops,
    sparse_attention_prefill_work,
)
from kttune.cost.fit import LinearFit, fit_nonneg, interp_loglog
from kttune.errors import UserError
from kttune.hw.dram_stream import cycled_bytes, expert_bytes
from kttune.hw.derive import nccl_allreduce_ms  # the all-reduce model a derived profile's curve holds
from kttune.hw.curve_kinds import (
    cpu_matmul_above,
    cpu_moe_row,
    curve_kind,
)  # each kind's features: the fit is the table's
from kttune.hw.gpu_table import spec_for_name  # datasheet HBM bandwidth when no curve fits it
from kttune.hw.point_quality import THREAD_LAW_SLACK, slower_than_larger_pools
from kttune.hw.profile import Curve, HardwareProfile
from kttune.hw.shape_law import MEASURED_BY_PROBE, constants_measured_elsewhere, output_flops_for
from kttune.hw.thread_interp import curve_group, thread_groups
from kttune.memory.vram import (  # what a decode step reads of the pool; the MLA form a backend runs
    LAUNCH_ATTENTION_BACKEND,
    MLA_CHUNKED_PREFIX_THRESHOLD,
    SGLANG_DEFAULT_BACKEND,
    decode_kv_read_bytes,
    decode_kv_reads,
    linear_conv_channels,
    mla_attention_form,
    sglang_default_mla_backend,
)
from kttune.spec.kt_classes import kt_matmul_above
from kttune.spec.methods import (
    FORMATS,
    METHODS,
    REPACKED_METHODS,
    UNASKED_MX,
    bytes_per_expert,
    host_bytes_per_expert,
    get_method,
    gpu_format,
)
from kttune.spec.model_spec import ModelSpec
from kttune.units import GIB, MIB

# Overlap of the per-expert A -> B -> C pipeline (layer time / slowest stage alone) when the profile
# has no pipeline measurement: a plain torch pipeline measured 1.30x on an 11 GB layer and 1.64x on
# a 1.2 GB layer on the H200 box (docs/cost-model.md#composition-kttunecostprefillpy-kttunecostdecodepy); 1.3 is the optimistic end.
DEFAULT_OVERLAP_RATIO = 1.3
# Hybrid path fixed cost per MoE layer: cpu_stream fork, host callback, event waits (docs/sglang-kt.md#the-two-prefill-paths).
HYBRID_SYNC_MS = 0.05
# Per prefill forward: scheduler, sampling, launch overhead outside the layers.
FORWARD_OVERHEAD_MS = 2.0


# The one SGLang attention backend that runs DeepSeek Sparse Attention's indexer: the others take no
# indexer metadata (`get_indexer_metadata` returns None), so the model skips the indexer and attends
# densely to every token (docs/cost-model.md#sparse-attention).
SPARSE_BACKEND = "nsa"
# GlmMoeDsaForCausalLM (GLM-5): SGLang sets SGLANG_NSA_FORCE_MLA for it on Blackwell (server_args.py)
GLM_DSA_FAMILY = "glm_moe_dsa"


# What `benchmarks/bench_mx_methods.py` measured of kt-kernel's MX classes against the same-bits methods
# a profile without them is read from (the development VM at 1 thread, H100 instance ar at 11;
# docs/probe.md#mx-methods): said where the cost model stands in for them, never applied.
MX_SLOWER_THAN_SAME_BITS = {
    "MXFP4": "1.9-3.7x RAWINT4's time on the development VM and 2.5-3.4x on the H100 box at 4-256 tokens",
    "MXFP8": "1.8-14x AMXINT8's and 1.2-2.1x FP8_PERCHANNEL's time on the development VM",
}


def sparse_prefill_is_dense(sm: int | None, kv_len: float, index_topk: int, family: str = "") -> bool:
    """Whether SGLang's nsa backend runs a sparse-attention model's prefill forward as dense attention
    (`NativeSparseAttnBackend.set_nsa_prefill_impl`, docs/cost-model.md#sparse-attention): on SM 90
    and SM 100-109 (its MHA kernels), when the forward's sequence holds no more than the top-k
    tokens (every query then attends to all of them anyway); never for GLM-5's architecture
    (`glm_moe_dsa`) from SM 100 on, where SGLang forces the sparse form. Elsewhere, and on a GPU of
    unknown compute capability, the sparse kernels."""
    if sm is None or (family == GLM_DSA_FAMILY and sm >= 100):
        return False
    return (sm == 90 or 100 <= sm < 110) and kv_len <= index_topk


def sparse_kernel_heads(heads: int, sm: int | None) -> int:
    """The heads FlashMLA's sparse kernel computes for `heads` heads on a rank: SGLang pads them to a
    multiple of 64 (Hopper) or 128 (SM 100 on) with zero queries (`_forward_flashmla_sparse`,
    docs/cost-model.md#sparse-attention), so DeepSeek-V3.2's 128 heads at TP 4 cost 64."""
    pad = 128 if sm is not None and sm >= 100 else 64
    return -(-heads // pad) * pad


# The layerwise load as sglang-kt 0.7.2 runs it (docs/sglang-kt.md#layerwise-prefill-at-tp--1): a
# Python loop over the layer's experts, one expert a step into two pinned host slots (double
# buffered), waiting on each write and on the copy that last read a slot. The pipeline probe
# measures this configuration among others (`kttune.runner.pipeline.PipelineConfig(2, 1)`, its
# label); a server's prediction takes its time, not the fastest configuration the probe found.
SGLANG_KT_PIPELINE = "slots=2,group=1"
# A method whose layerwise pipeline the profile did not measure takes the pipeline of the method
# that streams the same bytes through the same stages, as a function of the bytes streamed
# (docs/cost-model.md#pipeline-twins): FP8 per-channel and FP8 block both copy e4m3 weights with
# fp32 scales through kt-kernel's writer, a pinned slot and one H2D copy, with no stage C; their
# stage A rates measured on the H200 box agree (50-60 GB/s per expert write at 11-15 threads). MXFP4
# and RAWINT4 both write packed 4-bit codes with bf16 scales per 32 (the same bytes per expert), copy
# them in one H2D copy and repack them in stage C.
PIPELINE_TWIN = {"FP8_PERCHANNEL": "FP8", "MXFP4": "RAWINT4"}
# A method whose GPU MoE the profile did not measure, and the method whose measured curve runs the
# same kernel on the same layout: the GPU MoE probe's FP8 curve is measured with per-channel e4m3
# weights and per-token activation scales (kttune/probes/gpu_moe.py, its `fp8_scales` parameter),
# which is FP8_PERCHANNEL's layout exactly; MXFP4's experts run the int4 w4a16 GEMM with the e2m1
# decode in place of int4's, over the same bytes (kttune/kernels/int4.py; docs/cost-model.md#pipeline-twins).
GPU_MOE_TWIN = {"FP8_PERCHANNEL": "FP8", "MXFP4": "RAWINT4"}
_TWIN_WHY = {
    "FP8_PERCHANNEL": "the same kernel on per-channel e4m3 weights",
    "MXFP4": "the same 4-bit weight-only GEMM over the same bytes, another nibble decode",
}
# `Components(pipeline_driver=SGLANG_KT_DRIVER)`: a run measured in that configuration (the path
# runner's default, `PathRun.pipeline_driver`), predicted as a server is (the same as None).
SGLANG_KT_DRIVER = "sglang-kt"
# `Components(pipeline_driver=FASTEST_PIPELINE)`: the probe's curves as measured, in the fastest
# configuration the probe found at each thread count (what the curves' own points hold).
FASTEST_PIPELINE = "fastest"


def _layer_bytes(c: Curve) -> float:
    """The expert weights a `cpu_moe` curve's calls read: its layer's routed experts, or the bytes its
    points cycled over (`source_bytes`, a cold curve's copies) where more."""
    return max(c.shape.routed_experts * expert_bytes(c), cycled_bytes(c))


# A kt-kernel MoE layer this large is read from DRAM on every host the project knows (the largest
# last-level cache among them 300 MiB, an AMX box's; a 12-CCD Zen 4 socket's is 384 MiB). Where every
# curve of a method timed a smaller layer, the profile never timed the memory-bound part of a model's
# gigabyte layer, which moved 2x between instances of one machine kind where a cache-resident layer
# moved 1.3x (docs/cost-model.md#the-instances-own-quick-probe).
PAST_CACHE_BYTES = 512 * MIB

# The share of the matrix work at a model's expert shape that the cost per output element (r) must
# reach before a profile's CPU of another generation than r's runs is worth a note: the AMX tile
# classes' r is 30-60% of the work at the catalog's shapes, FP8's and RAWINT4's a few percent.
SHAPE_LAW_NOTE_SHARE = 0.1

# kt-kernel's AMX matrix kernel's time per flop settles by SETTLED_ROWS rows an expert (tokens x top-k /
# experts): on Sapphire Rapids 16-64 rows cost 1.1-1.3x per flop what 64-256 do, and 64-256 cost what
# 256-1,024 do on every shape set. A curve of the method should so time the matrix kernel at two
# lengths or more of at least SETTLED_ROWS rows, or of the rows the model's SERIES_NOTE_TOKENS-token
# forward runs where those are fewer; a quick probe timed to 256 tokens (64 rows on its layer, one
# such length) read Sapphire Rapids' BF16 hybrid paths 14% slow against 2% from the same timing kept
# to 1,024 (docs/probe.md#the-quick-layers-series-how-far-up-in-tokens).
SETTLED_ROWS = 64
SERIES_NOTE_TOKENS = 1024


@dataclass
class Components:
    profile: HardwareProfile
    model: ModelSpec
    method_name: str
    tp: int = 1
    notes: list[str] = field(default_factory=list)
    # The layerwise pipeline's driver as the predicted path runs it ("host": a Python loop waits on
    # each write; "stream": the whole layer enqueued on CUDA streams, as the path runner does; its
    # fastest configuration the probe measured; FASTEST_PIPELINE: the fastest of all, as the curves
    # of a profile probed before 2026-12-05 hold it), or None for the server: the configuration
    # sglang-kt 0.7.2 runs (SGLANG_KT_PIPELINE), as the probe measured it at each thread count (the
    # curves of a profile probed since hold it).
    pipeline_driver: str | None = None
    # The --attention-backend a call without its own runs on (a launch's own,
    # `LaunchConfig.attention_backend`, comes first: `mla_backend_for`): "" for what kttune launches
    # (triton for MLA, flashinfer for GQA), SGLANG_DEFAULT_BACKEND for SGLang's pick for the GPU,
    # EXPAND_EVERY_PREFIX for the path runner's form, else SGLang's name (docs/cost-model.md#mla-prefill-forms)
    attention_backend: str = ""

    def __post_init__(self) -> None:
        self.method = get_method(self.method_name)
        m = self.model
        self.i_tp = m.moe_intermediate_size // self.tp
        # one expert as kt-kernel holds it in host RAM: what its MoE reads, stage A writes and the loop
        # streams (MXFP4's scales widened to bf16: HOST_SCALE_BYTES), the bytes the probes' x counts
        self.cpu_bytes_per_expert = host_bytes_per_expert(
            self.method.cpu_format, m.hidden_size, m.moe_intermediate_size
        )
        self.gpu_bytes_per_expert = bytes_per_expert(
            gpu_format(self.method, m.checkpoint_format), m.hidden_size, self.i_tp
        )
        self._cpu_fits: dict[tuple[int, int], tuple[LinearFit, Curve | None]] = {}
        self._output_flops_cache: dict[tuple[str | None, str | None], tuple[float, str]] = {}
        self._cpu_method = self._pick_cpu_method()
        self._cpu_matmul_above, self._cpu_matrix_work = self._find_cpu_kernel()
        self._note_unmeasured_expert_shape()
        self._note_layers_in_cache()
        self._note_shape_law_cpu()
        self._note_short_series()
        self._gpu_moe_fit = self._fit_gpu_moe()
        self._attn_fit = self._fit_attention()
        self._gemm_fit = self._fit_gemm()
        self.layer_overhead_ms = self._layer_overhead()
        self._h2d_fit = self._fit_copy("h2d")
        self._d2h_fit = self._fit_copy("d2h") if self.profile.has("d2h") else self._h2d_fit
        self._h2d_all_ms_per_byte = self._all_links_ms_per_byte() if self.tp > 1 else None
        self._stage_a_fits: dict[int, LinearFit] = {}
        self._stage_c_fit = self._fit_stage_c()
        self.overlap_ratio = self._overlap_ratio()
        self._pipeline_fits: dict[int, LinearFit] = {}  # stage A threads -> layer load fit
        self._pipeline_points: dict[int, list[tuple[float, float]]] = {}  # stage A threads -> (bytes, ms)
        self._pipeline_curves: dict[int, list[Curve]] = {}
        # stage A threads -> the model's own layer's curves, where the profile measured that layer
        self._pipeline_own: dict[int, list[Curve]] = {}
        # stage A threads -> load against (1, experts streamed, bytes), where the curves measured two
        # expert sizes or more (`_fit_pipeline_steps`)
        self._pipeline_step_fits: dict[int, LinearFit] = {}
        # stage A threads -> the line a load past the measured bytes is read from (`_fit_pipeline`)
        self._pipeline_extrapolations: dict[int, LinearFit] = {}
        self._pipeline_driver_ratios: dict[int, float] = {}
        self._pipeline_fit = self._fit_pipeline()
        self.hbm_ms_per_byte = self._hbm_ms_per_byte()
        self.gpu_sm = self._gpu_sm()
        self.fp8_speedup = self._fp8_speedup()
        self.runs_sparse_attention = self.runs_sparse()
        self._per_layer_dense_params = self._dense_params_per_layer()
        self._indexer_query_key = self._indexer_projection_shares()
        self._indexed_share = self._indexed_layer_share()
        self.calibration = Calibration.from_dicts(self.profile.calibration)
        self.notes.extend(self.calibration.summary(self.method.name))
        if m.attention == "mla":
            self.notes.append(
                "MLA attention over a cached prefix in the latent form (triton; fa3 and flashinfer below "
                f"{MLA_CHUNKED_PREFIX_THRESHOLD:,} prefix tokens)"
                + (" and sparse attention with its indexer (nsa)" if m.sparse_attention else "")
                + " is charged its flops at the profile's MHA attention rate: its own rate is not measured "
                "(docs/cost-model.md#mla-prefill-forms)"
            )
        if m.linear_attention is not None and m.linear_attention_layer_ids:
            self.notes.append(
                "linear-attention layers' chunked recurrence (FLA's gated delta rule) is charged its flops at "
                "the profile's attention rate: its own rate is not measured (docs/cost-model.md#linear-attention-layers)"
            )

    # ---- CPU experts ---------------------------------------------------------------------------
    def _note_unmeasured_expert_shape(self) -> None:
        """Say so where no CPU MoE curve of the method measured an expert within SHAPE_REACH of the
        model's, at any thread count: kt-kernel's rate per flop moves with the expert's shape (4.5-9.7
        TFLOP/s over seven shapes at equal rows per expert), which the expert-shape law carries
        (`kttune.hw.features.matrix_work_per_flop`), but a profile of another instance at shapes that
        far away still missed Mixtral's CPU side by up to 1.8x (docs/cost-model.md#the-expert-shape-law)."""
        curves = self.profile.curves_of("cpu_moe", method=self._cpu_method)
        if not curves:
            return
        m, ppe = self.model, self.model.params_per_expert
        near = min(curves, key=lambda c: shape_distance(c, ppe))
        nearest = near.shape.params_per_expert
        if shape_distance(near, ppe) > math.log(SHAPE_REACH):
            self.notes.append(
                f"CPU MoE: no curve of this profile measured an expert near {m.name}'s ({ppe / 1e6:.1f}M "
                f"parameters; the nearest {nearest / 1e6:.1f}M): kt-kernel's rate moves with the expert's shape, "
                f"which the expert-shape law carries, yet so far out its CPU times may be off by 2x "
                f"(docs/cost-model.md#the-expert-shape-law); "
                f"`kttune probe --model {m.name}` or `kttune tune` measures them"
            )

    def _note_layers_in_cache(self) -> None:
        """Say so where every CPU MoE curve of the method timed a layer smaller than PAST_CACHE_BYTES
        (its experts' weights, or the copies a cold curve cycled over) and the model's layer is not:
        the probe timed kt-kernel on weights a last-level cache holds, the model's are read from DRAM."""
        curves = self.profile.curves_of("cpu_moe", method=self._cpu_method)
        if not curves:
            return
        largest = max(_layer_bytes(c) for c in curves)
        m = self.model
        layer = m.num_experts * self.cpu_bytes_per_expert
        if largest < PAST_CACHE_BYTES <= layer:
            llc = self.profile.inventory.cpu.last_level_cache_bytes
            if not llc:
                held = f"fits in a last-level cache (the largest {largest / MIB:.0f} MiB)"
            elif largest * 2 <= llc:
                held = f"fits in this host's last-level cache (the largest {largest / MIB:.0f} of {llc / MIB:.0f} MiB)"
            elif largest <= llc:  # a layer about the cache's size is timed partly cached
                held = (
                    f"fits in or about fills this host's last-level cache (the largest {largest / MIB:.0f} of "
                    f"{llc / MIB:.0f} MiB, so timed partly cached: docs/cost-model.md#the-instances-own-quick-probe "
                    "has such a host's reading)"
                )
            else:  # past this host's cache, yet far below a model's gigabyte layer
                held = (
                    f"is at most {largest / MIB:.0f} MiB, past this host's {llc / MIB:.0f} MiB last-level cache "
                    "but partly held by it"
                )
            self.notes.append(
                f"CPU MoE: every {self._cpu_method} layer this profile timed {held}; {m.name}'s experts are "
                f"{layer / GIB:.1f} GiB a layer, read from "
                "DRAM, whose speed moved 2x between instances of one machine kind where the cached layer's moved "
                "1.3x (docs/cost-model.md#the-instances-own-quick-probe), and which the cached layer does not time: "
                "on the GPU boxes the path runner's BF16 hybrid forwards sat 4-6 ms per GB of CPU experts above "
                "predictions read from such a layer (docs/probe.md#the-quick-layer-in-the-cache); "
                f"`kttune probe --model {m.name}` times its own layer, `kttune tune` calibrates on it"
            )

    def _note_short_series(self) -> None:
        """Say so where no CPU MoE curve of the method timed kt-kernel's matrix kernel at two lengths or
        more of at least SETTLED_ROWS rows an expert (or the rows the model's SERIES_NOTE_TOKENS-token
        forward runs, where fewer): the rate a long hybrid forward is charged at then comes from fewer
        rows, which cost more per flop on Sapphire Rapids. Only the classes with a matrix kernel apart
        (`kt_matmul_above`: the AMX tile classes), where that was measured."""
        curves = self.profile.curves_of("cpu_moe", method=self._cpu_method)
        if not curves or self._cpu_matmul_above is None:
            return
        if not all(c.points for c in curves):
            return  # a curve without points is not judged
        # each curve's layer as its typed view reads it (`_note_layers_in_cache` read the same first)
        layers = [(c, c.shape.experts, c.shape.top_k) for c in curves]
        m = self.model
        rows = min(SETTLED_ROWS, SERIES_NOTE_TOKENS * m.top_k / m.num_experts)

        def long_points(c: Curve, e: int, k: int) -> int:
            above = kt_matmul_above(c.params.get("kernel"), e, k) or 0
            return sum(1 for p in c.points if p.x > above and p.x * k / e >= rows)

        if max(long_points(*layer) for layer in layers) >= 2:
            return
        reach = max(max(p.x for p in c.points) * k / e for c, e, k in layers)
        self.notes.append(
            f"CPU MoE: this profile's {self._cpu_method} curves time kt-kernel's matrix kernel at {rows:.0f} rows an "
            f"expert or more at fewer than two lengths (up to {reach:.0f} rows), so {m.name}'s long hybrid forwards "
            "are charged a rate measured on fewer rows (on Sapphire Rapids 1.1-1.3x dearer per flop: "
            "docs/probe.md#the-quick-layers-series-how-far-up-in-tokens); `kttune probe --quick` now times its "
            f"layer past those rows, `kttune probe --model {m.name}` the model's own"
        )

    def _note_shape_law_cpu(self) -> None:
        """Say so where the cost per output element (r) charged to the model's expert shape is the
        build's constant and this profile's CPU is a generation the constant was not measured on: one
        masked CPU name ran two generations on the H100 box, and the BF16 models' hybrid paths read
        +23% on the one the constants were not measured on (docs/probe.md#one-name-two-cpus)."""
        backend, kernel, r = self._cpu_kernel
        if not r or self.cpu_output_flops_source.startswith(MEASURED_BY_PROBE):
            return
        elsewhere = constants_measured_elsewhere(backend, self.profile.inventory.cpu)
        if elsewhere is None:
            return
        share = 1 - 1 / self._cpu_matrix_work  # r's part of the matrix work charged at the model's expert shape
        if share < SHAPE_LAW_NOTE_SHARE:
            return
        where, here = elsewhere
        self.notes.append(
            f"CPU MoE: kt-kernel's cost per output element for {kernel} (r {r:,.0f}, {share:.0%} of the work "
            f"charged at {self.model.name}'s expert shape) was measured on {where}; "
            f"this profile's CPU is {here}. On the H100 box's Sapphire Rapids instances the quick probe read the "
            "BF16 models' hybrid paths slow, and no one r carried all four (docs/probe.md#one-name-two-cpus): "
            f"`kttune probe --model {self.model.name}` times the model's own layer (`kttune probe --shape-law` "
            "measures r here)"
        )

    def _pick_cpu_method(self) -> str:
        have = {c.params.get("method") for c in self.profile.curves_of("cpu_moe")}
        if not have:
            raise UserError(
                "the hardware profile has no CPU MoE measurements",
                "run `kttune probe` on this machine or pass a shipped profile with {profile}",
                params=("profile",),
            )
        if self.method.name in have:
            return self.method.name
        # Closest measured method: same bits per weight first, then BF16.
        bits = {n: METHODS[n].cpu_format for n in have if n in METHODS}
        same = [n for n, f in bits.items() if _bits(f) == _bits(self.method.cpu_format)]
        sub = sorted(same)[0] if same else ("BF16" if "BF16" in have else sorted(have)[0])
        note = (
            f"CPU MoE for {self.method.name} was not measured on this profile; used the {sub} curves, "
            f"rescaled by bytes per expert ({_bits(self.method.cpu_format):g} vs {_bits(METHODS[sub].cpu_format):g} bits)"
        )
        if self.method.name in MX_SLOWER_THAN_SAME_BITS:
            note += (
                f": kt-kernel's {self.method.name} class ran {MX_SLOWER_THAN_SAME_BITS[self.method.name]} "
                f"(docs/probe.md#mx-methods), so this is likely fast; `kttune probe --model {self.model.name}` "
                "times it"
                + (", and so does `kttune probe --quick` since 2026-12-07" if self.method.name in UNASKED_MX else "")
            )
        self.notes.append(note)
        return sub

    def fit_report(self, threads: int, pools: int = 1) -> dict[str, dict]:
        """Each fitted component with its coefficients and relative RMS error over the points it was
        fitted on: how far the model is from its own measurements. The CPU MoE's `ms_per_flop` is per
        unit of matrix-kernel work; its `matrix_work_per_flop` at the model's expert shape (the
        expert-shape law, `cpu_matrix_work`) turns it into ms per flop there."""
        fits = {
            "cpu_moe": self._cpu_fit(threads, pools)[0],
            "gpu_moe": self._gpu_moe_fit,
            "attention": self._attn_fit,
            "gemm": self._gemm_fit,
            "h2d": self._h2d_fit,
            "stage_a": self._stage_a_fit(threads),
        }
        if self._stage_c_fit is not None:
            fits["stage_c"] = self._stage_c_fit
        if self._pipeline_fit is not None:
            fits["pipeline"] = self._pipeline_fit
        report = {k: v.as_dict() for k, v in fits.items()}
        report["cpu_moe"]["matrix_work_per_flop"] = self._cpu_matrix_work
        report["cpu_moe"]["output_flops_source"] = self.cpu_output_flops_source
        return report

    def cpu_thread_options(self) -> list[int]:
        return sorted({int(c.params["threads"]) for c in self.profile.curves_of("cpu_moe", method=self._cpu_method)})

    def threadpool_options(self, threads: int) -> list[tuple[int, tuple[int, ...]]]:
        """(sub-pools, explicit NUMA node ids or ()) measured at `threads` workers: on a multi-socket
        host the probe measures the pool spread over every node and a pool on one node alone."""
        return sorted(
            {
                (int(c.params.get("threadpools", 1)), tuple(c.params.get("numa_nodes") or ()))
                for c in self.profile.curves_of("cpu_moe", method=self._cpu_method, threads=threads)
            }
        )

    def threadpool_choice(self, threads: int, tokens: int = 1024) -> tuple[int, tuple[int, ...]]:
        """The measured (`--kt-threadpool-count`, `--kt-numa-nodes`) that runs a `tokens`-token forward
        over every expert fastest at `threads` workers; without a measurement at that count, one pool
        per NUMA node of the profile's CPU."""
        opts = self.threadpool_options(threads)
        if not opts:
            return max(1, len(self.profile.inventory.cpu.numa_nodes)), ()
        return min(opts, key=lambda o: (self.cpu_moe_ms(tokens, self.model.num_experts, threads, *o), -o[0]))

    def _cpu_fit(self, threads: int, pools: int, numa: tuple[int, ...] = ()) -> tuple[LinearFit, Curve | None]:
        key = (threads, pools, tuple(numa))
        if key not in self._cpu_fits:
            curves = self.profile.curves_of("cpu_moe", method=self._cpu_method, threads=threads)
            if not curves:
                opts = self.cpu_thread_options()
                raise UserError(
                    f"no CPU MoE measurement with {threads} threads for {self._cpu_method}",
                    f"use one of {opts} threads, or probe with `kttune probe --threads {threads}`",
                )
            pooled = nearest_shapes(_same_pool(curves, pools, numa), self.model.params_per_expert)
            self._note_thread_law(threads, pooled)
            fit = fit_curves(pooled, self._cpu_row)
            m = self.model
            same_shape = [
                c for c in pooled if (c.shape.hidden, c.shape.inter) == (m.hidden_size, m.moe_intermediate_size)
            ]
            table = (
                _residual_table(fit, same_shape[0], cpu_matmul_above(same_shape[0]), self._cpu_row)
                if same_shape and self._cpu_method == self.method.name
                else None
            )
            lent = None if same_shape else self._shape_from_other_threads(threads, pools, numa, pooled)
            self._cpu_fits[key] = lent or (fit, table)
        return self._cpu_fits[key]

    def _note_thread_law(self, threads: int, curves: list[Curve]) -> None:
        """A note for each curve read at `threads` of which a third of the points or more took more than
        a larger count of the same measurement allows (`kttune.hw.point_quality.slower_than_larger_pools`):
        a count timed in a slow moment reads slow as a whole (docs/probe.md#disturbed-points; a probe
        times such points again, a profile measured before it did may hold them)."""
        groups = thread_groups(self.profile.curves_of("cpu_moe", method=self._cpu_method))
        for c in curves:
            slow = slower_than_larger_pools(groups[curve_group(c)]).get(threads, [])
            if slow and 3 * len(slow) >= len(c.points):
                self.notes.append(
                    f"CPU MoE at {threads} threads ({self._cpu_method} {c.shape.hidden}x{c.shape.inter}): "
                    f"{len(slow)} of {len(c.points)} points took over {THREAD_LAW_SLACK:g}x what a larger thread "
                    "count of the same probe allows (fewer workers, the same work), as a count timed in a slow "
                    "moment does, so this count may read slow; `kttune probe` times such points again "
                    "(docs/probe.md#disturbed-points)"
                )

    def _shape_from_other_threads(
        self, threads: int, pools: int, numa: tuple[int, ...], pooled: list[Curve]
    ) -> tuple[LinearFit, object] | None:
        """The model's expert shape from another thread count, scaled to `threads`: where this count
        was measured only at shapes far from the model's (a quick probe's small shape) and another
        count measured one nearer, the kernel's shape efficiency comes from the nearer one and the
        thread scaling from a shape both counts measured (their fitted times' ratio per forward size).
        Thread scaling is a property of the pool over a given shape; extrapolating a small shape's
        flop rate to one 10x wider is not (docs/cost-model.md#cpu-experts-at-other-thread-counts)."""
        ppe = self.model.params_per_expert

        def dist(c: Curve) -> float:
            return shape_distance(c, ppe)

        here = min(dist(c) for c in pooled)
        # every shape this count measured is narrower than the model's expert by more than NARROW_REACH:
        # its flop rate would be extrapolated upward, where the kernel runs faster (the docstring)
        narrow_only = all(c.shape.params_per_expert * NARROW_REACH < ppe for c in pooled)
        mine = {
            (c.shape.hidden, c.shape.inter, c.shape.experts): c
            for c in _same_pool(
                self.profile.curves_of("cpu_moe", method=self._cpu_method, threads=threads), pools, numa
            )
        }
        best = None
        for t in self.cpu_thread_options():
            theirs = _same_pool(self.profile.curves_of("cpu_moe", method=self._cpu_method, threads=t), pools, numa)
            if t == threads or not theirs:
                continue
            d = min(dist(c) for c in theirs)
            common = [c for c in theirs if (c.shape.hidden, c.shape.inter, c.shape.experts) in mine]
            nearer = here - d > math.log(SHAPE_REACH) or (narrow_only and d < here)
            if nearer and common and (best is None or d < best[0]):
                best = (d, t, theirs, min(common, key=dist))
        if best is None:
            return None
        _, t, theirs, ref = best
        at_t = fit_curves([ref], self._cpu_row)
        at_threads = fit_curves([mine[(ref.shape.hidden, ref.shape.inter, ref.shape.experts)]], self._cpu_row)
        row = self._cpu_row

        def scale(tokens: float) -> float:
            a = at_t(row(ref, tokens))
            return at_threads(row(ref, tokens)) / a if a > 0 else 1.0

        self.notes.append(
            f"CPU MoE at {threads} threads: measured there only at shapes far from "
            f"{self.model.name}'s; its shape taken from the {t}-thread curves, scaled by the "
            f"{threads}/{t}-thread ratio on {ref.shape.hidden}x{ref.shape.inter}"
        )
        return fit_curves(nearest_shapes(theirs, ppe), self._cpu_row), scale

    def cpu_moe_ms(
        self, tokens: float, cpu_experts: int, threads: int, pools: int = 1, numa: tuple[int, ...] = ()
    ) -> float:
        """One kt-kernel MoE forward of `tokens` tokens over `cpu_experts` experts on the CPU, with
        `threads` workers in `pools` sub-pools (on the NUMA nodes `numa`, () for kt-kernel's default)."""
        if cpu_experts <= 0 or tokens <= 0:
            return 0.0
        m = self.model
        fit, residual = self._cpu_fit(threads, pools, numa)
        row = moe_features(
            tokens,
            m.hidden_size,
            m.moe_intermediate_size,
            m.num_experts,
            m.top_k,
            cpu_experts,
            self.cpu_bytes_per_expert,
        )
        t = fit(kt_gemm_split(row, tokens, self._cpu_matmul_above, self._cpu_matrix_work))
        return t * residual(tokens) if residual else t

    def cpu_matmul_above(self) -> int | None:
        """The forward length above which kt-kernel runs the model's CPU experts with its
        matrix-matrix GEMM (`kttune.spec.kt_classes.kt_matmul_above`): the layer's routed experts and
        top-k, the class that measured the profile's curves of the method (the one this host runs it
        with, at every thread count)."""
        return self._cpu_matmul_above

    def cpu_matrix_work(self) -> float:
        """kt-kernel's matrix-kernel work per flop at the model's expert shape, for the class that
        measured the profile's curves of the method (`kttune.hw.features.matrix_work_per_flop`; 1
        where that class's cost per output element was not measured)."""
        return self._cpu_matrix_work

    def _find_cpu_kernel(self) -> tuple[int | None, float]:
        """The class that measured the profile's curves of the method: where it switches to its
        matrix kernel at the model's layer, and that kernel's work per flop at the model's expert
        shape (`kttune.hw.features.matrix_work_per_flop`; 1 for a class whose cost per output element
        was not measured)."""
        curves = [c for c in self.profile.curves_of("cpu_moe", method=self._cpu_method) if c.params.get("kernel")]
        kernel, backend = (curves[0].params["kernel"], curves[0].backend) if curves else (None, None)
        m = self.model
        r, self.cpu_output_flops_source = self._output_flops(backend, kernel)
        self._cpu_kernel = (backend, kernel, r)  # the build, class and r charged (`_note_shape_law_cpu`)
        work = matrix_work_per_flop(m.hidden_size, m.moe_intermediate_size, r)
        return kt_matmul_above(kernel, m.num_experts, m.top_k), work

    def _output_flops(self, backend: str | None, kernel: str | None) -> tuple[float, str]:
        """kt-kernel's cost per output element for a build and class, and its source: this profile's
        own `cpu_moe_shape` set where its probe measured one, else the benchmark's constant
        (`kttune.hw.shape_law.output_flops_for`); once per (build, class)."""
        key = (backend, kernel)
        if key not in self._output_flops_cache:
            self._output_flops_cache[key] = output_flops_for(self.profile.curves, backend, kernel)
        return self._output_flops_cache[key]

    def _cpu_row(self, c: Curve, x: float) -> tuple:
        """A `cpu_moe` point's features at the cost per output element of the build and class that
        measured it (`_output_flops`)."""
        return cpu_moe_row(c, x, self._output_flops(c.backend, c.params.get("kernel"))[0])

    # ---- GPU -----------------------------------------------------------------------------------
    def _fit_gpu_moe(self) -> LinearFit:
        method = self.method.name
        own = self.profile.curves_of("gpu_moe", method=method)
        twin = GPU_MOE_TWIN.get(method)
        if not own and twin and (own := self.profile.curves_of("gpu_moe", method=twin)):
            method = twin  # the same kernel measured under the twin's name (GPU_MOE_TWIN)
        curves = own or self.profile.curves_of("gpu_moe")
        if not curves:
            raise UserError(
                "the hardware profile has no GPU MoE measurements",
                "pass a profile with GPU curves ({profile}), e.g. a shipped one from `kttune profiles`",
                params=("profile",),
            )
        if method != self.method.name:
            self.notes.append(
                f"GPU MoE for {self.method.name} not measured under its name; used {method}'s curves, "
                f"{_TWIN_WHY[self.method.name]} (docs/cost-model.md#pipeline-twins)"
            )
        elif not own:
            pooled = ", ".join(sorted({str(c.params.get("method")) for c in curves}))
            self.notes.append(f"GPU MoE for {method} not measured; used the {pooled} curves rescaled by bytes")
        # GPU MoE curves run every expert of the layer: cpu_experts is absent and defaults to all.
        # The pooled fit over every shape keeps the bytes term best determined (the HBM rate decode
        # reads, `_hbm_ms_per_byte`); the layer's time comes from the shapes near the model's.
        self._gpu_moe_pooled_fit = fit_curves(curves)
        near = nearest_shapes(curves, self.model.params_per_expert)
        fit = fit_curves(near)
        m = self.model
        own = [
            c
            for c in near
            if (c.shape.hidden, c.shape.inter, c.shape.experts) == (m.hidden_size, self.i_tp, m.num_experts)
            and c.params.get("method") == method
        ]
        self._gpu_moe_residual = _residual_table(fit, own[0]) if own else None
        return fit

    def gpu_moe_ms(self, tokens: float, gpu_experts: int) -> float:
        """Fused MoE on one rank over `gpu_experts` of the layer's experts (I/tp shards): the fit over
        the measured shapes within 8x of the model's expert size (`nearest_shapes`, as for the CPU
        experts: a grouped GEMM's flop rate grows with the expert's width, so a 7168x2048 expert's
        rate over-predicts a 2048x768 one's by 1.7x at 16k tokens), times the measured / fitted ratio
        on the model's own shape where the profile measured it (`_residual_table`)."""
        if gpu_experts <= 0 or tokens <= 0:
            return 0.0
        m = self.model
        t = self._gpu_moe_fit(
            moe_features(
                tokens, m.hidden_size, self.i_tp, m.num_experts, m.top_k, gpu_experts, self.gpu_bytes_per_expert
            )
        )
        return t * self._gpu_moe_residual(tokens) if self._gpu_moe_residual else t

    def _fit_attention(self) -> LinearFit:
        kind = self.model.attention
        curves = self.profile.curves_of("attention", attention=kind) or self.profile.curves_of("attention")
        if not curves:
            raise UserError(
                "the hardware profile has no attention measurements",
                "pass a profile with GPU curves ({profile})",
                params=("profile",),
            )
        return fit_curves(curves)

    def attention_ms(self, tokens: float, prefix: float, backend: str | None = None) -> float:
        """Prefill attention of one full-attention layer on one rank (heads / tp), in the form SGLang
        runs it on `backend` (None: the one this model runs on, `attention_backend`).

        MLA (docs/cost-model.md#mla-prefill-forms) takes the form `mla_attention_form` names: with no
        prefix, or expanded in one shot, MHA over per-head keys and values (qk_nope + rope, v), a
        one-shot forward also expanding the prefix's latents through kv_b_proj; absorbed (triton,
        what kttune launches, whenever there is a prefix), each query against the latents,
        kv_lora + rope wide for q.k and kv_lora for p.v. A model with sparse attention on SGLang's
        sparse backend (`runs_sparse_attention`) runs it as that backend dispatches it
        (docs/cost-model.md#sparse-attention): dense where `sparse_prefill_is_dense` says so; else
        each query over its top-k latents, the rank's heads padded as the kernel pads them
        (`sparse_kernel_heads`), plus the indexer over every causal pair (all its heads on every
        rank: its Linears are replicated), its FP8 flops at the GPU's FP8 / BF16 datasheet ratio and
        its logits at the HBM rate. Every flop is priced at the rate of the profile's attention
        curves: of these forms the probe measures MHA alone."""
        m = self.model
        heads = max(1, m.num_attention_heads // self.tp)
        if m.compressed_attention is not None:
            return self._compressed_attention_ms(tokens, prefix, heads)
        mha = attention_prefill_flops(tokens, prefix, heads, m.head_dim, m.v_head_dim)
        if m.attention != "mla":
            return self._attn_fit((1.0, mha))
        backend = self.mla_backend_for(backend)
        dsa = m.sparse_attention
        if backend == SPARSE_BACKEND and dsa is not None:
            if sparse_prefill_is_dense(self.gpu_sm, prefix + tokens, dsa.index_topk, m.family):
                return self._attn_fit((1.0, mha)) + self._mla_prefix_expansion_ms(prefix)
            main, index, logits = sparse_attention_prefill_work(
                tokens,
                prefix,
                sparse_kernel_heads(heads, self.gpu_sm),
                m.kv_lora_rank,
                m.qk_rope_head_dim,
                dsa.index_topk,
                dsa.index_heads,
                dsa.index_head_dim,
            )
            share = self._indexed_share  # IndexShare: the mean layer's indexer
            return (
                self._attn_fit((1.0, main + share * index / self.fp8_speedup)) + share * logits * self.hbm_ms_per_byte
            )
        form = mla_attention_form(int(prefix), backend)
        if form == "absorbed":
            return self._attn_fit(
                (1.0, mla_latent_attention_flops(tokens, prefix, heads, m.kv_lora_rank, m.qk_rope_head_dim))
            )
        return self._attn_fit((1.0, mha)) + (self._mla_prefix_expansion_ms(prefix) if form == "one_shot" else 0.0)

    def _compressed_attention_ms(self, tokens: float, prefix: float, heads: int) -> float:
        """DeepSeek-V4's attention in the mean decoder layer (docs/deepseek-v4.md#prefill): FlashMLA's
        sparse kernel over each query's keys (`CompressedAttentionSpec.keys_attended`: the window on
        every layer, the top-k compressed entries on c4 layers, every entry on c128 layers), q.k and
        p.v each `head_dim` wide, the rank's heads padded as the kernel pads them
        (`sparse_kernel_heads`); on c4 layers the indexer over every (query, entry) pair, FP8 flops at
        the GPU's FP8 / BF16 datasheet ratio, its fp32 logits written and read at the HBM rate; and the
        hyper-connections' streams (`hc_mult` x hidden, bf16) read twice and written once around each
        of the layer's two sublayers, at the HBM rate. Every flop at the rate of the profile's
        attention curves: the probe measures MHA alone."""
        m = self.model
        ca = m.compressed_attention
        window, c4_keys, c128_keys = ca.keys_attended(tokens, prefix)
        share4, share128 = len(ca.c4_layer_ids) / m.num_layers, len(ca.c128_layer_ids) / m.num_layers
        keys = window + share4 * c4_keys + share128 * c128_keys
        main = 2.0 * sparse_kernel_heads(heads, self.gpu_sm) * (2 * ca.head_dim) * keys
        pairs = share4 * ca.indexed_pairs(tokens, prefix)
        index = 2.0 * pairs * ca.index_heads * ca.index_head_dim
        streams = 2 * 3 * tokens * ca.hc_mult * m.hidden_size * 2
        return self._attn_fit((1.0, main + index / self.fp8_speedup)) + (8.0 * pairs + streams) * self.hbm_ms_per_byte

    def linear_attention_ms(self, tokens: float) -> float:
        """A Gated DeltaNet layer's recurrence in a prefill forward of `tokens` tokens on one rank (its
        value heads / tp): the chunked gated delta rule's flops at the rate of the profile's attention
        curves and the per-tile states it writes and reads back at the HBM rate
        (`gated_delta_rule_prefill_work`), and the short convolution before it, its channels read and
        written at the HBM rate (`causal_conv1d_prefill_bytes`;
        docs/cost-model.md#linear-attention-layers). Its projections are among the dense matmuls. 0
        for a model without such layers."""
        lin = self.model.linear_attention
        if lin is None or tokens <= 0:
            return 0.0
        heads = max(1, lin.num_value_heads // self.tp)
        flops, nbytes = gated_delta_rule_prefill_work(tokens, heads, lin.key_head_dim, lin.value_head_dim)
        nbytes += causal_conv1d_prefill_bytes(tokens, linear_conv_channels(self.model, self.tp))
        return self._attn_fit((1.0, flops)) + nbytes * self.hbm_ms_per_byte

    @property
    def mla_backend(self) -> str:
        """The attention backend this model's MLA runs on by default (`mla_backend_for(None)`)."""
        return self.mla_backend_for(None)

    def mla_backend_for(self, backend: str | None) -> str:
        """The SGLang backend an MLA forward runs on for a launch's `--attention-backend` (None or "":
        this Components' `attention_backend`, else kttune's launch's; SGLANG_DEFAULT_BACKEND: the one
        SGLang picks for the GPU, nsa for a sparse-attention model)."""
        backend = backend or self.attention_backend or LAUNCH_ATTENTION_BACKEND["mla"]
        if backend == SGLANG_DEFAULT_BACKEND:
            return SPARSE_BACKEND if self.model.sparse_attention else sglang_default_mla_backend(self.gpu_sm)
        return backend

    def runs_sparse(self, backend: str | None = None) -> bool:
        """Whether a sparse-attention model runs its indexer on `backend` (`mla_backend_for`): on
        SGLang's nsa backend alone (docs/cost-model.md#sparse-attention)."""
        return self.model.sparse_attention is not None and self.mla_backend_for(backend) == SPARSE_BACKEND

    def _mla_prefix_expansion_ms(self, prefix: float) -> float:
        """kv_b_proj over the prefix's latents, which a one-shot MLA forward expands into the rank's
        per-head keys (qk_nope) and values with the new tokens' (the new tokens' are the dense
        matmuls')."""
        m = self.model
        if prefix <= 0:
            return 0.0
        heads = max(1, m.num_attention_heads // self.tp)
        nope = m.head_dim - m.qk_rope_head_dim
        return self._gemm_fit(gemm_features(prefix, m.kv_lora_rank, heads * (nope + m.v_head_dim)))

    def _gpu_datasheet(self):
        gpus = self.profile.inventory.gpus
        return spec_for_name(gpus[0].name) if gpus else None

    def _gpu_sm(self) -> int | None:
        """The GPU's compute capability as SGLang's `get_device_sm` reads it (major x 10 + minor): the
        profile's, else the GPU table's; None where neither knows the GPU."""
        gpus = self.profile.inventory.gpus
        cc = (gpus[0].compute_capability if gpus else None) or (
            getattr(self._gpu_datasheet(), "compute_capability", "")
        )
        if not cc:
            return None
        major, _, minor = str(cc).partition(".")
        return int(major) * 10 + int(minor or 0)

    def _fp8_speedup(self) -> float:
        """FP8 over BF16 dense tensor rate of the GPU's datasheet (2 on Hopper and Blackwell; 1 where
        the GPU has no FP8 tensor cores or is not in the table)."""
        spec = self._gpu_datasheet()
        return spec.fp8_or_bf16_tflops / spec.bf16_tflops if spec is not None else 1.0

    def _fit_gemm(self) -> LinearFit:
        curves = self.profile.curves_of("gpu_gemm")
        if not curves:
            raise UserError(
                "the hardware profile has no GPU GEMM measurements",
                "pass a profile with GPU curves ({profile})",
                params=("profile",),
            )
        return fit_curves(curves)

    def _embedding_params(self) -> int:
        """The input embedding and the LM head (one matrix when tied)."""
        m = self.model
        return m.vocab_size * m.hidden_size * (1 if m.tie_word_embeddings else 2)

    def _dense_params_per_layer(self) -> float:
        m = self.model
        params = m.non_expert_bytes / max(1, m.non_expert_dtype_bytes)
        return max(0.0, params - self._embedding_params()) / m.num_layers

    def _layer_overhead(self) -> float:
        """Per decoder layer, the attention block's fixed cost that neither the SDPA nor the GEMM fit
        holds: its launches and host-side work (norms, rotary, router, a few dozen eager ops). The
        fitted fixed part of the attention-block curves (probes/gpu_attention.py) of this model, else
        of its attention kind and q/k norm, else of its kind, less the fixed parts attention_ms and
        dense_ms already charge (docs/cost-model.md#the-attention-blocks-fixed-cost). 0 with a note
        when the profile has no such curve."""
        curves = self.profile.curves_of("attention_block")
        m = self.model
        qk = m.qk_norm or "none"
        pick = (
            [c for c in curves if c.params.get("model") == m.name]
            or [c for c in curves if c.params.get("attention") == m.attention and c.params.get("qk_norm") == qk]
            or [c for c in curves if c.params.get("attention") == m.attention]
            # DeepSeek-V4's block (no probe runs its kernels): DeepSeek's MLA block, the nearest kind
            or [c for c in curves if m.attention == "csa" and c.params.get("attention") == "mla"]
        )
        if not pick:
            self.notes.append(
                "the profile has no attention-block measurement: the per-layer launch and host-side cost "
                "of the attention block is not counted (kttune probe measures it)"
            )
            return 0.0
        if not any(c.params.get("model") == m.name for c in pick):
            names = ", ".join(sorted({str(c.params.get("model")) for c in pick}))
            self.notes.append(f"attention block of {m.name} not measured; used the fixed cost of {names}")
        fixed = fit_curves(pick).coef[0]
        return max(0.0, fixed - self._attn_fit.coef[0] - self._gemm_fit.coef[0])

    def layer_other_ms(self, tokens: float, prefix: float, backend: str | None = None) -> float:
        """One full-attention MoE decoder layer's work besides its experts: attention (on `backend`,
        `attention_ms`), dense matmuls and the attention block's fixed cost (what the path runner's
        `attn` phase and shared experts take: its forwards pass `EXPAND_EVERY_PREFIX`)."""
        return (
            self.attention_ms(tokens, prefix, backend) + self.dense_ms(tokens, prefix, backend) + self.layer_overhead_ms
        )

    def dense_ms(self, tokens: float, prefix: float = 0.0, backend: str | None = None) -> float:
        """Non-expert matmuls of one decoder layer (attention projections, dense or shared MLP) on one
        rank, as a [tokens, H] x [H, P/H] GEMM with P the rank's share of the layer's non-expert
        parameters: 1/tp of them, but a sparse-attention indexer's Linears whole (replicated on every
        rank) where `backend` runs them for a forward over `prefix` cached tokens, and not at all where
        it does not (`_indexer_shares`)."""
        m = self.model
        n = self.rank_dense_params(prefix + tokens, backend) / m.hidden_size
        return self._gemm_fit(gemm_features(tokens, m.hidden_size, int(n)))

    def rank_dense_params(self, kv_len: float | None, backend: str | None = None) -> float:
        """One rank's share of a decoder layer's non-expert, non-embedding parameters (in units of
        the non-expert dtype) in a forward whose sequence holds `kv_len` tokens (None: a decode step)
        on `backend` (`dense_ms`)."""
        run, whole = self._indexer_shares(kv_len, backend)
        return self._per_layer_dense_params * ((1.0 - whole) / self.tp + run)

    def _indexer_projection_shares(self) -> tuple[float, float] | None:
        """A sparse-attention indexer's query- and key-side Linears as shares of a layer's
        non-expert, non-embedding parameters; None without an indexer."""
        m = self.model
        per_layer = (m.non_expert_params_estimate - self._embedding_params()) / m.num_layers
        if m.sparse_attention is None or per_layer <= 0:
            return None
        query, key = m.sparse_attention.projection_params(m.hidden_size, m.q_lora_rank)
        indexed = len(m.indexer_layer_ids) / m.num_layers  # the mean layer's: IndexShare's shared ones hold none
        return indexed * query / per_layer, indexed * key / per_layer

    def _indexed_layer_share(self) -> float:
        """The share of a sparse-attention model's full-attention layers that run an indexer of their
        own (1 but under IndexShare, whose shared layers reuse the top-k before them): attention_ms
        charges the mean layer's indexer. Computed once, at construction."""
        m = self.model
        return len(m.indexer_layer_ids) / max(1, len(m.full_attention_layer_ids))

    def _indexer_shares(self, kv_len: float | None, backend: str | None) -> tuple[float, float]:
        """(The share of a layer's non-expert, non-embedding parameters that a sparse-attention
        indexer runs in a forward whose sequence holds `kv_len` tokens (None: a decode step), the
        indexer's whole share); (0, 0) without an indexer. SGLang runs the indexer on its nsa backend
        alone; there an extend forward of no more than the top-k tokens runs its key side alone
        (`Indexer._forward_cuda_k_only`, docs/cost-model.md#sparse-attention)."""
        if self._indexer_query_key is None:
            return 0.0, 0.0
        query, key = self._indexer_query_key
        if not self.runs_sparse(backend):
            return 0.0, query + key
        if kv_len is not None and kv_len <= self.model.sparse_attention.index_topk:
            return key, query + key
        return query + key, query + key

    def _hbm_ms_per_byte(self) -> float:
        b = self._gpu_moe_pooled_fit.coef[1]
        if b > 0:
            return b
        for g in self.profile.inventory.gpus:
            spec = spec_for_name(g.name)
            if spec is not None:
                self.notes.append(f"HBM bandwidth from the {spec.name} datasheet ({spec.hbm_gbps:g} GB/s)")
                return 1e3 / (spec.hbm_gbps * 1e9)
        self.notes.append("HBM bandwidth unknown; assumed 1000 GB/s")
        return 1e3 / 1e12

    def decode_dense_ms(self, batch: int, context: float, backend: str | None = None) -> float:
        """One decode step's non-expert work on one rank: weight reads plus the KV read of `batch`
        requests at `context` tokens (`decode_kv_read_bytes`: sliding-window and sparse-attention
        layers read a bounded part of it), both HBM-bound. A sparse-attention indexer's weights are
        read whole on every rank where `backend` runs it, and not at all where it does not."""
        m = self.model
        run, whole = self._indexer_shares(None, backend)
        body = (
            self._per_layer_dense_params
            * m.num_layers
            / max(1.0, m.non_expert_bytes / max(1, m.non_expert_dtype_bytes))
        )
        weights = m.non_expert_bytes * ((1.0 - whole * body) / self.tp + run * body)  # body: the share past embeddings
        kv = decode_kv_read_bytes(m, self.tp, batch, context, sparse=self.runs_sparse(backend))
        return (weights + kv) * self.hbm_ms_per_byte + m.num_layers * self._gemm_fit.coef[0]

    def decode_kv_terms(self, backend: str | None = None) -> tuple[tuple[float, float], ...]:
        """The decode KV read as (ms per context token and request, tokens read at most) terms
        (`kttune.memory.vram.decode_kv_reads` at the HBM rate): decode_dense_ms(batch, context) is
        decode_dense_ms(batch, 0) + batch x sum of ms x min(context, cap)."""
        reads = decode_kv_reads(self.model, self.tp, sparse=self.runs_sparse(backend))
        return tuple((b * self.hbm_ms_per_byte, cap) for b, cap in reads)

    # ---- copies and the layerwise stages ---------------------------------------------------------
    def _fit_copy(self, kind: str) -> LinearFit:
        curves = [
            c for c in self.profile.curves_of(kind) if c.params.get("pinned", True) and c.params.get("gpu") != "all"
        ]
        if not curves:
            raise UserError(
                f"the hardware profile has no {kind.upper()} copy measurements",
                "pass a profile with GPU curves ({profile})",
                params=("profile",),
            )
        return fit_curves(curves)

    def _all_links_ms_per_byte(self) -> float | None:
        """ms per byte of one rank's shard when the `tp` ranks copy at once, from the host's aggregate
        rate: the `gpu: "all"` H2D curves (every GPU copying x bytes at once, the host's clock over
        all of them) fitted, their rate per byte per GPU times tp over the GPUs they measured (each
        point records how many; a derived profile keeps the measured points, whatever its own GPU
        count). None where not measured."""
        curves = [c for c in self.profile.curves_of("h2d", gpu="all") if c.params.get("pinned", True)]
        if not curves:
            self.notes.append(
                f"H2D over {self.tp} links at once not measured; assumed each link runs at its single-GPU rate"
            )
            return None
        per_gpu = fit_curves(curves).coef[1]
        gpus = [int(p.extra["gpus"]) for c in curves for p in c.points if p.extra.get("gpus")]
        return per_gpu * self.tp / (max(gpus) if gpus else self.tp) if per_gpu > 0 else None

    def _allreduce_curve(self) -> Curve | None:
        """The profile's all-reduce curve for this many ranks (or the nearest measured count)."""
        if not hasattr(self, "_allreduce_best"):
            curves = self.profile.curves_of("allreduce")
            self._allreduce_best = (
                min(curves, key=lambda c: abs(int(c.params.get("ranks", 2)) - self.tp)) if curves else None
            )
            if curves:
                self._allreduce_fit = fit_curves([self._allreduce_best])
            else:
                self.notes.append(
                    "no all-reduce curve in the profile: TP all-reduces estimated with NCCL's ring cost "
                    "model over one link at the measured H2D rate"
                )
        return self._allreduce_best

    def allreduce_ms(self, nbytes: float) -> float:
        """One all_reduce of `nbytes` per rank across the `tp` ranks (0 at TP 1): the profile's
        `allreduce` curve for this many ranks (or the nearest measured count), its points interpolated
        inside their range and its linear fit outside; without a curve, NCCL's ring cost model
        (`kttune.hw.derive.nccl_allreduce_ms`) over one PCIe link at the measured H2D rate."""
        if self.tp <= 1 or nbytes <= 0:
            return 0.0
        curve = self._allreduce_curve()
        if curve is None:
            link_gbps = 1.0 / max(self._h2d_fit.coef[1], 1e-15) / 1e6
            return nccl_allreduce_ms(nbytes, self.tp, link_gbps, "pcie")
        xs, ts = curve.xs, curve.ts
        if len(xs) > 1 and min(xs) <= nbytes <= max(xs):
            return interp_loglog(xs, ts, nbytes)
        if nbytes < min(xs):
            return min(ts)  # smaller than anything measured: the latency of the smallest message
        return self._allreduce_fit(copy_features(nbytes))

    def barrier_ms(self) -> float:
        """One `dist.barrier` over the TP ranks' device group, which the layerwise load runs per
        expert (docs/sglang-kt.md#layerwise-prefill-at-tp--1): on NCCL an all-reduce of one element,
        so the fixed cost of the smallest all-reduce (0 at TP 1)."""
        return self.allreduce_ms(4.0) if self.tp > 1 else 0.0

    def allreduce_layer_ms(self, tokens: float) -> float:
        """A decoder layer's TP all-reduces: after attention and after the MoE, tokens x H bf16 each
        (sglang's tensor-parallel layer; the hybrid path's CPU output joins the MoE one)."""
        return 2 * self.allreduce_ms(tokens * self.model.hidden_size * 2)

    def h2d_ms(self, nbytes: float) -> float:
        return self._h2d_fit(copy_features(nbytes)) if nbytes > 0 else 0.0

    def h2d_all_ranks_ms(self, nbytes_per_rank: float) -> float:
        """Every TP rank copying its shard at once (layerwise stage B): each over its own link (the
        single-link curve: its fixed cost and its rate), and no faster than the host's aggregate rate
        measured with every GPU copying at once (the `gpu: "all"` curve, x = bytes per GPU), shared by
        `tp` ranks where that curve had its own GPU count. Only that curve's rate applies, not its
        fixed cost: the probe launches every GPU's copy from one thread and
        waits for them together, while each rank of a server launches its own
        (docs/cost-model.md#tp-layerwise-load)."""
        if nbytes_per_rank <= 0:
            return 0.0
        one = self.h2d_ms(nbytes_per_rank)
        if self._h2d_all_ms_per_byte is not None:
            return max(one, nbytes_per_rank * self._h2d_all_ms_per_byte)
        return one

    def d2h_ms(self, nbytes: float) -> float:
        return self._d2h_fit(copy_features(nbytes)) if nbytes > 0 else 0.0

    def stage_a_ms(self, nbytes: float, threads: int) -> float:
        """Stage A: kt-kernel writes `nbytes` of expert weights in GPU layout into a pinned slot."""
        return self._stage_a_fit(threads)(copy_features(nbytes))

    def _stage_a_fit(self, threads: int) -> LinearFit:
        if threads not in self._stage_a_fits:
            curves = self.profile.curves_of("stage_a_write", method=self.method.name)
            if not curves:
                # the twin's writer moves the same bytes (PIPELINE_TWIN), else any method's
                twin = PIPELINE_TWIN.get(self.method.name)
                curves = (twin and self.profile.curves_of("stage_a_write", method=twin)) or self.profile.curves_of(
                    "stage_a_write"
                )
                if not curves:
                    raise UserError(
                        "the hardware profile has no stage-A (write_weight_scale_to_buffer) measurements",
                        "run `kttune probe` or pass a shipped profile with {profile}",
                        params=("profile",),
                    )
                self.notes.append(
                    f"stage A for {self.method.name} not measured; used {curves[0].params.get('method')} bytes/s"
                )
            ths = sorted({int(c.params.get("threads", 1)) for c in curves})
            best = max([t for t in ths if t <= threads] or ths[:1])
            sel = [c for c in curves if int(c.params.get("threads", 1)) == best]
            self._stage_a_fits[threads] = fit_curves(sel)
        return self._stage_a_fits[threads]

    def _fit_stage_c(self) -> LinearFit | None:
        if self.method.name not in REPACKED_METHODS:
            return None  # FP8 / BF16 / MXFP8 are byte copies; no per-expert post-processing
        # RAWINT4 and MXFP4 are repacked (sglang-kt: Marlin's repack / prepare; the runner: one Triton
        # transpose of the same bytes, kttune/kernels/int4.py): either's curve by bytes
        curves = self.profile.curves_of("stage_c_repack", method=self.method.name) or self.profile.curves_of(
            "stage_c_repack"
        )
        if not curves:
            self.notes.append("stage C (4-bit repack) not measured; assumed free")
            return None
        return fit_curves(curves)

    def stage_c_ms(self, nbytes: float) -> float:
        return self._stage_c_fit(copy_features(nbytes)) if self._stage_c_fit else 0.0

    def _fit_pipeline(self) -> LinearFit | None:
        """Layer load time against streamed bytes, from the measured A -> B -> C pipeline of this
        method (one GPU). None when not measured for the method: then the stages are composed."""

        # a derived profile carries pipelines measured on another machine for their overlap only
        def measured(method: str) -> list[Curve]:
            return [c for c in self.profile.curves_of("pipeline", method=method) if c.params.get("use") != "overlap"]

        curves = measured(self.method.name)
        twin = PIPELINE_TWIN.get(self.method.name)
        if not curves and twin and (curves := measured(twin)):
            self.notes.append(
                f"layerwise pipeline for {self.method.name} not measured; used {twin}'s, by bytes streamed "
                "(the same stages move the same bytes: docs/cost-model.md#pipeline-twins)"
            )
        if not curves:
            return None
        by_threads: dict[int, list[Curve]] = {}
        for c in curves:
            by_threads.setdefault(int(c.params.get("threads") or 0), []).append(c)
        self._pipeline_curves = by_threads
        self._pipeline_fits = {t: fit_curves(cs) for t, cs in by_threads.items()}
        self._pipeline_own = {
            t: [c for c in cs if _same_expert_bytes(c, self.cpu_bytes_per_expert)] for t, cs in by_threads.items()
        }
        # the points read as measured: the model's own layer where measured, else every layer's
        self._pipeline_points = {
            t: sorted((p.x, p.t_ms) for c in (self._pipeline_own[t] or cs) for p in c.points)
            for t, cs in by_threads.items()
        }
        # past the measured bytes, the model's own layer where the probe streamed it (within one layer
        # the steps are the bytes over one expert's, so its points fix both costs; other layers' expert
        # sizes would mix a cost per step into the cost per byte), else every layer of the method
        self._pipeline_extrapolations = {
            t: fit_curves(self._pipeline_own[t]) if self._pipeline_own[t] else self._pipeline_fits[t]
            for t in by_threads
        }
        # a twin's curves stand in by bytes streamed (PIPELINE_TWIN): its layers' steps are not this method's
        own_method = all(c.params.get("method") == self.method.name for c in curves)
        self._pipeline_step_fits = {
            t: f for t, cs in by_threads.items() if own_method and (f := _fit_pipeline_steps(cs)) is not None
        }
        # the reported fit: the thread count measured with the most points
        return self._pipeline_fits[max(by_threads, key=lambda t: sum(len(c.points) for c in by_threads[t]))]

    def pipeline_layer_ms(self, streamed_experts: int, threads: int, at_tp1: bool = False) -> float | None:
        """Measured pipeline time for streaming `streamed_experts` experts of this model (TP 1), or
        None when the profile holds no pipeline curve for the method at this thread count, or
        TP > 1 (each rank then copies a shard over its own link while rank 0 writes every shard):
        the caller composes the stages then (`at_tp1`: the TP 1 time all the same, which the TP
        composition starts from). Inside the measured byte range the curve's points are
        interpolated (log-log); outside it, the linear fit extrapolates."""
        if self._pipeline_fit is None or streamed_experts <= 0 or threads not in self._pipeline_fits:
            return None
        if self.tp != 1 and not at_tp1:
            return None
        nbytes = streamed_experts * self.cpu_bytes_per_expert
        steps = self._pipeline_step_fits.get(threads)
        pts = self._pipeline_points[threads]
        if steps is not None and not self._pipeline_own[threads]:  # another layer's size: steps and bytes apart
            t = steps((1.0, streamed_experts, nbytes))
        elif len(pts) > 1 and pts[0][0] <= nbytes <= pts[-1][0]:  # inside the measured range: the points
            return interp_loglog([x for x, _ in pts], [y for _, y in pts], nbytes) * self._pipeline_driver_ratio(
                threads
            )
        else:
            t = self._pipeline_extrapolations[threads](copy_features(nbytes))
        return max(t * self._pipeline_driver_ratio(threads), self._copy_floor_ms(streamed_experts))

    def _copy_floor_ms(self, streamed_experts: int) -> float:
        """The floor under a layer load read off a fit rather than this layer's own points: every
        streamed expert crosses the link (stage B, one whole expert over one link as at TP 1, from the
        host-to-device curve) and, for int4, is repacked on the GPU (stage C), one expert a step. A
        pipeline overlaps its stages but cannot finish before its copies have; a fit over other layers'
        loops can promise less when a disturbed point bends it. Stage A's write is left out: the
        quick probe times it at two small expert sizes, where one disturbed timing bends its line
        too (docs/cost-model.md#the-copy-floor)."""
        full = self.gpu_bytes_per_expert * self.tp
        return streamed_experts * max(self.h2d_ms(full), self.stage_c_ms(full))

    @property
    def _sglang_loop(self) -> bool:
        """The predicted layerwise load is sglang-kt's own loop (a server's, or a run measured in it)."""
        return self.pipeline_driver in (None, SGLANG_KT_DRIVER)

    def _pipeline_driver_ratio(self, threads: int) -> float:
        """The full layer's time in the configuration the predicted path runs over the time of the
        configuration the curve holds, both measured by the pipeline probe at `threads` on the same
        layer (the full-layer point's `configs`). The configuration: `pipeline_driver`'s fastest when
        one is asked for (the path runner's), the fastest of all for FASTEST_PIPELINE, else sglang-kt's
        own (SGLANG_KT_PIPELINE). 1.0 when the curve's configuration is that one, or the probe did not
        try it. The probe times its curves in sglang-kt's loop since 2026-12-05 (a server's
        prediction reads them as measured); before, in the fastest configuration it found, and on
        the H200 box sglang-kt's loop took 1.09-1.17x that at 11 and 13 threads (the stream driver's
        there); at one stage A worker per core but one, the stream driver's CUDA callback thread
        starves (docs/sglang-kt.md#the-cpuinfer-thread-cliff): at 15 threads its best layer took
        1.1-1.6x the host loop's."""
        if threads not in self._pipeline_driver_ratios:
            ratio = 1.0
            # the model's own layer where measured: the ratio is a property of the layer's loop
            for c in self._pipeline_own.get(threads) or self._pipeline_curves.get(threads, []):
                full = [pt for pt in c.points if pt.extra.get("configs")]
                if not full or not full[-1].extra.get("layer_ms"):
                    continue
                pt = full[-1]
                configs = pt.extra["configs"]
                if self.pipeline_driver == FASTEST_PIPELINE:
                    target_ms = min((v["layer_ms"] for v in configs.values() if v.get("layer_ms")), default=None)
                    what = "the fastest configuration the probe tried"
                elif self._sglang_loop:
                    target_ms = configs.get(SGLANG_KT_PIPELINE, {}).get("layer_ms")
                    what = "sglang-kt 0.7.2's loop (host, 2 slots, one expert a step)"
                else:
                    same = [
                        v["layer_ms"]
                        for label, v in configs.items()
                        if _label_driver(label) == self.pipeline_driver and v.get("layer_ms")
                    ]
                    target_ms = min(same, default=None)
                    what = f"the {self.pipeline_driver} driver's best configuration"
                if target_ms:
                    ratio = target_ms / pt.extra["layer_ms"]
                    if abs(ratio - 1) > 0.02:
                        self.notes.append(
                            f"layerwise load at {threads} threads: {what} took {ratio:.2f}x the "
                            "configuration of the profile's pipeline curve on the same layer"
                        )
            self._pipeline_driver_ratios[threads] = ratio
        return self._pipeline_driver_ratios[threads]

    def _overlap_ratio(self) -> float:
        """Layer time over the slowest stage alone, the median over the profile's pipeline
        measurements: of sglang-kt's configuration (SGLANG_KT_PIPELINE, from the full-layer points'
        `configs`) for a server's prediction, of the curves' own configuration otherwise."""
        points = [pt for c in self.profile.curves_of("pipeline") for pt in c.points]
        sglang = [
            v["overlap"]
            for pt in points
            if (v := pt.extra.get("configs", {}).get(SGLANG_KT_PIPELINE, {})).get("overlap")
        ]
        ratios = (
            sglang
            if self._sglang_loop and sglang
            else [pt.extra["overlap_ratio"] for pt in points if "overlap_ratio" in pt.extra]
        )
        if ratios:
            ratios.sort()
            return float(ratios[len(ratios) // 2])
        self.notes.append(f"pipeline overlap not measured; assumed layer time = {DEFAULT_OVERLAP_RATIO}x slowest stage")
        return DEFAULT_OVERLAP_RATIO


def _pipeline_expert_bytes(c: Curve) -> float | None:
    """Bytes of one expert of the layer a pipeline curve streamed (its method's host format), None
    where the curve does not name the layer's shape (its params' hidden and inter are optional)."""
    h, i = c.params.get("hidden"), c.params.get("inter")
    if not h or not i or c.params.get("method") not in METHODS:
        return None
    return host_bytes_per_expert(get_method(c.params["method"]).cpu_format, int(h), int(i))


def _same_expert_bytes(c: Curve, expert_bytes: float) -> bool:
    e = _pipeline_expert_bytes(c)
    return e is not None and abs(e / expert_bytes - 1) < 0.02


# Pipeline curves of at least this many distinct expert sizes separate a cost per step from a cost per byte.
PIPELINE_STEP_SIZES = 2


def _fit_pipeline_steps(curves: list[Curve]) -> LinearFit | None:
    """The layerwise load against (1, experts streamed, bytes streamed) over pipeline curves of
    `PIPELINE_STEP_SIZES` expert sizes or more (one thread count, one method), None with fewer. Within
    one layer the bytes streamed are the experts streamed times one expert's bytes, so a cost per
    step (the loop's host waits and launches, each copy's and write's fixed cost) and a cost per byte
    are one column; layers of other expert sizes tell them apart, and a layer none of them measured is
    read from both (docs/cost-model.md#one-machine-instance-seven-models)."""
    sized = [(c, e) for c in curves if (e := _pipeline_expert_bytes(c))]
    if len(sized) < len(curves) or len({round(e) for _, e in sized}) < PIPELINE_STEP_SIZES:
        return None
    rows, ys = [], []
    for c, e in sized:
        for p in c.points:
            rows.append((1.0, p.x / e, p.x))
            ys.append(p.t_ms)
    return fit_nonneg(("overhead_ms", "ms_per_expert", "ms_per_byte"), rows, ys)


def fit_curves(curves: list[Curve], row: Callable[[Curve, float], tuple] | None = None) -> LinearFit:
    """Fit every point of `curves` (one kind) by that kind's features (`kttune.hw.curve_kinds`: its
    `fit` row, or `row` where the caller knows more of the curves, such as a profile's own cost per
    output element; the one loop every component shares)."""
    fit = curve_kind(curves[0].kind).fit
    assert fit is not None and all(c.kind == curves[0].kind for c in curves)
    row = row or fit.row
    rows, ys = [], []
    for c in curves:
        for pt in c.points:
            rows.append(row(c, pt.x))
            ys.append(pt.t_ms)
    if "ms_per_flop_vector" in fit.names:
        return _fit_kernel_split(fit.names, rows, ys)
    return fit_nonneg(fit.names, rows, ys)


def _fit_kernel_split(names: tuple[str, ...], rows: list[tuple], ys: list[float]) -> LinearFit:
    """A kt-kernel MoE fit whose flops are split by the GEMM kernel that ran them
    (`kttune.hw.features.kt_gemm_split`). Where the points hold flops of one kernel only (a class
    with one kernel, or no point measured on one side of the switch), the two flop rates are one:
    fitted as one column and both set to it, so a length on the unmeasured side is not predicted
    as free of compute."""
    vec, mat = names.index("ms_per_flop_vector"), names.index("ms_per_flop")
    if any(r[vec] > 0 for r in rows) and any(r[mat] > 0 for r in rows):
        return fit_nonneg(names, rows, ys)
    keep = [i for i in range(len(names)) if i != vec]
    merged = [tuple(r[i] + (r[vec] if i == mat else 0.0) for i in keep) for r in rows]
    one = fit_nonneg(tuple(names[i] for i in keep), merged, ys)
    coef = dict(zip(one.names, one.coef))
    coef["ms_per_flop_vector"] = coef["ms_per_flop"]
    return LinearFit(names, tuple(coef[n] for n in names), one.rel_rmse, one.n_points)


# A thread count whose nearest measured expert shape is this much nearer the model's (in expert size)
# lends its shape to a count measured only farther away (Components._shape_from_other_threads).
SHAPE_REACH = 2.0
# ... and a count whose shapes are all this much narrower than the model's expert borrows from any count
# that measured a nearer one: a narrow shape's rate, extrapolated to a wider expert, over-predicts its
# time (Qwen3-Next's 3.1M-parameter experts from the 1.6M-parameter small shape: 2.5x at 8,192 tokens;
# docs/cost-model.md#cpu-experts-at-other-thread-counts).
NARROW_REACH = 1.5


def _same_pool(curves: list[Curve], pools: int, numa: tuple[int, ...]) -> list[Curve]:
    """The curves of `pools` sub-pools on the NUMA nodes `numa`; failing that, of `pools` sub-pools;
    failing that, all."""
    same = [
        c
        for c in curves
        if c.params.get("threadpools", 1) == pools and tuple(c.params.get("numa_nodes") or ()) == tuple(numa)
    ]
    return same or [c for c in curves if c.params.get("threadpools", 1) == pools] or curves


def shape_distance(c: Curve, params_per_expert: int) -> float:
    """How far a curve's expert is from one of `params_per_expert` parameters: |log| of their ratio."""
    return abs(math.log(c.shape.params_per_expert / params_per_expert))


def nearest_shapes(curves: list[Curve], params_per_expert: int, span: float = 8.0) -> list[Curve]:
    """The curves whose expert size is within `span`x of the one nearest the model's: a tiny quick
    shape runs the kernels far from their efficient regime, so it only enters the fit when nothing
    closer was measured."""
    best = min(shape_distance(c, params_per_expert) for c in curves)
    return [c for c in curves if shape_distance(c, params_per_expert) <= best + math.log(span)]


def _label_driver(label: str) -> str:
    """The driver of a pipeline configuration label (`kttune.runner.pipeline.PipelineConfig.label`:
    "slots=2,group=2,driver=stream"; no driver named is the host loop)."""
    for part in label.split(","):
        key, _, value = part.partition("=")
        if key == "driver":
            return value
    return "host"


def _bits(fmt: str) -> float:
    return FORMATS[fmt].weight_bits


def _residual_table(
    fit: LinearFit,
    curve: Curve,
    switch_above: int | None = None,
    row: Callable[[Curve, float], tuple] | None = None,
):
    """Measured / fitted on a curve of the model's own shape, as a function of tokens: keeps what the
    fit's terms cannot express (cache effects) where it was measured, and holds the last ratio past
    the largest measured size. With `switch_above` (the length above which the kernel that measured
    the curve switches kernels, `kttune.spec.kt_classes.kt_matmul_above`), a length is read among the
    points on its own side of the switch where that side has any: a ratio measured on one kernel
    says nothing of the other. `row`: the features the fit was made with (default: the kind's)."""
    row = row or curve_kind(curve.kind).fit.row
    pts = []
    for pt in sorted(curve.points, key=lambda q: q.x):
        f = fit(row(curve, pt.x))
        if f > 0:
            pts.append((pt.x, pt.t_ms / f))
    if not pts:
        return None
    # each side's (xs, ratios), split once: the table is read on the search's hot path
    sides = {}
    for below in (True, False):
        side = [p for p in pts if switch_above is None or (p[0] <= switch_above) == below] or pts
        sides[below] = ([x for x, _ in side], [r for _, r in side])

    def table(t: float) -> float:
        xs, ratios = sides[switch_above is None or t <= switch_above]
        return interp_loglog(xs, ratios, t) if t <= xs[-1] else ratios[-1]

    return table
