"""The physical features cost terms are linear in. They live in `kttune.hw.features`, beside the curve
kinds whose fits use them (kttune.hw.curve_kinds), so that a curve is fitted by the same features
where it is read and where it is predicted; this module names them for the cost model."""

from kttune.hw.features import (
    ATTENTION_FEATURES,
    COPY_FEATURES,
    CPU_MOE_FEATURES,
    GEMM_FEATURES,
    MOE_FEATURES,
    attention_prefill_flops,
    causal_conv1d_prefill_bytes,
    causal_pairs,
    copy_features,
    expected_experts_touched,
    gated_delta_rule_prefill_work,
    gemm_features,
    kt_gemm_split,
    matrix_work_per_flop,
    mla_latent_attention_flops,
    moe_features,
    sparse_attention_prefill_work,
)

__all__ = [
    "ATTENTION_FEATURES",
    "COPY_FEATURES",
    "CPU_MOE_FEATURES",
    "GEMM_FEATURES",
    "MOE_FEATURES",
    "attention_prefill_flops",
    "causal_conv1d_prefill_bytes",
    "causal_pairs",
    "copy_features",
    "expected_experts_touched",
    "gated_delta_rule_prefill_work",
    "gemm_features",
    "kt_gemm_split",
    "matrix_work_per_flop",
    "mla_latent_attention_flops",
    "moe_features",
    "sparse_attention_prefill_work",
]
