"""What each model family (`model_type` of the language model) does differently, one record per
family: the config reader (`kttune.spec.hf_config`) resolves a config.json against its family's
record into a `ModelSpec`, and everything downstream (the memory and cost models, the path runner's
layers and router) reads the resolved spec, never the family name.

Most keys are read the same way for every family (the lookup orders below, docs/model-configs.md);
a record says only where a family departs from them. A `model_type` without a record is read by
the generic rules, with a note that kttune was not tested on it. Adding a family is adding a record
here (docs/howto-add-a-model-family.md). Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# Lookup orders every family shares (the first key present wins; docs/model-configs.md).
EXPERT_COUNT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")
TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk")
LAYER_COUNT_KEYS = ("num_hidden_layers", "num_layers", "n_layers")
SHARED_EXPERT_WIDTH_KEYS = ("shared_expert_intermediate_size", "shared_intermediate_size")
# How routers score experts (HF `scoring_func`); the path runner implements these
# (kttune.kernels.decoder.route; sqrtsoftplus: DeepSeek-V4's sqrt(softplus(logit))).
ROUTER_SCORINGS = ("softmax", "sigmoid", "sqrtsoftplus")
# Per-head or whole-layer RMSNorm of q and k (HF `qk_norm_type`; "" = none).
QK_NORMS = ("", "per_head", "per_layer")


@dataclass(frozen=True)
class FamilyRules:
    """One family's departures from the generic rules. Each default is the generic rule."""

    model_type: str
    tested: bool = True  # a shipped config of this family is read by the tests (else the reader notes it)
    # attention: MLA (DeepSeek's latent attention) whatever the config says; any config with a
    # `kv_lora_rank` > 0 is read as MLA too
    mla: bool = False
    # the per-expert FFN width: the first of these keys present
    expert_width_keys: tuple[str, ...] = ("moe_intermediate_size", "intermediate_size")
    # the dense layers' FFN width (None: the family has no dense FFN and `intermediate_size` is the
    # expert width)
    dense_width_key: str | None = "intermediate_size"
    # shared experts given as a count of expert-wide MLPs (None: only as a width,
    # SHARED_EXPERT_WIDTH_KEYS)
    shared_expert_count_key: str | None = "n_shared_experts"
    # a sigmoid gate of width hidden on the shared expert's output, per MoE layer (Qwen2-MoE, Qwen3-Next)
    shared_expert_gate: bool = False
    # router defaults where the config is silent: scores (`scoring_func`), a per-expert score
    # correction bias added for the choice only (DeepSeek-V3 `noaux_tc`, `e_score_correction_bias`),
    # a bias in the gate Linear (gpt-oss)
    router_scoring: str = "softmax"
    router_correction_bias: bool = False
    router_gate_bias: bool = False
    # RMSNorm on each q and k head whatever the config says (Qwen3); others norm when `use_qk_norm`
    qk_norm: bool = False
    # q_proj also projects an output gate of q's size (default of `attn_output_gate`)
    attention_output_gate: bool = False
    # gpt-oss: a learned sink per head and an o_proj bias, with `attention_bias`
    attention_sinks: bool = False
    # hybrid linear attention: every n-th layer full attention, the rest linear (default of
    # `full_attention_interval` when the config lacks it; 0: only a config that has the key)
    full_attention_interval: int = 0
    # SGLang runs the family with full attention whatever `sliding_window` says (a note is added)
    sliding_window_ignored: bool = False
    # DeepSeek-V4's compressed sparse attention and hyper-connections (`compress_ratios`, `hc_mult`:
    # kttune.spec.compressed_attention); a config of another family with those keys is refused
    compressed_attention: bool = False


# The families whose `intermediate_size` is the per-expert width (they have no moe_intermediate_size
# and no dense layers; n_shared_experts means nothing to them).
_WIDTH_IN_INTERMEDIATE_SIZE = dict(
    expert_width_keys=("intermediate_size",), dense_width_key=None, shared_expert_count_key=None
)
# DeepSeek-V3's router: sigmoid scores, a correction bias, grouped top-k from n_group / topk_group.
_NOAUX_TC = dict(router_scoring="sigmoid", router_correction_bias=True)

FAMILIES: dict[str, FamilyRules] = {
    f.model_type: f
    for f in (
        FamilyRules("deepseek_v3", mla=True, **_NOAUX_TC),
        FamilyRules("deepseek_v2", mla=True),
        FamilyRules("deepseek_v32", mla=True, **_NOAUX_TC),  # V3.2: V3's router (sglang deepseek_v2.py)
        # V4: MQA over a window, compressed entries and an indexer; sqrt-softplus scores with V3's
        # correction bias (sglang deepseek_v4.py; docs/deepseek-v4.md)
        FamilyRules("deepseek_v4", compressed_attention=True, **_NOAUX_TC),
        FamilyRules("kimi_k2", mla=True, **_NOAUX_TC),
        FamilyRules("glm4_moe", **_NOAUX_TC),
        # GLM-5.x: GLM-4's body with DeepSeek-V3's MLA and V3.2's sparse-attention indexer (sglang deepseek_v2.py)
        FamilyRules("glm_moe_dsa", mla=True, **_NOAUX_TC),
        FamilyRules("qwen3_moe", qk_norm=True),
        # Qwen3-VL MoE: Qwen3-MoE's language model under `text_config` (sglang qwen3_vl_moe.py)
        FamilyRules("qwen3_vl_moe_text", qk_norm=True),
        FamilyRules(
            "qwen3_next", qk_norm=True, attention_output_gate=True, full_attention_interval=4, shared_expert_gate=True
        ),
        # Qwen3.5 MoE (Qwen3_5MoeForConditionalGeneration): Qwen3-Next's layer under `text_config`, whose
        # model_type is qwen3_5_moe_text (sglang configs/qwen3_5.py subclasses Qwen3NextConfig); the
        # catalog ships three of its configs
        *(
            FamilyRules(
                t,
                qk_norm=True,
                attention_output_gate=True,
                full_attention_interval=4,
                shared_expert_gate=True,
            )
            for t in ("qwen3_5_moe_text", "qwen3_5_moe")
        ),
        FamilyRules("qwen2_moe", shared_expert_gate=True),
        FamilyRules("minimax_m2", **_WIDTH_IN_INTERMEDIATE_SIZE),
        FamilyRules("minimax", **_WIDTH_IN_INTERMEDIATE_SIZE),
        FamilyRules("gpt_oss", router_gate_bias=True, attention_sinks=True, **_WIDTH_IN_INTERMEDIATE_SIZE),
        FamilyRules("mixtral", sliding_window_ignored=True, **_WIDTH_IN_INTERMEDIATE_SIZE),
    )
}

GENERIC = FamilyRules("generic", tested=False)


def family_rules(model_type: str) -> FamilyRules:
    """The record of `model_type`, or the generic rules under that name (`tested` False)."""
    return FAMILIES.get(model_type) or replace(GENERIC, model_type=model_type)


def known_families() -> tuple[str, ...]:
    """The families kttune was tested on (their configs ship in the catalog or the tests)."""
    return tuple(k for k, f in FAMILIES.items() if f.tested)
