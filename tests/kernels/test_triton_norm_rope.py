"""The Triton RMSNorm and rotary kernels against the torch versions they replace on CUDA, on the
shapes the attention block gives them (per-head, over all heads, strided MLA views), through
Triton's CPU interpreter here and on the GPU where there is one."""

from __future__ import annotations

import pytest
import torch

from kttune.kernels import decoder, triton_norm_rope

DEVICES = [
    pytest.param(
        "cpu", marks=pytest.mark.skipif(not triton_norm_rope.available("cpu"), reason="TRITON_INTERPRET=1 unset")
    ),
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")]),
]


def _torch_rms_norm(x, w, eps=1e-6):
    return decoder.rms_norm(x.cpu(), w.cpu(), eps)


def _torch_rope(x, pos, theta):
    return decoder.rope_(x.cpu().clone(), pos.cpu(), theta)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(5, 96), (37, 3, 64), (3, 1000)])
def test_rms_norm_matches_the_torch_version(device, shape):
    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=g) * 3).to(torch.bfloat16)
    w = (torch.rand(shape[-1], generator=g) + 0.5).to(torch.bfloat16)
    got = triton_norm_rope.rms_norm(x.to(device), w.to(device)).cpu()
    ref = _torch_rms_norm(x, w)
    assert got.shape == x.shape and got.dtype == x.dtype
    torch.testing.assert_close(got.float(), ref.float(), rtol=1.6e-2, atol=1e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_of_a_strided_view_reads_only_its_columns(device):
    """MLA normalises c_kv, the first columns of the latent projection: a view with row stride >
    width. The columns beyond it must not enter the mean square."""
    g = torch.Generator().manual_seed(3)
    full = torch.randn(7, 48, generator=g).to(torch.bfloat16).to(device)
    full[:, 32:] = 1000.0
    w = torch.ones(32, dtype=torch.bfloat16, device=device)
    got = triton_norm_rope.rms_norm(full[:, :32], w).cpu()
    torch.testing.assert_close(got.float(), _torch_rms_norm(full[:, :32], w).float(), rtol=1.6e-2, atol=1e-2)
    assert got.float().pow(2).mean(-1).sub(1).abs().max() < 0.05  # unit mean square: the 1000s stayed out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("heads,d", [(3, 16), (10, 64), (1, 128)])
def test_rope_matches_the_torch_version_in_place(device, heads, d):
    g = torch.Generator().manual_seed(heads * d)
    x = torch.randn(9, heads, d, generator=g).to(torch.bfloat16)
    pos = torch.tensor([0, 1, 2, 7, 100, 1000, 4095, 16000, 32767])
    xd = x.clone().to(device)  # on the CPU .to() would hand back x itself, roped in place
    out = triton_norm_rope.rope_(xd, pos.to(device), 1e6)
    assert out.data_ptr() == xd.data_ptr()
    torch.testing.assert_close(out.cpu().float(), _torch_rope(x, pos, 1e6).float(), rtol=1.6e-2, atol=2e-2)
    torch.testing.assert_close(out.cpu()[0], x[0])  # position 0 rotates by nothing


@pytest.mark.parametrize("device", DEVICES)
def test_rope_of_a_strided_view_leaves_the_rest_alone(device):
    """MLA ropes q[..., nope:] in place: the nope part beside it must come back untouched."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(6, 4, 24, generator=g).to(torch.bfloat16)
    pos = torch.arange(6) * 13
    qd = q.clone().to(device)
    triton_norm_rope.rope_(qd[..., 8:], pos.to(device))
    ref = q.clone()
    decoder.rope_(ref[..., 8:], pos)
    got = qd.cpu()
    assert torch.equal(got[..., :8], q[..., :8])
    torch.testing.assert_close(got.float(), ref.float(), rtol=1.6e-2, atol=2e-2)


def test_rope_refuses_an_odd_or_strided_last_dim():
    with pytest.raises(ValueError, match="even, contiguous last dim"):
        triton_norm_rope.rope_(torch.zeros(2, 1, 8, dtype=torch.bfloat16)[..., ::2], torch.arange(2))
