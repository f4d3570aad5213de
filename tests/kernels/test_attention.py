"""Prefill attention (GQA by SDPA, MLA prefill form) against the float64 reference."""

import pytest
import torch

from kttune.kernels import attention as attn


def _err(y, ref):
    return ((y.double().cpu() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("t,hq,hkv", [(1, 4, 4), (17, 8, 2), (64, 6, 1)])
def test_gqa_cpu(t, hq, hkv):
    g = torch.Generator().manual_seed(t)
    q, k, v = (torch.randn(t, h, 32, generator=g) for h in (hq, hkv, hkv))
    assert _err(attn.gqa_prefill(q, k, v), attn.attention_reference(q, k, v)) < 1e-5


def test_causal_first_token_sees_only_itself():
    q, k, v = torch.randn(5, 2, 8), torch.randn(5, 2, 8), torch.randn(5, 2, 8)
    out = attn.gqa_prefill(q, k, v)
    assert torch.allclose(out[0], v[0], atol=1e-6)


def naive_mla(q, c_kv, k_rope, w_kv_b, heads, dn, dr, dv):
    """MLA prefill from its definition, head by head and query by query in float64: kv_b_proj's
    output rows are grouped per head as [k_nope (dn) | v (dv)] (DeepSeek-V3's `kv_b_proj` layout),
    the rope key is shared by every head, the softmax is causal with scale (dn + dr)^-1/2."""
    t = q.shape[0]
    q, c_kv, k_rope, w = q.double(), c_kv.double(), k_rope.double(), w_kv_b.double()
    out = torch.zeros(t, heads, dv, dtype=torch.float64)
    for h in range(heads):
        wh = w[h * (dn + dv) : (h + 1) * (dn + dv)]
        w_k, w_v = wh[:dn], wh[dn:]
        for i in range(t):
            scores = []
            for j in range(i + 1):
                key = torch.cat([w_k @ c_kv[j], k_rope[j]])
                scores.append(float(q[i, h] @ key) / (dn + dr) ** 0.5)
            p = torch.tensor(scores, dtype=torch.float64).softmax(0)
            out[i, h] = sum(p[j] * (w_v @ c_kv[j]) for j in range(i + 1))
    return out


def test_mla_cpu():
    d = attn.MlaDims(heads=4, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=24)
    t = 11
    g = torch.Generator().manual_seed(3)
    q = torch.randn(t, 4, 48, generator=g)
    c, kr = torch.randn(t, 64, generator=g), torch.randn(t, 16, generator=g)
    w = torch.randn(4 * (32 + 24), 64, generator=g) * 0.1
    out = attn.mla_prefill(q, c, kr, w, d)
    assert out.shape == (t, 4, 24)
    assert _err(out, naive_mla(q, c, kr, w, 4, 32, 16, 24)) < 1e-5


@pytest.mark.gpu
def test_gpu_gqa_and_mla_bf16():
    bf, dev = torch.bfloat16, "cuda"
    q, k, v = torch.randn(300, 32, 128), torch.randn(300, 4, 128), torch.randn(300, 4, 128)
    out = attn.gqa_prefill(q.to(dev, bf), k.to(dev, bf), v.to(dev, bf))
    assert _err(out, attn.attention_reference(q.bfloat16(), k.bfloat16(), v.bfloat16())) < 2e-2
    d = attn.MlaDims(16, 512, 128, 64, 128)
    q = torch.randn(257, 16, 192)
    c, kr = torch.randn(257, 512), torch.randn(257, 64)
    w = torch.randn(16 * 256, 512) * 0.05
    out = attn.mla_prefill(q.to(dev, bf), c.to(dev, bf), kr.to(dev, bf), w.to(dev, bf), d)
    k, v = attn.mla_expand(c.bfloat16().float(), kr.bfloat16().float(), w.bfloat16().float(), d)
    assert _err(out, attn.attention_reference(q.bfloat16(), k, v, scale=192**-0.5)) < 3e-2
