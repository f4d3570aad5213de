"""Header-only byte counts of real (small) safetensors files with realistic tensor names."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from kttune.errors import UserError
from kttune.spec.safetensors_headers import (
    is_mtp_tensor,
    is_routed_expert_tensor,
    read_safetensors_header,
    safetensors_files,
    summarize_safetensors,
)

H, I, E = 16, 8, 4


def _deepseek_layer(layer: int, moe: bool, fp8: bool = True) -> dict[str, np.ndarray]:
    """Tensors of one DeepSeek-V3 style layer: fp8 weights stored as uint8 with fp32 block scales."""
    w = np.uint8 if fp8 else np.float16
    p = f"model.layers.{layer}."
    t = {
        p + "input_layernorm.weight": np.ones(H, np.float16),
        p + "post_attention_layernorm.weight": np.ones(H, np.float16),
        p + "self_attn.q_a_proj.weight": np.zeros((6, H), w),
        p + "self_attn.q_a_proj.weight_scale_inv": np.ones((1, 1), np.float32),
        p + "self_attn.kv_a_proj_with_mqa.weight": np.zeros((5, H), w),
        p + "self_attn.kv_b_proj.weight": np.zeros((H, 4), w),
        p + "self_attn.o_proj.weight": np.zeros((H, H), w),
    }
    if not moe:
        for m in ("gate_proj", "up_proj", "down_proj"):
            t[p + f"mlp.{m}.weight"] = np.zeros((2 * I, H), w)
        return t
    t[p + "mlp.gate.weight"] = np.zeros((E, H), np.float16)
    t[p + "mlp.gate.e_score_correction_bias"] = np.zeros(E, np.float32)
    for m in ("gate_proj", "up_proj", "down_proj"):
        t[p + f"mlp.shared_experts.{m}.weight"] = np.zeros((I, H), w)
        t[p + f"mlp.shared_experts.{m}.weight_scale_inv"] = np.ones((1, 1), np.float32)
        for e in range(E):
            t[p + f"mlp.experts.{e}.{m}.weight"] = np.zeros((I, H), w)
            t[p + f"mlp.experts.{e}.{m}.weight_scale_inv"] = np.ones((1, 1), np.float32)
    return t


def _split(tensors):
    routed = {k: v for k, v in tensors.items() if ".mlp.experts." in k}
    return routed, {k: v for k, v in tensors.items() if k not in routed}


def test_routed_names_per_family():
    routed = [
        "model.layers.3.mlp.experts.17.gate_proj.weight",  # DeepSeek / Kimi / GLM / Qwen
        "model.layers.3.mlp.experts.17.down_proj.weight_scale_inv",
        "model.layers.3.mlp.experts.0.up_proj.weight_packed",  # compressed-tensors int4
        "model.layers.0.block_sparse_moe.experts.7.w1.weight",  # Mixtral / MiniMax
        "model.layers.0.mlp.experts.gate_up_proj_blocks",  # gpt-oss fused MXFP4
        "model.layers.0.mlp.experts.down_proj_bias",
        "language_model.model.layers.5.mlp.experts.3.w2.weight",  # multimodal wrapper
    ]
    not_routed = [
        "model.layers.3.mlp.shared_experts.gate_proj.weight",  # DeepSeek shared
        "model.layers.3.mlp.shared_expert.down_proj.weight",  # Qwen3-Next shared
        "model.layers.3.mlp.shared_expert_gate.weight",
        "model.layers.3.mlp.gate.weight",  # router
        "model.layers.0.mlp.router.weight",  # gpt-oss router
        "model.layers.0.block_sparse_moe.gate.weight",
        "model.layers.0.block_sparse_moe.e_score_correction_bias",
        "model.embed_tokens.weight",
        "lm_head.weight",
    ]
    assert all(is_routed_expert_tensor(n) for n in routed)
    assert not any(is_routed_expert_tensor(n) for n in not_routed)


def test_mtp_names():
    assert is_mtp_tensor("model.layers.61.eh_proj.weight", 61)
    assert is_mtp_tensor("model.layers.61.mlp.experts.0.gate_proj.weight", 61)
    assert not is_mtp_tensor("model.layers.60.eh_proj.weight", 61)
    assert is_mtp_tensor("mtp.layers.0.mlp.experts.1.up_proj.weight", 48)  # Qwen3-Next
    assert not is_mtp_tensor("model.layers.61.eh_proj.weight", None)


def test_deepseek_like_shards_with_index(tmp_path):
    # 2 real layers (dense 0, MoE 1) + an MTP layer 2, spread over two shards with an index
    shard1 = {"model.embed_tokens.weight": np.zeros((32, H), np.float16), **_deepseek_layer(0, moe=False)}
    shard2 = {
        **_deepseek_layer(1, moe=True),
        **{k.replace("layers.1.", "layers.2."): v for k, v in _deepseek_layer(1, True).items()},
        "model.norm.weight": np.ones(H, np.float16),
        "lm_head.weight": np.zeros((32, H), np.float16),
    }
    save_file(shard1, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file(shard2, str(tmp_path / "model-00002-of-00002.safetensors"))
    weight_map = {k: "model-00001-of-00002.safetensors" for k in shard1}
    weight_map |= {k: "model-00002-of-00002.safetensors" for k in shard2}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))

    s = summarize_safetensors(tmp_path, num_layers=2)
    everything = {**shard1, **shard2}
    mtp = {k: v for k, v in everything.items() if "layers.2." in k}
    rest = {k: v for k, v in everything.items() if k not in mtp}
    routed, non_expert = _split(rest)
    assert s.routed_expert_bytes == sum(v.nbytes for v in routed.values())
    assert s.routed_expert_tensor_count == len(routed) == 3 * E * 2
    assert s.non_expert_bytes == sum(v.nbytes for v in non_expert.values())
    assert s.mtp_bytes == sum(v.nbytes for v in mtp.values()) and s.mtp_tensor_count == len(mtp)
    assert s.tensor_count == len(everything)
    assert s.total_bytes == sum(v.nbytes for v in everything.values())
    assert len(s.files) == 2


def test_header_matches_safetensors_library(tmp_path):
    t = _deepseek_layer(1, moe=True)
    f = tmp_path / "model.safetensors"
    save_file(t, str(f), metadata={"format": "pt"})
    header = read_safetensors_header(f)
    with safe_open(str(f), framework="numpy") as st:
        assert set(header) == set(st.keys())
    for k, v in t.items():
        b, e = header[k]["data_offsets"]
        assert e - b == v.nbytes and header[k]["shape"] == list(v.shape)


def test_gpt_oss_and_mixtral_names(tmp_path):
    t = {
        "model.layers.0.mlp.experts.gate_up_proj_blocks": np.zeros((E, 2 * I, H // 32 or 1, 16), np.uint8),
        "model.layers.0.mlp.experts.gate_up_proj_scales": np.zeros((E, 2 * I, 1), np.uint8),
        "model.layers.0.mlp.experts.gate_up_proj_bias": np.zeros((E, 2 * I), np.float16),
        "model.layers.0.mlp.router.weight": np.zeros((E, H), np.float16),
        "model.layers.0.self_attn.sinks": np.zeros(4, np.float32),
        "model.layers.1.block_sparse_moe.experts.0.w1.weight": np.zeros((I, H), np.float16),
        "model.layers.1.block_sparse_moe.gate.weight": np.zeros((E, H), np.float16),
    }
    save_file(t, str(tmp_path / "model.safetensors"))
    s = summarize_safetensors(tmp_path, num_layers=2)
    routed, non_expert = (
        {k: v for k, v in t.items() if ".experts." in k},
        {k: v for k, v in t.items() if ".experts." not in k},
    )
    assert s.routed_expert_tensor_count == 4 and s.routed_expert_bytes == sum(v.nbytes for v in routed.values())
    assert s.non_expert_bytes == sum(v.nbytes for v in non_expert.values())


def test_no_shards_returns_none(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert summarize_safetensors(tmp_path) is None
    assert safetensors_files(tmp_path) == []


def test_index_with_missing_shard(tmp_path):
    save_file({"a": np.zeros(2, np.float32)}, str(tmp_path / "model-00001-of-00002.safetensors"))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})
    )
    with pytest.raises(UserError, match="1 of 2 safetensors shards .* missing"):
        summarize_safetensors(tmp_path)


@pytest.mark.parametrize(
    "blob, match",
    [
        (b"\x01\x02", "shorter than 8 bytes"),
        (struct.pack("<Q", 100) + b"{}", "truncated"),
        (struct.pack("<Q", 5) + b"{nope", "malformed safetensors header"),
        (struct.pack("<Q", 2**40), "header length"),
    ],
)
def test_bad_headers(tmp_path, blob, match):
    f = tmp_path / "model.safetensors"
    f.write_bytes(blob)
    with pytest.raises(UserError, match=match):
        summarize_safetensors(tmp_path)


def test_reads_only_the_header(tmp_path):
    """Tensor data is never read: a file cut right after its header still sums to the full bytes."""
    f = tmp_path / "m.safetensors"
    save_file({"model.layers.0.mlp.experts.0.w1.weight": np.zeros((256, 256), np.float32)}, str(f))
    raw = f.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    f.write_bytes(raw[: 8 + n])
    s = summarize_safetensors(tmp_path)
    assert s.routed_expert_bytes == 256 * 256 * 4 and s.non_expert_bytes == 0
