"""The torch CPU MoE reference and the expert weight formats it (de)quantizes."""

from __future__ import annotations

import pytest
import torch

from kttune.kernels import cpu_moe as ref


def naive_moe(x, ids, w, gate, up, down):
    """Token by token, expert by expert: the definition the vectorised version must match."""
    out = torch.zeros(x.shape[0], gate.shape[2], dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            if e < 0:
                continue
            xt = x[t].double()
            h = torch.nn.functional.silu(gate[e].double() @ xt) * (up[e].double() @ xt)
            out[t] += float(w[t, j]) * (down[e].double() @ h)
    return out


def test_moe_forward_matches_definition():
    torch.manual_seed(0)
    e, h, i, k, t = 6, 32, 16, 2, 7
    layer = ref.TorchCpuMoE.random(e, h, i, dtype=torch.float32, seed=1)
    x = torch.randn(t, h)
    ids, w = ref.random_routing(t, e, k, seed=2)
    got = layer.forward(x, ids, w)
    want = naive_moe(x, ids, w, layer.gate, layer.up, layer.down)
    assert torch.allclose(got.double(), want, rtol=1e-4, atol=1e-5)


def test_negative_ids_are_skipped_like_gpu_resident_experts():
    e, h, i = 4, 16, 8
    layer = ref.TorchCpuMoE.random(e, h, i, dtype=torch.float32)
    x = torch.randn(3, h)
    ids = torch.tensor([[0, 1], [2, -1], [-1, -1]])
    w = torch.full((3, 2), 0.5)
    got = layer.forward(x, ids, w)
    assert torch.equal(got[2], torch.zeros(h))
    only_2 = naive_moe(x[1:2], torch.tensor([[2]]), torch.tensor([[0.5]]), layer.gate, layer.up, layer.down)
    assert torch.allclose(got[1].double(), only_2[0], rtol=1e-4, atol=1e-6)


def test_random_routing_is_uniform_top_k_with_normalised_weights():
    ids, w = ref.random_routing(2000, 16, 4, seed=3)
    assert ids.dtype == torch.int64 and w.dtype == torch.float32
    assert all(len(set(row.tolist())) == 4 for row in ids[:50])
    assert torch.allclose(w.sum(dim=1), torch.ones(2000), atol=1e-5)
    counts = torch.bincount(ids.flatten(), minlength=16).float()
    assert counts.min() > 0.8 * counts.mean()  # 500 per expert expected


def test_fp8_block_roundtrip_within_e4m3_precision():
    torch.manual_seed(0)
    w = torch.randn(200, 300)
    q, s = ref.quantize_fp8_block(w)
    assert q.dtype == torch.uint8 and q.shape == (200, 300)
    assert s.shape == (2, 3) and s.dtype == torch.float32
    back = ref.dequant_fp8_block(q, s)
    rel = (back - w).abs().mean() / w.abs().mean()
    assert rel < 0.05  # e4m3 has a 3-bit mantissa: ~2-3 % mean relative error
    assert (q & 0x7F).ne(0x7F).all()  # no NaN codes


def test_int4_packing_layout_low_nibble_first_offset_8():
    # one row, one group of 32: values -8..7 then 7..-8, scale 1
    vals = torch.cat([torch.arange(-8, 8), torch.arange(7, -9, -1)]).float().unsqueeze(0)
    q, s = ref.quantize_int4_group(vals, group=32)
    back = ref.dequant_int4_group(q, s, group=32)
    # byte 0 holds elements 0 (low nibble) and 1 (high nibble), stored as value + 8
    e0, e1 = back[0, 0] / s[0, 0].float(), back[0, 1] / s[0, 0].float()
    assert int(q[0, 0]) & 0xF == int(round(e0.item())) + 8
    assert int(q[0, 0]) >> 4 == int(round(e1.item())) + 8
    assert q.shape == (1, 16) and s.shape == (1, 1) and s.dtype == torch.bfloat16


def test_int4_group_roundtrip_error_bounded():
    torch.manual_seed(0)
    w = torch.randn(64, 256)
    q, s = ref.quantize_int4_group(w)
    back = ref.dequant_int4_group(q, s)
    rel = (back - w).abs().mean() / w.abs().mean()
    assert 0.02 < rel < 0.2  # 4-bit symmetric, group 32


def test_int4_rejects_ragged_groups():
    with pytest.raises(ValueError):
        ref.quantize_int4_group(torch.randn(4, 40), group=32)
