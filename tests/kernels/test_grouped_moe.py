"""GPU MoE compute (bf16, fp8, int4, MXFP4) against the float64 reference; CPU variants run everywhere."""

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


def _mxfp4_dense(w13, w2):
    """The weights MXFP4 encodes, decoded by kttune.kernels.mx from the unrepacked bytes (independent
    of the repacked layout and the nibble decode the MoE runs)."""
    from kttune.kernels import mx

    def one(w):
        return torch.stack([mx.dequant_mxfp4(*mx.quantize_mxfp4(we)) for we in w])

    return one(w13), one(w2)


@pytest.mark.parametrize("m", [1, 20])
def test_mxfp4_cpu(m):
    w13, w2, x, ids, tw = _case(m, seed=5)
    w = gm.quantize_int4_weights(w13, w2, codes="e2m1")
    y, backend = gm.moe_int4(x, w, ids, tw, use_triton=False)
    assert backend == "torch-dequant-loop"
    assert _err(y, gm.moe_reference(x, *_mxfp4_dense(w13, w2), ids, tw)) < 2e-2
    # the e2m1 codes are not int4's: read as int4 the same bytes compute another layer
    wrong = gm.Int4Weights(w.w13q, w.w13s, w.w2q, w.w2s, "int4")
    y_int4, _ = gm.moe_int4(x, wrong, ids, tw, use_triton=False)
    assert _err(y_int4, gm.moe_reference(x, *_mxfp4_dense(w13, w2), ids, tw)) > 0.5


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="set TRITON_INTERPRET=1 to run Triton kernels on CPU"
)
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("codes", ["int4", "e2m1"])
def test_int4_triton_interpreter(masked, codes):
    pytest.importorskip("triton")
    w13, w2, x, ids, tw = _case(9, seed=4)
    if masked:
        ids = ids.masked_fill(ids >= 4, -1)
    w = gm.quantize_int4_weights(w13, w2, codes=codes)
    d13, d2 = w.dequantize() if codes == "int4" else _mxfp4_dense(w13, w2)
    y, backend = gm.moe_int4(x, w, ids, tw, use_triton=True)
    assert backend.startswith("triton")
    assert _err(y, _masked_reference(x, d13, d2, ids, tw)) < 2e-2


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
    f4 = gm.quantize_int4_weights(w13, w2, codes="e2m1")
    f4c = gm.Int4Weights(c(f4.w13q), c(f4.w13s), c(f4.w2q), c(f4.w2s), "e2m1")
    y, b = gm.moe_int4(c(x), f4c, c(ids), c(tw))
    assert b == "triton-mxfp4a16"
    assert _err(y, gm.moe_reference(x, *_mxfp4_dense(w13, w2), ids, tw)) < 2e-2


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


# ---- the fused layout (SGLang's buffers) ------------------------------------------------------------


def _masked_reference(x, w13, w2, ids, tw):
    """Slots with a negative id contribute nothing: the reference with those weights zeroed."""
    keep = ids >= 0
    return gm.moe_reference(x, w13, w2, ids.clamp_min(0), tw * keep)


@pytest.mark.parametrize("method", ["bf16", "fp8", "int4"])
def test_masked_slots_count_zero(method):
    """The hybrid path's GPU share: slots of CPU experts are masked (id -1) and add nothing."""
    w13, w2, x, ids, tw = _case(40, k=3, seed=7)
    ids = ids.masked_fill(ids >= 5, -1)  # experts 0..4 resident
    if method == "bf16":
        y, _ = gm.moe_bf16(x, w13.bfloat16(), w2.bfloat16(), ids, tw, use_grouped=False)
        ref = _masked_reference(x, w13, w2, ids, tw)
    elif method == "fp8":
        w = gm.quantize_fp8_weights(w13, w2)
        y, _ = gm.moe_fp8(x, w, ids, tw, mode="dequant")
        ref = _masked_reference(x, *w.dequantize(), ids, tw)
    else:
        w = gm.quantize_int4_weights(w13, w2)
        y, _ = gm.moe_int4(x, w, ids, tw, use_triton=False)
        ref = _masked_reference(x, *w.dequantize(), ids, tw)
    assert _err(y, ref) < (8e-2 if method == "fp8" else 2e-2)
    none = torch.full_like(ids, -1)
    y0, _ = gm.moe_bf16(x, w13.bfloat16(), w2.bfloat16(), none, tw, use_grouped=False)
    assert torch.count_nonzero(y0) == 0


def test_token_pieces_and_expert_runs_give_the_same_result(monkeypatch):
    """Tokens in pieces (SGLang's 64K chunking) and experts in runs (one grouped GEMM each) change
    where buffers live, not the result: shrink both limits and compare with the one-shot run."""
    w13, w2, x, ids, tw = _case(70, k=2, seed=8)
    whole, _ = gm.moe_bf16(x, w13.bfloat16(), w2.bfloat16(), ids, tw, use_grouped=False)
    monkeypatch.setattr(gm, "FUSED_MOE_CHUNK_TOKENS", 16)
    monkeypatch.setattr(gm, "PIECE_MIN_ROWS", 5)
    monkeypatch.setattr(gm, "PIECE_SHARE", 4)
    pieces, _ = gm.moe_bf16(x, w13.bfloat16(), w2.bfloat16(), ids, tw, use_grouped=False)
    assert torch.equal(whole, pieces)
    assert _err(pieces, gm.moe_reference(x, w13, w2, ids, tw)) < 2e-2


def test_expert_runs_partition_the_slots():
    """Runs are consecutive, cover every slot once, and stay within the limit unless one expert alone
    exceeds it."""
    g = torch.Generator().manual_seed(3)
    for _ in range(50):
        counts = torch.randint(0, 40, (int(torch.randint(1, 30, (1,), generator=g)),), generator=g).tolist()
        limit = int(torch.randint(1, 60, (1,), generator=g))
        runs = gm.expert_runs(counts, limit)
        assert sum(r1 - r0 for _, _, r0, r1 in runs) == sum(counts)
        assert all(a[1] == b[0] and a[3] == b[2] for a, b in zip(runs, runs[1:]))
        for e0, e1, r0, r1 in runs:
            assert r1 - r0 == sum(counts[e0:e1])
            assert r1 - r0 <= limit or (sum(1 for c in counts[e0:e1] if c) == 1)
