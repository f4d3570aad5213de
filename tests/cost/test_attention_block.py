"""The attention block's fixed cost in the cost model: recovered from a block curve built from a
known fixed part (a law of the fit, not a fitted figure), charged once per decoder layer, borrowed
from a model of the same attention kind with a note, and absent (0, with a note) without a curve."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kttune.cost.components import Components
from kttune.cost.prefill import non_moe_ms
from kttune.hw.features import attention_block_flops
from kttune.hw.profile import Curve, Point
from kttune.hw.registry import load_shipped
from kttune.spec.loader import load_model

PROFILE = "h200-pcie5-xeon-amx-16c"


def block_curve(spec, fixed_ms: float, tflops: float = 200.0, model: str | None = None) -> Curve:
    params = {
        "attention": spec.attention,
        "heads": spec.num_attention_heads,
        "kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "v_head_dim": spec.v_head_dim,
        "model": model or spec.name,
        "hidden": spec.hidden_size,
        "block_params": 20_000_000,
        "qk_norm": spec.qk_norm or "none",
    }
    pts = []
    for x in (16, 64, 256, 1024, 4096):
        f = attention_block_flops(x, spec.num_attention_heads, spec.head_dim, spec.v_head_dim, 20_000_000)
        pts.append(Point(x=x, t_ms=fixed_ms + f / (tflops * 1e9)))
    return Curve("attention_block", "tokens", tuple(pts), params)


def with_curves(*curves: Curve):
    p = load_shipped(PROFILE)
    return replace(p, curves=tuple(c for c in p.curves if c.kind != "attention_block") + curves)


@pytest.mark.parametrize("fixed", [0.5, 3.0, 8.0])
def test_the_fixed_part_of_the_block_less_what_sdpa_and_gemm_charge(fixed):
    spec = load_model("qwen3-30b-a3b")
    c = Components(with_curves(block_curve(spec, fixed)), spec, "BF16")
    charged = c._attn_fit.coef[0] + c._gemm_fit.coef[0]
    assert c.layer_overhead_ms == pytest.approx(fixed - charged, rel=1e-6)
    assert c.layer_other_ms(1024, 512) == pytest.approx(
        c.attention_ms(1024, 512) + c.dense_ms(1024) + c.layer_overhead_ms
    )


def test_every_decoder_layer_pays_it_once_per_forward():
    spec = load_model("qwen3-30b-a3b")
    none = Components(with_curves(), spec, "BF16")
    some = Components(with_curves(block_curve(spec, 3.0)), spec, "BF16")
    grew = non_moe_ms(some, 2048, 0) - non_moe_ms(none, 2048, 0)
    assert grew == pytest.approx(spec.num_layers * some.layer_overhead_ms, rel=1e-9)
    assert none.layer_overhead_ms == 0.0
    assert any("no attention-block measurement" in n for n in none.notes)


def test_a_model_not_measured_borrows_its_attention_kinds_block_and_says_so():
    qwen, glm, dsv3 = load_model("qwen3-30b-a3b"), load_model("glm-4.5-air"), load_model("deepseek-v3")
    prof = with_curves(block_curve(qwen, 3.0), block_curve(dsv3, 9.0))
    c = Components(prof, glm, "BF16")  # GQA with q/k norm like Qwen3, not MLA
    own = Components(with_curves(block_curve(qwen, 3.0, model=glm.name)), glm, "BF16")
    assert c.layer_overhead_ms == pytest.approx(own.layer_overhead_ms, rel=1e-6)
    assert any("attention block of glm-4.5-air not measured" in n for n in c.notes)
    mla = Components(prof, load_model("kimi-k2-thinking"), "RAWINT4")
    assert mla.layer_overhead_ms > c.layer_overhead_ms  # DeepSeek-V3's MLA block, not Qwen3's
