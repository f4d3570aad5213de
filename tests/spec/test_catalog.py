"""The shipped model catalog: every entry is a raw HF config plus a `_kttune` block, and loads."""

from __future__ import annotations

import json
from importlib.resources import files

import pytest

from kttune.errors import UserError
from kttune.spec.catalog import (
    CatalogEntry,
    catalog_config,
    catalog_entries,
    catalog_meta,
    catalog_names,
    close_catalog_names,
    resolve_catalog_name,
)
from kttune.spec.loader import load_model

REQUIRED = [
    "kimi-k2-thinking",
    "kimi-k2-instruct",
    "deepseek-v3",
    "deepseek-v3.1",
    "deepseek-v3.2",
    "deepseek-r1",
    "minimax-m2",
    "minimax-m2.1",
    "qwen3-235b-a22b",
    "qwen3-235b-a22b-fp8",
    "qwen3-30b-a3b",
    "qwen3-30b-a3b-fp8",
    "qwen3-next-80b-a3b",
    "glm-4.7",
    "glm-4.5-air",
    "glm-5",
    "glm-5.2",
    "kimi-k2.5",
    "qwen3.5-35b-a3b",
    "qwen3.5-122b-a10b",
    "qwen3.5-397b-a17b",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "mixtral-8x7b",
]


def test_required_names_present():
    names = catalog_names()
    assert set(REQUIRED) <= set(names)
    assert names == sorted(names)


def test_files_are_package_data():
    d = files("kttune.profiles") / "models"
    on_disk = sorted(f.name[:-5] for f in d.iterdir() if f.name.endswith(".json"))
    assert on_disk == catalog_names()


@pytest.mark.parametrize("name", REQUIRED)
def test_entry_is_raw_config_plus_kttune_block(name):
    cfg = catalog_config(name)
    assert not [k for k in cfg if k.startswith("_")] and "source" not in cfg
    assert "model_type" in cfg and "hidden_size" in (cfg.get("text_config") or cfg)
    meta = catalog_meta(name)
    assert meta["name"] == name
    assert meta["grade"] and meta["source"] and "/" in meta["hf_repo"]
    assert isinstance(meta["notes"], list)


def test_catalog_config_is_a_copy():
    cfg = catalog_config("deepseek-v3")
    cfg["hidden_size"] = 1
    assert catalog_config("deepseek-v3")["hidden_size"] == 7168


def test_entries_load_and_match_reference_arithmetic():
    entries = catalog_entries()
    assert [e.name for e in entries] == catalog_names()
    for e in entries:
        assert isinstance(e, CatalogEntry)
        ref = catalog_meta(e.name)["reference_derived"]
        spec = load_model(e.name)
        assert (e.num_experts, e.top_k, e.num_moe_layers) == (ref["expert_count"], ref["top_k"], ref["num_moe_layers"])
        assert spec.params_per_expert == ref["params_per_routed_expert"]
        assert e.total_params > ref["routed_expert_params_total"] > e.active_params > 0
        assert e.default_method == spec.default_method and e.family == spec.family
        assert spec.source.startswith(f"catalog:{e.name}")


def test_entry_values():
    by = {e.name: e for e in catalog_entries()}
    assert by["kimi-k2-thinking"].default_method == "RAWINT4"
    assert by["gpt-oss-120b"].checkpoint_format == "mxfp4"
    assert by["qwen3-30b-a3b-fp8"].default_method == "FP8"
    assert by["deepseek-v3"].total_params / 1e9 == pytest.approx(671, rel=0.02)
    assert by["deepseek-v3"].active_params / 1e9 == pytest.approx(37, rel=0.05)
    assert by["glm-4.5-air"].grade == "C"
    # DeepSeek-V3.2: V3's 671B and the sparse-attention indexer's 0.85B (61 layers of wq_b, wk, weights_proj)
    assert (by["deepseek-v3.2"].total_params - by["deepseek-v3"].total_params) / 1e9 == pytest.approx(0.85, abs=0.01)
    assert by["deepseek-v3.2"].default_method == "FP8"
    # DeepSeek-V4-Flash: published 284B total, 13B active (tests/spec/test_compressed_attention.py
    # counts its tensors); its experts MXFP4 beside fp8 attention
    assert by["deepseek-v4-flash"].total_params / 1e9 == pytest.approx(284, rel=0.01)
    assert by["deepseek-v4-flash"].active_params / 1e9 == pytest.approx(13, rel=0.1)
    assert (by["deepseek-v4-flash"].checkpoint_format, by["deepseek-v4-flash"].default_method) == ("mxfp4", "MXFP4")
    # the names carry the published totals (the language model; the vision towers are not counted)
    for name, total, active in (
        ("qwen3.5-397b-a17b", 397, 17),
        ("qwen3.5-122b-a10b", 122, 10),
        ("qwen3.5-35b-a3b", 35, 3),
    ):
        assert by[name].total_params / 1e9 == pytest.approx(total, rel=0.02), name
        assert by[name].active_params / 1e9 == pytest.approx(active, rel=0.2), name
        assert by[name].family == "qwen3_5_moe_text" and by[name].default_method == "BF16"
    # Kimi-K2.5: Kimi-K2's 1T / 32B under text_config, its experts INT4 group-32 (compressed-tensors)
    assert by["kimi-k2.5"].total_params / 1e12 == pytest.approx(1.0, rel=0.05)
    assert by["kimi-k2.5"].active_params / 1e9 == pytest.approx(32, rel=0.05)
    assert (by["kimi-k2.5"].default_method, by["kimi-k2.5"].family) == ("RAWINT4", "kimi_k2")
    assert by["glm-5.2"].grade == by["glm-5"].grade == by["deepseek-v3.2"].grade == "A"
    assert by["glm-5.1"].total_params == by["glm-5"].total_params  # GLM-5's config but transformers_version
    # Qwen3-VL MoE: the Qwen3-MoE language model of the same size under text_config
    for vl, lm in (("qwen3-vl-235b-a22b", "qwen3-235b-a22b"), ("qwen3-vl-30b-a3b", "qwen3-30b-a3b")):
        assert (by[vl].num_experts, by[vl].num_moe_layers, by[vl].default_method) == (
            by[lm].num_experts,
            by[lm].num_moe_layers,
            by[lm].default_method,
        )
        assert by[vl].total_params == pytest.approx(by[lm].total_params, rel=1e-4)
    # MiniMax-M2.5 and M2.7 keep M2's geometry and FP8 block weights: the model read from M2.1's copy
    for name in ("minimax-m2.5", "minimax-m2.7"):
        assert (by[name].total_params, by[name].default_method) == (by["minimax-m2.1"].total_params, "FP8")
    # GLM-5's technical report: 744B parameters, 40B active (the embedding's 1.9B not counted as active)
    assert by["glm-5"].total_params / 1e9 == pytest.approx(744, rel=0.01)
    assert by["glm-5"].active_params / 1e9 == pytest.approx(40, rel=0.05)


@pytest.mark.parametrize(
    "query, name",
    [
        ("DeepSeek-V3", "deepseek-v3"),
        ("deepseek-ai/DeepSeek-V3.1", "deepseek-v3.1"),
        ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"),
        ("qwen3_30b_a3b_fp8", "qwen3-30b-a3b-fp8"),
        ("  GLM-4.5-Air ", "glm-4.5-air"),
        ("deepseek-ai/DeepSeek-V3.2", "deepseek-v3.2"),
        ("DeepSeek-V3.2-Exp", "deepseek-v3.2"),
        ("mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b"),
        ("Qwen3-Next-80B-A3B-Thinking", "qwen3-next-80b-a3b"),
        ("openai/gpt-oss-120b", "gpt-oss-120b"),
        ("moonshotai/Kimi-K2-Thinking", "kimi-k2-thinking"),
        ("moonshotai/Kimi-K2.5", "kimi-k2.5"),
        ("Qwen/Qwen3.5-397B-A17B", "qwen3.5-397b-a17b"),
        ("qwen3.5-35b", "qwen3.5-35b-a3b"),
        ("llama-3-70b", None),
    ],
)
def test_resolve(query, name):
    assert resolve_catalog_name(query) == name


def test_close_names_and_unknown_error():
    assert close_catalog_names("deepseekv3")[0] == "deepseek-v3"
    assert "kimi-k2-thinking" in close_catalog_names("kimi-k2-thinkin")
    with pytest.raises(UserError, match="unknown model 'glm-6'.*did you mean glm-.*kttune models"):
        catalog_config("glm-6")


def test_no_modules_list_is_trimmed_text():
    for name in catalog_names():
        qc = catalog_config(name).get("quantization_config") or {}
        for key in ("modules_to_not_convert", "ignore"):
            assert not isinstance(qc.get(key), str), name
    q = catalog_config("qwen3-30b-a3b-fp8")["quantization_config"]["modules_to_not_convert"]
    assert len(q) == 145 and "lm_head" in q


def test_json_files_parse_strictly():
    d = files("kttune.profiles") / "models"
    for f in d.iterdir():
        if f.name.endswith(".json"):
            doc = json.loads(f.read_text(encoding="utf-8"))
            assert next(iter(doc)) == "_kttune"
