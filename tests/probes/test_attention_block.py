"""The attention-block probe on the CPU: what it times is the runner's own block, its curve is one
the profile reader accepts, and the weights it counts are the block's (an independent count from
the model's dimensions)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kttune.hw.profile import Curve, profile_from_dict, profile_to_dict  # noqa: E402
from kttune.hw.registry import load_shipped  # noqa: E402
from kttune.runner.stack import small_spec  # noqa: E402
from kttune.spec.loader import load_model  # noqa: E402


def _block_weights(spec) -> int:
    """The block's weights from the model's dimensions: attention projections, norms, router."""
    h, n, d, dv = spec.hidden_size, spec.num_attention_heads, spec.head_dim, spec.v_head_dim
    if spec.attention == "mla":
        r, dr = spec.kv_lora_rank, spec.qk_rope_head_dim
        q = h * spec.q_lora_rank + spec.q_lora_rank + spec.q_lora_rank * n * d if spec.q_lora_rank else h * n * d
        att = q + h * (r + dr) + r + r * n * (d - dr + dv) + n * dv * h
    else:
        kv = spec.num_kv_heads
        gate = 2 if spec.attention_output_gate else 1
        att = h * n * d * gate + 2 * h * kv * d + n * dv * h
        if spec.qk_norm == "per_layer":
            att += n * d + kv * d
        elif spec.qk_norm:
            att += 2 * d
    return att + 2 * h + spec.num_experts * h + (spec.num_experts if spec.router.bias else 0)


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "deepseek-v3", "minimax-m2.1"])
def test_the_block_probe_times_the_runners_block_and_counts_its_weights(name):
    from kttune.probes.gpu_attention import BLOCK_TOKENS_QUICK, probe_attention_block

    spec = small_spec(load_model(name))
    c = probe_attention_block(spec, quick=True, device="cpu", repeats=2)
    assert c.kind == "attention_block" and [p.x for p in c.points] == list(BLOCK_TOKENS_QUICK)
    assert all(p.t_ms > 0 and p.n == 2 for p in c.points)
    # bias is fp32 (2 bf16 words per weight in the byte count), the rest bf16
    bias = spec.num_experts if spec.router.bias else 0
    assert c.params["block_params"] == _block_weights(spec) + bias
    assert c.params["model"] == spec.name and c.params["qk_norm"] == (spec.qk_norm or "none")
    # the profile reader takes it back as it was written
    p = load_shipped("h200-pcie5-xeon-amx-16c")
    from dataclasses import replace

    back = profile_from_dict(profile_to_dict(replace(p, curves=(c,))))
    assert isinstance(back.curves[0], Curve) and back.curves[0].params == c.params


def test_the_probe_without_a_model_times_one_gqa_and_one_mla_block():
    from kttune.probes.gpu_common import shapes_for

    kinds = sorted(s.attention for s in shapes_for(None).blocks)
    assert kinds == ["gqa", "mla"]
    glm = load_model("glm-4.7")
    assert [s.name for s in shapes_for(glm).blocks] == ["glm-4.7"]
