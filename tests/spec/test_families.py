"""The family table (kttune/spec/families.py) against the shipped config.json files: each rule is
checked on what the config itself says (the independent reference), and an unknown family is read
by the generic rules with a note."""

from __future__ import annotations

from pathlib import Path

import pytest

from kttune.errors import UserError
from kttune.spec.catalog import catalog_config, catalog_names
from kttune.spec.families import FAMILIES, GENERIC, QK_NORMS, ROUTER_SCORINGS, family_rules, known_families
from kttune.spec.hf_config import language_config, spec_from_config
from kttune.spec.loader import read_config_json


def _spec(name: str, cfg: dict | None = None):
    return spec_from_config(cfg if cfg is not None else catalog_config(name), name, "test")


@pytest.mark.parametrize("name", catalog_names())
def test_every_catalog_family_has_a_tested_record(name):
    family = language_config(catalog_config(name))["model_type"]
    assert family in known_families() and FAMILIES[family].tested
    assert not any("not one kttune was tested on" in n for n in _spec(name).notes)


@pytest.mark.parametrize("name", catalog_names())
def test_router_is_what_config_json_says(name):
    """Where config.json names a router key, the spec's router holds its value."""
    cfg = language_config(catalog_config(name))
    r = _spec(name).router
    assert r.scoring in ROUTER_SCORINGS
    if cfg.get("scoring_func"):
        assert r.scoring == cfg["scoring_func"]
    assert r.n_group == (cfg.get("n_group") or 1) and r.topk_group == (cfg.get("topk_group") or 1)
    assert r.scaling == pytest.approx(cfg.get("routed_scaling_factor") or 1.0)
    assert r.renormalize == cfg.get("norm_topk_prob", True)
    if cfg.get("topk_method") == "noaux_tc" or cfg.get("use_routing_bias"):
        assert r.bias and r.scoring in ("sigmoid", "sqrtsoftplus")


def test_router_family_defaults_where_the_config_is_silent():
    # Kimi-K2-Thinking's config names neither scoring_func nor topk_method: the family's noaux_tc router
    cfg = catalog_config("kimi-k2-thinking")
    assert "scoring_func" not in cfg and "topk_method" not in cfg
    r = _spec("k", cfg).router
    assert (r.scoring, r.bias, r.scaling) == ("sigmoid", True, 2.827)
    assert _spec("qwen3-30b-a3b").router.scoring == "softmax" and not _spec("qwen3-30b-a3b").router.bias
    assert _spec("gpt-oss-20b").router.gate_bias


@pytest.mark.parametrize("n_group, topk_group", [(7, 4), (8, 9)])
def test_router_groups_that_cannot_split_the_experts_are_refused(n_group, topk_group):
    cfg = catalog_config("deepseek-v3")
    cfg.update(n_group=n_group, topk_group=topk_group)
    with pytest.raises(UserError, match="n_group"):
        _spec("d", cfg)


def test_unmodelled_scoring_is_noted_not_refused():
    cfg = catalog_config("deepseek-v3")
    cfg["scoring_func"] = "sparsemax"
    s = _spec("d", cfg)
    assert s.router.scoring == "sigmoid" and any("sparsemax" in n for n in s.notes)
    # DeepSeek-V4's sqrt(softplus) is one the runner implements (kttune.kernels.decoder.route)
    cfg["scoring_func"] = "sqrtsoftplus"
    assert _spec("d", cfg).router.scoring == "sqrtsoftplus" and not any("scoring" in n for n in _spec("d", cfg).notes)


def test_qk_norm_per_family_and_per_config():
    assert _spec("qwen3-30b-a3b").qk_norm == "per_head"  # the family always norms, the config is silent
    assert _spec("glm-4.5").qk_norm == "per_head"  # use_qk_norm: true
    assert _spec("glm-4.5-air").qk_norm == ""  # use_qk_norm: false
    assert _spec("minimax-m2").qk_norm == "per_layer"  # qk_norm_type: per_layer
    assert _spec("deepseek-v3").qk_norm == "" and _spec("mixtral-8x7b").qk_norm == ""
    assert all(_spec(n).qk_norm in QK_NORMS for n in catalog_names())


def test_unknown_family_reads_by_the_generic_rules_with_a_note():
    cfg = catalog_config("deepseek-v3")
    cfg["model_type"] = "deepseek_v99"
    s, ref = _spec("x", cfg), _spec("deepseek-v3")
    assert family_rules("deepseek_v99") == GENERIC.__class__(**{**GENERIC.__dict__, "model_type": "deepseek_v99"})
    assert any("not one kttune was tested on" in n for n in s.notes)
    # the generic rules read what the config says: MLA from kv_lora_rank, noaux_tc's bias from topk_method
    assert s.attention == "mla" and s.router == ref.router and s.moe_layer_ids == ref.moe_layer_ids


def test_expert_width_key_is_the_familys():
    """Mixtral's intermediate_size is its expert width; under another name the generic rules read it
    as the dense width, and find no expert width beyond it: the same key, two meanings."""
    cfg = catalog_config("mixtral-8x7b")
    assert "moe_intermediate_size" not in cfg
    s = _spec("m", cfg)
    assert (s.moe_intermediate_size, s.dense_intermediate_size) == (cfg["intermediate_size"], 0)
    cfg["model_type"] = "mixtral_like"
    g = _spec("m", cfg)
    assert g.moe_intermediate_size == g.dense_intermediate_size == cfg["intermediate_size"]


def test_every_record_names_its_own_model_type():
    assert all(k == f.model_type for k, f in FAMILIES.items())
    assert all(f.router_scoring in ROUTER_SCORINGS for f in FAMILIES.values())


def test_qwen35_nests_qwen3_nexts_layer_under_text_config():
    """Qwen3.5 MoE ships Qwen3-Next's layer (gated attention, Gated DeltaNet, gated shared expert) as
    the `text_config` of a multimodal config with `layer_types`: read under its own family record,
    it is the same model as the Qwen3-Next config it was written from."""
    inner = catalog_config("qwen3-next-80b-a3b")
    n = inner.pop("full_attention_interval")
    inner.update(
        model_type="qwen3_5_moe_text",
        layer_types=["full_attention" if (i + 1) % n == 0 else "linear_attention" for i in range(48)],
        mamba_ssm_dtype="float32",
    )
    outer = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe", "text_config": inner}
    s, ref = _spec("q35", outer), _spec("qwen3-next-80b-a3b")
    assert s.family == "qwen3_5_moe_text"
    for key in ("attention_output_gate", "qk_norm", "full_attention_layer_ids", "linear_attention", "router"):
        assert getattr(s, key) == getattr(ref, key), key
    assert s.non_expert_params_estimate == ref.non_expert_params_estimate


CONFIGS = Path(__file__).parents[1] / "data" / "configs"


@pytest.mark.parametrize(
    "name, keys",
    [
        ("MiniMaxAI--MiniMax-M3", ("sparse_attention_config",)),
        ("XiaomiMiMo--MiMo-V2-Flash", ("hybrid_layer_pattern",)),
        ("moonshotai--Kimi-K3", ("routed_expert_hidden_size", "linear_attn_config")),
        ("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8", ("hybrid_override_pattern",)),  # holds Infinity too
        ("google--gemma-4-26B-A4B", ("global_head_dim",)),
        ("meta-llama--Llama-4-Maverick-17B-128E-Instruct", ("interleave_moe_layer_step",)),
    ],
)
def test_architectures_the_models_would_misread_are_refused_with_the_reason(name, keys):
    """Real configs of architectures whose layers the memory and cost models would misread (MiniMax-M3's
    sparse attention, MiMo-V2's sliding layers
    with their own heads, Kimi-K3's latent experts and Kimi Delta Attention, Nemotron-H's Mamba-2
    layers, Gemma 4's full-attention layers with their own heads, Llama 4's interleaved dense and MoE
    layers; verbatim copies, tests/data/README.md): refused with one line naming the keys, not read as
    another model's. DeepSeek-V4-Flash, refused until 2026-12-07, is read under its own family record
    (tests/spec/test_compressed_attention.py). Read generically, Nemotron-3-Nano-30B-A3B came out at 102B (every layer MoE) and
    Llama-4-Maverick at 778B (its published 400B), with no note but 'not tested'."""
    cfg = read_config_json(CONFIGS / f"{name}.json")
    with pytest.raises(UserError) as e:
        _spec(name, cfg)
    assert all(k in e.value.problem for k in keys)
    assert "kttune models" in e.value.fix


def test_moe_layer_freq_as_a_flag_per_layer_is_the_same_model_as_its_number():
    """MiMo-V2 and MiniMax-M3 write `moe_layer_freq` as one flag per decoder layer (1 = MoE): DeepSeek-V3's
    first three dense layers written that way are DeepSeek-V3; a list of another length is refused."""
    cfg = catalog_config("deepseek-v3")
    flags = [0 if i < cfg["first_k_dense_replace"] else 1 for i in range(cfg["num_hidden_layers"])]
    s, ref = _spec("flags", {**cfg, "moe_layer_freq": flags}), _spec("deepseek-v3")
    assert (s.num_moe_layers, s.moe_layer_ids) == (ref.num_moe_layers, ref.moe_layer_ids)
    assert s.non_expert_params_estimate == ref.non_expert_params_estimate
    with pytest.raises(UserError, match="one 0 or 1 per decoder layer"):
        _spec("short", {**cfg, "moe_layer_freq": flags[:-1]})


def test_the_shipped_qwen35_configs_read_their_layer_pattern_under_their_own_record():
    """The catalog's Qwen3.5 configs (verbatim copies): every fourth layer full attention from
    `layer_types`, the rest Gated DeltaNet, every layer MoE, read under the family's own record (no
    'not tested' note)."""
    for name, layers in (("qwen3.5-35b-a3b", 40), ("qwen3.5-122b-a10b", 48), ("qwen3.5-397b-a17b", 60)):
        s = _spec(name)
        assert s.family == "qwen3_5_moe_text" and s.num_layers == s.num_moe_layers == layers
        assert list(s.full_attention_layer_ids) == list(range(3, layers, 4))
        assert len(s.linear_attention_layer_ids) == 3 * layers // 4
        assert not any("not one kttune was tested on" in n for n in s.notes)


def test_kimi_k25_is_kimi_k2_thinkings_model_under_text_config():
    """Moonshot's K2.5 keeps K2's language model (text_config model_type kimi_k2) and its INT4 group-32
    experts: read from the nested copy, it is the model read from K2-Thinking's flat one."""
    a, b = _spec("kimi-k2.5"), _spec("kimi-k2-thinking")
    for key in ("hidden_size", "num_experts", "top_k", "moe_intermediate_size", "num_moe_layers", "kv_lora_rank"):
        assert getattr(a, key) == getattr(b, key), key
    assert (a.default_method, a.params_per_expert) == (b.default_method, b.params_per_expert)
