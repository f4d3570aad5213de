"""`load_model`: directories, config.json paths, catalog names, and every bad input as one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from kttune.cli.flags import spelled
from kttune.errors import UserError
from kttune.spec.catalog import catalog_config, catalog_names
from kttune.spec.loader import load_model


def _model_dir(tmp_path, name, config=None):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config if config is not None else catalog_config(name), indent=2))
    return d


@pytest.mark.parametrize("name", catalog_names())
def test_every_family_from_a_directory(tmp_path, name):
    d = _model_dir(tmp_path, name)
    from_dir = load_model(str(d))
    from_catalog = load_model(name)
    assert from_dir.name == name and from_dir.source == str(d)
    fields = (
        "family",
        "num_experts",
        "top_k",
        "moe_layer_ids",
        "moe_intermediate_size",
        "checkpoint_format",
        "default_method",
        "non_expert_params_estimate",
        "full_attention_layer_ids",
        "sliding_layer_ids",
        "linear_attention_layer_ids",
        "head_dim",
    )
    for f in fields:
        assert getattr(from_dir, f) == getattr(from_catalog, f), f
    assert from_dir.non_expert_bytes_measured is None
    assert any("no safetensors" in n for n in from_dir.notes)


def test_config_json_file_path(tmp_path):
    d = _model_dir(tmp_path, "qwen3-30b-a3b")
    s = load_model(str(d / "config.json"))
    assert s.family == "qwen3_moe" and s.name == "qwen3-30b-a3b"


def test_home_relative_path(tmp_path, monkeypatch):
    d = _model_dir(tmp_path, "mixtral-8x7b")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load_model("~/mixtral-8x7b").family == "mixtral"
    assert d.exists()


def test_text_config_directory(tmp_path):
    inner = catalog_config("kimi-k2-thinking")
    qc = inner.pop("quantization_config")
    d = _model_dir(tmp_path, "Kimi-K2.5", {"model_type": "kimi_k25", "text_config": inner, "quantization_config": qc})
    s = load_model(str(d))
    assert s.family == "kimi_k2" and s.default_method == "RAWINT4"


def test_measured_non_expert_bytes_from_headers(tmp_path):
    cfg = {
        "model_type": "mixtral",
        "hidden_size": 16,
        "intermediate_size": 8,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "vocab_size": 32,
        "max_position_embeddings": 64,
        "torch_dtype": "bfloat16",
    }
    d = _model_dir(tmp_path, "tiny-mixtral", cfg)
    t = {
        "model.embed_tokens.weight": np.zeros((32, 16), np.float16),
        "lm_head.weight": np.zeros((32, 16), np.float16),
        "model.norm.weight": np.zeros(16, np.float16),
        "model.layers.0.self_attn.q_proj.weight": np.zeros((16, 16), np.float16),
        "model.layers.0.block_sparse_moe.gate.weight": np.zeros((2, 16), np.float16),
    }
    for e in range(2):
        for w in ("w1", "w2", "w3"):
            t[f"model.layers.0.block_sparse_moe.experts.{e}.{w}.weight"] = np.zeros((8, 16), np.float16)
    save_file(t, str(d / "model.safetensors"))
    s = load_model(str(d))
    non_expert = sum(v.nbytes for k, v in t.items() if ".experts." not in k)
    assert s.non_expert_bytes_measured == non_expert == s.non_expert_bytes
    assert any("measured from 1 safetensors header" in n for n in s.notes)
    assert not any("differ from" in n for n in s.notes)  # 2 experts x 3 x 8x16 bf16 = as expected


def test_deepseek_v4s_measured_bytes_hold_wo_a_as_sglang_does(tmp_path):
    """DeepSeek-V4's checkpoint keeps wo_a in fp8 and SGLang holds it in bf16: the header sum gets
    wo_a's 8 x 1,024 x 4,096 weights a layer once more, less their block scales (docs/deepseek-v4.md#weights)."""
    cfg = catalog_config("deepseek-v4-flash")
    d = _model_dir(tmp_path, "dsv4", cfg)
    t = {"embed.weight": np.zeros((64, 16), np.float16), "layers.0.attn.wo_a.weight": np.zeros((64, 64), np.uint8)}
    t["layers.0.ffn.experts.0.w1.weight"] = np.zeros((8, 8), np.uint8)
    save_file(t, str(d / "model.safetensors"))
    s = load_model(str(d))
    on_disk = t["embed.weight"].nbytes + t["layers.0.attn.wo_a.weight"].nbytes
    widened = 8 * 1024 * 4096 * 43 * (1 - 4 / (128 * 128))
    assert s.non_expert_bytes_measured == on_disk + int(widened)
    assert any("wo_a held in bf16" in n for n in s.notes)


def test_routed_bytes_mismatch_is_noted(tmp_path):
    cfg = {**catalog_config("mixtral-8x7b"), "num_hidden_layers": 1}
    d = _model_dir(tmp_path, "mixtral-one-layer", cfg)
    save_file(
        {"model.layers.0.block_sparse_moe.experts.0.w1.weight": np.zeros(4, np.float16)}, str(d / "model.safetensors")
    )
    assert any("differ from" in n for n in load_model(str(d)).notes)


@pytest.mark.parametrize(
    "query, name",
    [("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"), ("DEEPSEEK_V3", "deepseek-v3"), ("glm-4.7", "glm-4.7")],
)
def test_catalog_spellings(query, name):
    assert load_model(query).name == name


def test_grade_c_is_noted():
    assert any("grade C" in n for n in load_model("glm-4.5-air").notes)
    assert not any("grade" in n for n in load_model("deepseek-v3").notes)


def test_method_override():
    s = load_model("kimi-k2-thinking", method="amxint4")
    assert s.default_method == "AMXINT4" and s.checkpoint_format == "int4_g32"


# ---- errors: one line, problem and fix ------------------------------------------------------------------


def _error(*args, **kw) -> UserError:
    with pytest.raises(UserError) as ei:
        load_model(*args, **kw)
    line = ei.value.line()
    assert "\n" not in line and ei.value.fix
    return ei.value


def test_unknown_name_suggests_close_names():
    e = _error("deepseek-v4")
    assert "unknown model 'deepseek-v4'" in e.problem
    assert "deepseek-v3" in e.fix and "kttune models" in e.fix
    e = _error("totally-unrelated")
    assert "did you mean" not in e.fix and "kttune models" in e.fix


def test_directory_without_config(tmp_path):
    e = _error(str(tmp_path))
    assert f"no config.json in {tmp_path}" in e.problem


def test_missing_path():
    e = _error("/no/such/model/dir")
    assert "no such file or directory" in e.problem


def test_malformed_json_names_file_and_line(tmp_path):
    d = tmp_path / "broken"
    d.mkdir()
    (d / "config.json").write_text('{\n  "model_type": "qwen3_moe",\n  "hidden_size": 2048,,\n}\n')
    e = _error(str(d))
    assert str(d / "config.json") in e.problem and "line 3" in e.problem


def test_json_not_an_object(tmp_path):
    d = _model_dir(tmp_path, "list", [1, 2])
    assert "not an object" in _error(str(d)).problem


def test_dense_model_directory(tmp_path):
    cfg = {
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "num_experts_per_tok": 2,
    }
    d = _model_dir(tmp_path, "Llama-3.1-8B", cfg)
    e = _error(str(d))
    assert (
        e.problem
        == "Llama-3.1-8B is a dense model (no routed experts); kttune tunes MoE models served with KTransformers"
    )


def test_unknown_method():
    e = _error("deepseek-v3", method="Q4_K_M")
    assert "unknown KT method 'Q4_K_M'" in e.problem and "AMXINT4" in e.fix


def test_unknown_quantization_asks_for_method(tmp_path):
    d = _model_dir(
        tmp_path,
        "awq-model",
        {**catalog_config("qwen3-30b-a3b"), "quantization_config": {"quant_method": "awq", "bits": 4}},
    )
    e = _error(str(d))
    assert "'awq'" in e.problem and "--kt-method" in spelled(e).fix
    assert load_model(str(d), method="AMXINT4").default_method == "AMXINT4"


def test_empty_name():
    assert "empty" in _error("  ").problem


def test_a_nan_or_infinity_transformers_wrote_reads_as_null(tmp_path):
    """transformers writes config.json with Python's json, so a NaN or Infinity can stand in a key kttune
    does not read (Nemotron-H's `time_step_limit` is [0.0, Infinity]): the model loads as without it;
    in a key it reads, the value is refused there (tests/cli/test_fuzz.py)."""
    (tmp_path / "config.json").write_text(
        json.dumps(catalog_config("qwen3-30b-a3b"))[:-1] + ', "time_step_limit": [0.0, Infinity], "x": NaN}'
    )
    s, ref = load_model(str(tmp_path)), load_model("qwen3-30b-a3b")
    assert (s.num_experts, s.params_per_expert, s.num_moe_layers) == (
        ref.num_experts,
        ref.params_per_expert,
        ref.num_moe_layers,
    )
    (tmp_path / "config.json").write_text(
        json.dumps(catalog_config("qwen3-30b-a3b"))[:-1] + ', "hidden_size": Infinity}'
    )
    with pytest.raises(UserError, match="hidden_size"):
        load_model(str(tmp_path))
