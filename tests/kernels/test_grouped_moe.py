"""GPU MoE compute (bf16, fp8, int4) against the float64 reference; CPU variants run everywhere."""

import os

import pytest
import torch

from kttune.kernels import grouped_moe as gm
from kttune.kernels.routing import align_block_size, group_by_expert, random_routing

E, H, I = 8, 256, 128


def _case(m, k=2, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    w13 = torch.randn(E, 2 * I, H, generator=g) * 0.05
    w2 = torch.randn(E, H, I, generator=g) * 0.05
    x = torch.randn(m, H, generator=g).to(torch.bfloat16)
    ids, tw = random_routing(m, E, k, "cpu", seed=seed)
    return w13, w2, x, ids, tw


def _err(y, ref):
    y = y.double().cpu()
    assert torch.isfinite(y).all()
    return ((y - ref).norm() / ref.norm()).item()


def test_routing_is_distinct_and_normalised():
    ids, tw = random_routing(50, E, 4, "cpu")
    assert all(len(set(r.tolist())) == 4 for r in ids)
    assert torch.allclose(tw.sum(-1), torch.ones(50))


def test_align_block_size_covers_every_slot_once():
    ids, _ = random_routing(37, E, 3, "cpu", seed=1)
    sorted_ids, block_expert, n = align_block_size(ids, E, 16)
    assert n == 111 and sorted_ids.numel() % 16 == 0
    valid = sorted_ids[sorted_ids < n]
    assert sorted(valid.tolist()) == list(range(n))
    flat = ids.flatten()
    for b, e in enumerate(block_expert.tolist()):
        blk = sorted_ids[b * 16 : (b + 1) * 16]
        assert all(flat[t].item() == e for t in blk.tolist() if t < n)
    g = group_by_expert(ids, E)
    assert int(g.offsets[-1]) == n and torch.equal(g.counts, torch.bincount(flat, minlength=E))


@pytest.mark.parametrize("m", [1, 7, 64])
@pytest.mark.parametrize("grouped", [False, True])
def test_bf16_cpu(m, grouped):
    if grouped and not gm.grouped_mm_available("cpu"):
        pytest.skip("this torch has no CPU grouped_mm")
    w13, w2, x, ids, tw = _case(m)
    ref = gm.moe_reference(x, w13, w2, ids, tw)
    y, backend = gm.moe_bf16(x, w13.bfloat16(), w2.bfloat16(), ids, tw, use_grouped=grouped)
    assert y.shape == (m, H) and _err(y, ref) < 2e-2, backend


@pytest.mark.parametrize("m", [1, 33])
def test_fp8_cpu(m):
    w13, w2, x, ids, tw = _case(m, seed=2)
    w = gm.quantize_fp8_weights(w13, w2)
    d13, d2 = w.dequantize()
    y, backend = gm.moe_fp8(x, w, ids, tw, mode="dequant")
    # fp8 activations (3 mantissa bits) on top of fp8 weights
    assert _err(y, gm.moe_reference(x, d13, d2, ids, tw)) < 8e-2, backend


@pytest.mark.parametrize("m", [1, 20])
def test_int4_cpu(m):
    w13, w2, x, ids, tw = _case(m, seed=3)
    w = gm.quantize_int4_weights(w13, w2)
    d13, d2 = w.dequantize()
    y, backend = gm.moe_int4(x, w, ids, tw, use_triton=False)
    assert backend == "torch-dequant-loop"
    assert _err(y, gm.moe_reference(x, d13, d2, ids, tw)) < 2e-2


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="set TRITON_INTERPRET=1 to run Triton kernels on CPU")
def test_int4_triton_interpreter():
    pytest.importorskip("triton")
    w13, w2, x, ids, tw = _case(9, seed=4)
    w = gm.quantize_int4_weights(w13, w2)
    d13, d2 = w.dequantize()
    y, backend = gm.moe_int4(x, w, ids, tw, use_triton=True)
    assert backend.startswith("triton")
    assert _err(y, gm.moe_reference(x, d13, d2, ids, tw)) < 2e-2


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 5, 64, 300])
def test_gpu_moe_all_methods(m):
    w13, w2, x, ids, tw = _case(m, k=4, seed=m)
    ref = gm.moe_reference(x, w13, w2, ids, tw)
    c = lambda t: t.cuda()  # noqa: E731
    y, b = gm.moe_bf16(c(x), c(w13.bfloat16()), c(w2.bfloat16()), c(ids), c(tw))
    assert _err(y, ref) < 2e-2, b
    f8 = gm.quantize_fp8_weights(c(w13), c(w2))
    d13, d2 = f8.dequantize()
    y, b = gm.moe_fp8(c(x), f8, c(ids), c(tw))
    assert b != "torch-dequant"
    assert _err(y, gm.moe_reference(x, d13.cpu(), d2.cpu(), ids, tw)) < 8e-2, b
    i4 = gm.quantize_int4_weights(w13, w2)
    d13, d2 = i4.dequantize()
    i4c = gm.Int4Weights(c(i4.w13q), c(i4.w13s), c(i4.w2q), c(i4.w2s))
    y, b = gm.moe_int4(c(x), i4c, c(ids), c(tw))
    assert b == "triton-w4a16"
    assert _err(y, gm.moe_reference(x, d13, d2, ids, tw)) < 2e-2


@pytest.mark.gpu
def test_gpu_int4_fresh_inputs_stable():
    """Same inputs twice give the same output (no race); poisoned output is fully written."""
    from kttune.kernels import triton_int4

    w13, w2, x, ids, tw = _case(128, k=8, seed=11)
    i4 = gm.quantize_int4_weights(w13, w2)
    xc, idc = x.cuda(), ids.cuda()
    sorted_ids, be, n = align_block_size(idc, E, 64)
    out = torch.full((n, 2 * I), float("nan"), dtype=torch.bfloat16, device="cuda")
    triton_int4.int4_moe_gemm(xc, i4.w13q.cuda(), i4.w13s.cuda(), sorted_ids, be, n, 8, 64, out=out)
    assert torch.isfinite(out).all()
    again = triton_int4.int4_moe_gemm(xc, i4.w13q.cuda(), i4.w13s.cuda(), sorted_ids, be, n, 8, 64)
    assert torch.equal(out, again)
