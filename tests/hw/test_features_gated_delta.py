"""The chunked gated delta rule's work (`gated_delta_rule_prefill_work`) against an independent
reference: the chunked algorithm written out in torch, held to the token-by-token recurrence it
rearranges, its matmul flops counted by torch's FlopCounterMode."""

from __future__ import annotations

import math

import pytest

from kttune.hw.features import gated_delta_rule_prefill_work
from kttune.spec.model_spec import GDN_CHUNK

torch = pytest.importorskip("torch")


def recurrent(q, k, v, g, beta, h):
    """One head token by token (FLA's fused recurrent form): decay the state by exp(g), correct it
    towards v along k by beta, read it with q. h: [K, V]."""
    out = []
    for t in range(q.shape[0]):
        h = h * torch.exp(g[t])
        delta = (v[t] - k[t] @ h) * beta[t]
        h = h + torch.outer(k[t], delta)
        out.append(q[t] @ h)
    return torch.stack(out), h


def chunked(q, k, v, g, beta, h, c):
    """The same head in tiles of `c` tokens, as FLA's chunk_gated_delta_rule_fwd computes it: within
    a tile the WY form (A = beta k k^T strictly below the diagonal, T = (I + A)^-1, w = T beta k,
    u = T beta v), then v_new = u - w h, o = q h + (q k^T, causal) v_new, h <- h + k^T v_new, each
    with its gate factors. The tail is padded with zero tokens (g 0, beta 0), as the kernels' tiles are."""
    n = q.shape[0]
    pad = -n % c
    if pad:
        z = lambda x: torch.cat([x, x.new_zeros((pad, *x.shape[1:]))])  # noqa: E731
        q, k, v, g, beta = z(q), z(k), z(v), z(g), z(beta)
    out = []
    for s in range(0, q.shape[0], c):
        qc, kc, vc, bc = q[s : s + c], k[s : s + c], v[s : s + c], beta[s : s + c]
        gc = torch.cumsum(g[s : s + c], 0)
        decay = torch.exp(gc[:, None] - gc[None, :])
        strict = torch.tril(torch.ones(c, c, dtype=q.dtype), -1)
        a = (bc[:, None] * (kc @ kc.T)) * decay * strict
        t = torch.linalg.solve_triangular(
            torch.eye(c, dtype=q.dtype) + a, torch.eye(c, dtype=q.dtype), upper=False, unitriangular=True
        )
        w = t @ (bc[:, None] * torch.exp(gc)[:, None] * kc)
        u = t @ (bc[:, None] * vc)
        v_new = u - w @ h
        causal = torch.tril(torch.ones(c, c, dtype=q.dtype))
        o = (torch.exp(gc)[:, None] * qc) @ h + ((qc @ kc.T) * decay * causal) @ v_new
        h = torch.exp(gc[-1]) * h + (torch.exp(gc[-1] - gc)[:, None] * kc).T @ v_new
        out.append(o)
    return torch.cat(out)[:n], h


def inputs(n, kdim, vdim, seed=0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    k = torch.nn.functional.normalize(r(n, kdim), dim=-1)  # SGLang l2-normalises q and k in the kernel
    q = torch.nn.functional.normalize(r(n, kdim), dim=-1)
    g = -torch.rand(n, generator=gen, dtype=torch.float64) * 0.1  # log decays
    beta = torch.rand(n, generator=gen, dtype=torch.float64)
    return q, k, r(n, vdim), g, beta, r(kdim, vdim)


@pytest.mark.parametrize("n,c", [(16, 8), (21, 8), (5, 8), (64, 16)])
def test_the_chunked_form_is_the_recurrence(n, c):
    q, k, v, g, beta, h0 = inputs(n, 6, 5, seed=n)
    o_ref, h_ref = recurrent(q, k, v, g, beta, h0)
    o, h = chunked(q, k, v, g, beta, h0, c)
    assert torch.allclose(o, o_ref, atol=1e-9) and torch.allclose(h, h_ref, atol=1e-9)


@pytest.mark.parametrize("n,kdim,vdim,c,heads", [(128, 32, 16, 16, 3), (100, 16, 24, 32, 2), (64, 128, 128, 64, 1)])
def test_flops_are_the_chunked_form_s_matmuls(n, kdim, vdim, c, heads):
    """Over every head: the formula's flops equal FlopCounterMode's count of the reference (its
    matmuls; the triangular inverse, which the formula leaves out, is not a counted op), and its
    bytes are one bf16 state per tile and head, written and read back."""
    from torch.utils.flop_counter import FlopCounterMode

    args = inputs(n, kdim, vdim)
    with FlopCounterMode(display=False) as counter:
        for _ in range(heads):
            chunked(*args, c)
    flops, nbytes = gated_delta_rule_prefill_work(n, heads, kdim, vdim, chunk=c)
    assert flops == counter.get_total_flops()
    assert nbytes == 2 * math.ceil(n / c) * heads * kdim * vdim * 2


def test_the_inverse_left_out_is_a_small_share_at_fla_s_tile():
    """solve_tril's C^3 / 3 multiply-adds a tile (2 C^3 / 3 flops) against the counted work, at Qwen3-Next's
    128-wide heads."""
    flops, _ = gated_delta_rule_prefill_work(GDN_CHUNK, 1, 128, 128)
    assert 2 * GDN_CHUNK**3 / 3 / flops == pytest.approx(0.015, abs=0.001)
