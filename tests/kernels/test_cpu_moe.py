"""The torch CPU MoE reference against a token-by-token float64 definition."""

from __future__ import annotations

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
