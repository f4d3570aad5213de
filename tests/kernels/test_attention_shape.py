"""The one attention-shape definition: the attention probe's curve params stay those the shipped
profiles were written with (the JSON files are the reference), and the path runner's decoder layer
and the probe describe a model's attention alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kttune.kernels.attention_shape import AttentionShape
from kttune.probes.gpu_common import DEEPSEEK_ATTN, QWEN3_ATTN, shapes_for
from kttune.spec.loader import load_model

PROFILES = sorted((Path(__file__).resolve().parents[2] / "profiles").glob("*.json"))
CURVE_ONLY = ("model", "label", "expected_error")  # added beside the shape's params


def shipped_attention_params() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for f in PROFILES:
        for c in json.loads(f.read_text()).get("curves", []):
            if c["kind"] == "attention":
                out.setdefault(c["params"]["model"], {k: v for k, v in c["params"].items() if k not in CURVE_ONLY})
    return out


def test_representative_shapes_give_the_shipped_profiles_params():
    shipped = shipped_attention_params()
    assert set(shipped) >= {"Qwen3-30B-A3B", "DeepSeek-V3"}
    assert QWEN3_ATTN.params() == shipped["Qwen3-30B-A3B"]
    assert DEEPSEEK_ATTN.params() == shipped["DeepSeek-V3"]


@pytest.mark.parametrize("name,probe_name", [("deepseek-v3", "DeepSeek-V3"), ("qwen3-30b-a3b", "Qwen3-30B-A3B")])
def test_a_models_probe_shape_matches_the_shipped_curve_and_the_decoder_layer(name, probe_name):
    from kttune.kernels.attention_shape import attention_shape

    spec = load_model(name)
    (probe,) = shapes_for(spec).attention
    assert probe.params() == shipped_attention_params()[probe_name]
    layer = attention_shape(spec, 0)
    assert isinstance(layer, AttentionShape) and isinstance(probe, AttentionShape)
    assert (
        layer.kind,
        layer.hidden,
        layer.heads,
        layer.head_dim,
        layer.v_head_dim,
        layer.rope_dim if layer.kind == "mla" else 0,
    ) == (probe.attention, probe.hidden, probe.heads, probe.head_dim, probe.v_head_dim, probe.qk_rope_head_dim)
