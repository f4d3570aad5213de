"""The config.json reader against the shipped raw configs of every family (docs/model-configs.md)."""

from __future__ import annotations

import copy

import pytest

from kttune.errors import UserError
from kttune.spec.catalog import catalog_config
from kttune.spec.hf_config import checkpoint_format_from_quant, non_expert_params, spec_from_config


def spec(name: str, **kw):
    return spec_from_config(catalog_config(name), name, "test", **kw)


# name: (family, E, k, I, MoE layers, first MoE layer, shared width, dense width, attention, head_dim,
#        v_head_dim, full, sliding, linear, format, method)  -- docs/model-configs.md
FAMILIES = {
    "kimi-k2-instruct": ("kimi_k2", 384, 8, 2048, 60, 1, 2048, 18432, "mla", 192, 128, 61, 0, 0, "fp8_block", "FP8"),
    "kimi-k2-thinking": ("kimi_k2", 384, 8, 2048, 60, 1, 2048, 18432, "mla", 192, 128, 61, 0, 0, "int4_g32", "RAWINT4"),
    "deepseek-v3": ("deepseek_v3", 256, 8, 2048, 58, 3, 2048, 18432, "mla", 192, 128, 61, 0, 0, "fp8_block", "FP8"),
    "deepseek-v3.1": ("deepseek_v3", 256, 8, 2048, 58, 3, 2048, 18432, "mla", 192, 128, 61, 0, 0, "fp8_block", "FP8"),
    "deepseek-r1": ("deepseek_v3", 256, 8, 2048, 58, 3, 2048, 18432, "mla", 192, 128, 61, 0, 0, "fp8_block", "FP8"),
    "minimax-m2": ("minimax_m2", 256, 8, 1536, 62, 0, 0, 0, "gqa", 128, 128, 62, 0, 0, "fp8_block", "FP8"),
    "minimax-m2.1": ("minimax_m2", 256, 8, 1536, 62, 0, 0, 0, "gqa", 128, 128, 62, 0, 0, "fp8_block", "FP8"),
    "qwen3-235b-a22b": ("qwen3_moe", 128, 8, 1536, 94, 0, 0, 12288, "gqa", 128, 128, 94, 0, 0, "bf16", "BF16"),
    "qwen3-235b-a22b-fp8": ("qwen3_moe", 128, 8, 1536, 94, 0, 0, 12288, "gqa", 128, 128, 94, 0, 0, "fp8_block", "FP8"),
    "qwen3-30b-a3b": ("qwen3_moe", 128, 8, 768, 48, 0, 0, 6144, "gqa", 128, 128, 48, 0, 0, "bf16", "BF16"),
    "qwen3-30b-a3b-fp8": ("qwen3_moe", 128, 8, 768, 48, 0, 0, 6144, "gqa", 128, 128, 48, 0, 0, "fp8_block", "FP8"),
    "qwen3-next-80b-a3b": ("qwen3_next", 512, 10, 512, 48, 0, 512, 5120, "gqa", 256, 256, 12, 0, 36, "bf16", "BF16"),
    "glm-4.7": ("glm4_moe", 160, 8, 1536, 89, 3, 1536, 12288, "gqa", 128, 128, 92, 0, 0, "bf16", "BF16"),
    "glm-4.5-air": ("glm4_moe", 128, 8, 1408, 45, 1, 1408, 10944, "gqa", 128, 128, 46, 0, 0, "bf16", "BF16"),
    "gpt-oss-20b": ("gpt_oss", 32, 4, 2880, 24, 0, 0, 0, "gqa", 64, 64, 12, 12, 0, "mxfp4", "MXFP4"),
    "gpt-oss-120b": ("gpt_oss", 128, 4, 2880, 36, 0, 0, 0, "gqa", 64, 64, 18, 18, 0, "mxfp4", "MXFP4"),
    "mixtral-8x7b": ("mixtral", 8, 2, 14336, 32, 0, 0, 0, "gqa", 128, 128, 32, 0, 0, "bf16", "BF16"),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_fields(name):
    fam, e, k, i, n_moe, first, shared, dense, attn, hd, vhd, full, sliding, linear, fmt, method = FAMILIES[name]
    s = spec(name)
    assert s.family == fam
    assert (s.num_experts, s.top_k, s.moe_intermediate_size) == (e, k, i)
    assert s.num_experts != s.top_k  # never read num_experts_per_tok as E (kt tuna_engine bug)
    assert s.num_moe_layers == n_moe and s.moe_layer_ids[0] == first and s.moe_layer_ids[-1] == s.num_layers - 1
    assert s.shared_expert_intermediate_size == shared
    assert s.dense_intermediate_size == dense
    assert (s.attention, s.head_dim, s.v_head_dim) == (attn, hd, vhd)
    assert (len(s.full_attention_layer_ids), len(s.sliding_layer_ids), len(s.linear_attention_layer_ids)) == (
        full,
        sliding,
        linear,
    )
    assert (s.checkpoint_format, s.default_method) == (fmt, method)
    # every layer is exactly one of full / sliding / linear
    ids = s.full_attention_layer_ids + s.sliding_layer_ids + s.linear_attention_layer_ids
    assert sorted(ids) == list(range(s.num_layers))
    assert s.non_expert_params_estimate > 0 and s.non_expert_bytes > 0


def test_mtp_layers_excluded():
    # num_hidden_layers excludes MTP / next-n layers: DeepSeek 61 (+1 MTP), GLM-4.7 92 (+1), MiniMax 62 (+3)
    assert spec("deepseek-v3").num_layers == 61
    assert spec("glm-4.7").num_layers == 92
    assert spec("minimax-m2").num_layers == 62


def test_mla_fields():
    s = spec("deepseek-v3")
    assert (s.kv_lora_rank, s.q_lora_rank, s.qk_rope_head_dim) == (512, 1536, 64)
    assert s.num_attention_heads == 128 and s.kv_layer_count == 61
    k2 = spec("kimi-k2-instruct")
    assert k2.num_attention_heads == 64 and k2.max_position_embeddings == 131072


def test_gpt_oss_sliding_layers():
    s = spec("gpt-oss-120b")
    assert s.sliding_window == 128
    assert s.sliding_layer_ids == tuple(range(0, 36, 2)) and s.full_attention_layer_ids == tuple(range(1, 36, 2))


def test_qwen3_next_every_fourth_layer_holds_kv():
    s = spec("qwen3-next-80b-a3b")
    assert s.full_attention_layer_ids == tuple(range(3, 48, 4))
    assert s.kv_layer_count == 12 and s.num_kv_heads == 2


def test_qwen3_sliding_window_key_ignored_when_disabled():
    cfg = catalog_config("qwen3-30b-a3b")
    assert cfg["use_sliding_window"] is False and "sliding_window" in cfg
    s = spec_from_config(cfg, "q", "t")
    assert s.sliding_layer_ids == () and s.sliding_window == 0


def test_text_config_nesting_kimi_k25_style():
    inner = catalog_config("kimi-k2-thinking")
    qc = inner.pop("quantization_config")
    inner.pop("torch_dtype", None)
    inner["dtype"] = "bfloat16"
    outer = {
        "model_type": "kimi_k25",
        "architectures": ["KimiK25ForConditionalGeneration"],
        "text_config": inner,
        "quantization_config": qc,
        "vision_config": {"hidden_size": 1152},
    }
    s = spec_from_config(outer, "k25", "t")
    assert s.family == "kimi_k2" and s.num_experts == 384 and s.attention == "mla"
    assert (s.checkpoint_format, s.default_method) == ("int4_g32", "RAWINT4")
    assert any("text_config" in n for n in s.notes)


def test_minimax_key_traps():
    cfg = catalog_config("minimax-m2")
    cfg["mlp_intermediate_size"] = 8192  # original revision: unrelated to the experts
    # transformers-v5 style revision: rope_parameters instead of rope_theta/rotary_dim, dtype not torch_dtype
    cfg.pop("rope_theta", None)
    cfg.pop("rotary_dim", None)
    cfg["rope_parameters"] = {"partial_rotary_factor": 0.5, "rope_theta": 5e6, "rope_type": "default"}
    cfg["dtype"] = "bfloat16"
    s = spec_from_config(cfg, "m2", "t")
    assert s.moe_intermediate_size == 1536 and s.dense_intermediate_size == 0
    assert s.shared_expert_intermediate_size == 0 and s.non_expert_dtype_bytes == 2


def test_dtype_spellings():
    cfg = catalog_config("qwen3-30b-a3b")
    cfg.pop("torch_dtype")
    cfg["dtype"] = "float32"
    assert spec_from_config(cfg, "q", "t").non_expert_dtype_bytes == 4
    assert spec("gpt-oss-20b").non_expert_dtype_bytes == 2  # neither key: bf16


def test_moe_layer_rules():
    cfg = catalog_config("deepseek-v3")
    cfg["moe_layer_freq"] = 2
    s = spec_from_config(cfg, "d", "t")
    assert s.moe_layer_ids == tuple(i for i in range(3, 61) if i % 2 == 0)
    q = catalog_config("qwen3-30b-a3b")
    q["decoder_sparse_step"] = 2
    q["mlp_only_layers"] = [1, 5]
    s = spec_from_config(q, "q", "t")
    assert s.moe_layer_ids == tuple(i for i in range(48) if (i + 1) % 2 == 0 and i not in (1, 5))
    assert s.non_expert_params_estimate > spec("qwen3-30b-a3b").non_expert_params_estimate  # dense MLPs count


def test_top_k_from_experts_per_token():
    cfg = catalog_config("gpt-oss-20b")
    cfg.pop("num_experts_per_tok")
    assert spec_from_config(cfg, "g", "t").top_k == cfg["experts_per_token"] == 4


# ---- dense models ------------------------------------------------------------------------------------

LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    "extra",
    [{}, {"num_experts_per_tok": 2}, {"num_local_experts": 1, "num_experts_per_tok": 1}, {"num_experts": 0}],
)
def test_dense_model_rejected(extra):
    with pytest.raises(UserError, match="is a dense model \\(no routed experts\\); kttune tunes MoE models"):
        spec_from_config({**LLAMA, **extra}, "llama-3.1-8b", "t")


def test_all_layers_dense_rejected():
    cfg = catalog_config("qwen3-30b-a3b")
    cfg["mlp_only_layers"] = list(range(48))
    with pytest.raises(UserError, match="dense model"):
        spec_from_config(cfg, "q", "t")


def test_missing_key_is_user_error():
    cfg = catalog_config("mixtral-8x7b")
    del cfg["hidden_size"]
    with pytest.raises(UserError, match="hidden_size"):
        spec_from_config(cfg, "m", "t")


# ---- quantization_config dialects ----------------------------------------------------------------------


def _ct(num_bits, type_, strategy, group_size=None):
    w = {"num_bits": num_bits, "type": type_, "symmetric": True, "strategy": strategy, "dynamic": False}
    if group_size:
        w["group_size"] = group_size
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": w}},
        "ignore": ["lm_head"],
    }


@pytest.mark.parametrize(
    "qc, fmt, method",
    [
        (None, "bf16", "BF16"),
        ({}, "bf16", "BF16"),
        (
            {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128], "activation_scheme": "dynamic"},
            "fp8_block",
            "FP8",
        ),
        ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8_channel", "FP8_PERCHANNEL"),
        (_ct(8, "float", "channel"), "fp8_channel", "FP8_PERCHANNEL"),
        (_ct(4, "int", "group", 32), "int4_g32", "RAWINT4"),
        ({"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]}, "mxfp4", "MXFP4"),
        ({"quant_method": "mxfp8"}, "mxfp8", "MXFP8"),
        ({"quant_method": "fp8", "weight_block_size": [1, 32], "scale_fmt": "ue8m0"}, "mxfp8", "MXFP8"),
        ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, "gptq_int4", "GPTQ_INT4"),
    ],
)
def test_method_detection(qc, fmt, method):
    cfg = catalog_config("qwen3-30b-a3b")
    if qc is not None:
        cfg["quantization_config"] = qc
    s = spec_from_config(cfg, "q", "t")
    assert (s.checkpoint_format, s.default_method) == (fmt, method)


@pytest.mark.parametrize(
    "qc, named",
    [
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "'awq'"),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "'bitsandbytes'"),
        (_ct(4, "int", "group", 128), "compressed-tensors"),
        ({"quant_method": "gptq", "bits": 8}, "gptq"),
    ],
)
def test_unknown_quantization_names_it_and_asks_for_kt_method(qc, named):
    cfg = {**catalog_config("qwen3-30b-a3b"), "quantization_config": qc}
    with pytest.raises(UserError) as ei:
        spec_from_config(cfg, "q", "t")
    assert named in ei.value.problem and "method" in ei.value.params  # the CLI spells it --kt-method
    # with an explicit method the model loads
    s = spec_from_config(cfg, "q", "t", method="AMXINT4")
    assert s.default_method == "AMXINT4" and s.notes


def test_method_override():
    s = spec("deepseek-v3", method="amxint4")
    assert s.default_method == "AMXINT4" and s.checkpoint_format == "fp8_block"
    s = spec("qwen3-30b-a3b", method="fp8")  # native method reading another checkpoint: noted
    assert s.default_method == "FP8" and s.checkpoint_format == "bf16" and any("--kt-weight-path" in n for n in s.notes)
    with pytest.raises(UserError, match="unknown KT method 'INT3'"):
        spec("deepseek-v3", method="INT3")


def test_checkpoint_format_helper():
    assert checkpoint_format_from_quant(catalog_config("kimi-k2-thinking")) == "int4_g32"
    assert checkpoint_format_from_quant(catalog_config("gpt-oss-120b")) == "mxfp4"


# ---- non-expert estimates vs published totals (docs/model-configs.md#sizes-derived-from-the-configs; model cards) ------------------------------

# name: (published total params, published routed-expert params or None), in billions
PUBLISHED = {
    "deepseek-v3": (671, 654),  # DeepSeek-V3 report: 671B total (MTP excluded), 654B routed
    "qwen3-30b-a3b": (30.5, 29.0),  # Qwen3 card: 30.5B total
    "qwen3-235b-a22b": (235, 227),  # Qwen3 card: 235B total
    "glm-4.5-air": (106, 100),  # GLM-4.5 report: 106B total
    "gpt-oss-120b": (116.83, 114.71),  # OpenAI model card: 116.83B total, 114.71B MLP
    "gpt-oss-20b": (20.91, 19.12),  # OpenAI model card: 20.91B total, 19.12B MLP
    "mixtral-8x7b": (46.7, 45.1),  # Mistral: 46.7B total
    "minimax-m2": (229, 224.7),  # MiniMax: ~229-230B total
    "glm-4.7": (355, 336),  # GLM-4.5 class: 355B total (incl. its 1 MTP layer)
    "kimi-k2-instruct": (1026, 1014.7),  # Kimi K2 report: ~1.03-1.04T total; 1T marketed
    "qwen3-next-80b-a3b": (80, 77.3),  # Qwen3-Next card: 80B total
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_total_params_match_published(name):
    total_b, routed_b = PUBLISHED[name]
    s = spec(name)
    routed = s.params_per_expert * s.num_experts * s.num_moe_layers
    assert routed / 1e9 == pytest.approx(routed_b, rel=0.02)
    assert (routed + s.non_expert_params_estimate) / 1e9 == pytest.approx(total_b, rel=0.03)


@pytest.mark.parametrize(
    "name, non_expert_b",
    [
        ("deepseek-v3", 671 - 653.9),  # 17B
        ("qwen3-30b-a3b", 30.5 - 29.0),
        ("qwen3-235b-a22b", 235 - 227.1),
        ("gpt-oss-120b", 0.96 + 1.16),  # OpenAI card: attention 0.96B + embed/unembed 1.16B
        ("gpt-oss-20b", 0.64 + 1.16),
        ("mixtral-8x7b", 46.7 - 45.1),
        ("minimax-m2", 229 - 224.7),
    ],
)
def test_non_expert_estimate_within_10_percent(name, non_expert_b):
    assert spec(name).non_expert_params_estimate / 1e9 == pytest.approx(non_expert_b, rel=0.10)


@pytest.mark.parametrize(
    "name, active_b",
    [
        ("deepseek-v3", 37),
        ("kimi-k2-instruct", 32.6),
        ("qwen3-235b-a22b", 22),
        ("qwen3-30b-a3b", 3.3),
        ("mixtral-8x7b", 12.9),
        ("glm-4.7", 32),
    ],
)
def test_active_params_match_published(name, active_b):
    s = spec(name)
    active = s.non_expert_params_estimate + s.top_k * s.params_per_expert * s.num_moe_layers
    assert active / 1e9 == pytest.approx(active_b, rel=0.10)


def test_non_expert_parts_deepseek():
    p = non_expert_params(catalog_config("deepseek-v3"))
    assert p.embedding == p.lm_head == 129280 * 7168
    assert p.dense_mlp == 3 * 3 * 7168 * 18432
    assert p.shared_experts == 58 * 3 * 7168 * 2048
    assert p.total == spec("deepseek-v3").non_expert_params_estimate


def test_non_expert_bytes_follow_the_checkpoint():
    # FP8 checkpoints quantize attention and shared experts: ~1 byte per param there
    ds = spec("deepseek-v3")
    assert ds.non_expert_params_estimate * 1.0 < ds.non_expert_bytes < ds.non_expert_params_estimate * 1.25
    # Kimi-K2-Thinking's compressed-tensors ignore list keeps self_attn/shared/dense in bf16
    k2t = spec("kimi-k2-thinking")
    assert k2t.non_expert_bytes == k2t.non_expert_params_estimate * 2
    # gpt-oss MXFP4 leaves self_attn unconverted
    g = spec("gpt-oss-120b")
    assert g.non_expert_bytes == g.non_expert_params_estimate * 2
    q = spec("qwen3-30b-a3b")
    assert q.non_expert_bytes == q.non_expert_params_estimate * 2


def test_spec_from_config_does_not_mutate_input():
    cfg = catalog_config("kimi-k2-thinking")
    before = copy.deepcopy(cfg)
    spec_from_config(cfg, "k", "t")
    assert cfg == before
