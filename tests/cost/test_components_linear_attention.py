"""Gated DeltaNet layers (Qwen3-Next) as SGLang runs them (docs/cost-model.md#linear-attention-layers):
in prefill, the chunked recurrence over the forward's tokens, whatever the prefix (the state carries
it), on each rank's value heads; in decode, the recurrent state read and written back every step,
whatever the context."""

from __future__ import annotations

from functools import lru_cache

import pytest

from kttune.cost.components import Components
from kttune.cost.prefill import non_moe_ms
from kttune.hw.features import causal_conv1d_prefill_bytes, gated_delta_rule_prefill_work
from kttune.memory.vram import linear_conv_channels, linear_state_bytes_per_request
from tests.helpers import model, profile

MEASURED = "h200-pcie5-xeon-amx-16c"
NEXT = "qwen3-next-80b-a3b"


@lru_cache(maxsize=None)
def comp(name: str, tp: int = 1) -> Components:
    m = model(name)
    return Components(profile(MEASURED), m, m.default_method, tp=tp)


def test_only_linear_attention_layers_have_a_recurrence():
    assert comp(NEXT).linear_attention_ms(4096) > 0
    assert comp("qwen3-30b-a3b").linear_attention_ms(4096) == 0 == comp(NEXT).linear_attention_ms(0)
    # and only their predictions say that its rate is borrowed
    assert any("linear-attention" in n for n in comp(NEXT).notes)
    assert not any("linear-attention" in n for n in comp("qwen3-30b-a3b").notes)


@pytest.mark.parametrize("tokens", [1, 64, 4096, 16384])
def test_a_prefill_forward_charges_each_linear_layer_its_recurrence_whatever_the_prefix(tokens):
    """non_moe_ms grows by the linear layers' recurrence alone: the full-attention layers see the
    prefix, the linear ones carry it in their state."""
    c = comp(NEXT)
    lin = c.model.linear_attention
    flops, nbytes = gated_delta_rule_prefill_work(tokens, lin.num_value_heads, lin.key_head_dim, lin.value_head_dim)
    conv = causal_conv1d_prefill_bytes(tokens, linear_conv_channels(c.model, 1))
    one = c._attn_fit((1.0, flops)) + (nbytes + conv) * c.hbm_ms_per_byte
    assert c.linear_attention_ms(tokens) == pytest.approx(one)
    layers = len(c.model.linear_attention_layer_ids)
    full = len(c.model.full_attention_layer_ids)
    for prefix in (0, 50_000):
        rest = full * c.attention_ms(tokens, prefix) + c.model.num_layers * (
            c.dense_ms(tokens, prefix) + c.allreduce_layer_ms(tokens) + c.layer_overhead_ms
        )
        assert non_moe_ms(c, tokens, prefix) == pytest.approx(rest + layers * one)


def test_the_short_convolution_runs_over_the_q_k_and_v_channels_of_the_rank():
    """Qwen3-Next's conv1d (transformers' Qwen3NextGatedDeltaNet: conv_dim = 2 x key_dim + value_dim)
    holds 2 x 16 x 128 + 32 x 128 channels; split over the ranks, and its bytes are read and written
    once each in bf16 (4 a channel and token)."""
    m = comp(NEXT).model
    assert linear_conv_channels(m, 1) == 2 * 16 * 128 + 32 * 128 == 8192
    assert linear_conv_channels(m, 2) == 4096
    assert linear_conv_channels(model("qwen3-30b-a3b"), 1) == 0
    assert causal_conv1d_prefill_bytes(4096, 8192) == 4 * 4096 * 8192
    assert causal_conv1d_prefill_bytes(0, 8192) == 0


def test_each_rank_runs_its_share_of_the_value_heads():
    one, two = comp(NEXT), comp(NEXT, tp=2)
    lin = one.model.linear_attention
    f1, _ = gated_delta_rule_prefill_work(8192, lin.num_value_heads, lin.key_head_dim, lin.value_head_dim)
    f2, _ = gated_delta_rule_prefill_work(8192, lin.num_value_heads // 2, lin.key_head_dim, lin.value_head_dim)
    assert f2 == f1 / 2 and two.linear_attention_ms(8192) < one.linear_attention_ms(8192)


@pytest.mark.parametrize("tp", [1, 2])
def test_a_decode_step_reads_and_writes_every_request_s_state_whatever_its_context(tp):
    """Per request, twice its linear state (SGLang's fused recurrent update reads the state from the
    pool and writes it back in place) plus the full-attention layers' cache of its context."""
    c = comp(NEXT, tp)
    state = linear_state_bytes_per_request(c.model, tp)
    assert state > 0
    w = c.decode_dense_ms(1, 0)
    for batch in (1, 8):
        step = c.decode_dense_ms(batch, 1) - w
        assert step > batch * 2 * state * c.hbm_ms_per_byte
        # past the first token, only the full-attention layers' cache grows with the context
        grow = c.decode_dense_ms(batch, 10_001) - c.decode_dense_ms(batch, 1)
        assert grow == pytest.approx(sum(k * min(10_000, cap - 1) * batch for k, cap in c.decode_kv_terms()))
    assert (2 * state * c.hbm_ms_per_byte, 1.0) in c.decode_kv_terms()
