"""Int4 g32 format and the stage C repack: torch reference, Triton (GPU, or CPU interpreter)."""

import os

import pytest
import torch

from kttune.kernels import int4


def _rand_w(out_f=48, in_f=256, seed=0):
    return torch.randn(out_f, in_f, generator=torch.Generator().manual_seed(seed))


def test_pack_unpack_roundtrip_covers_all_nibbles():
    q = torch.arange(-8, 8, dtype=torch.int32).repeat(4, 2)  # [4, 32], every value incl. the sign nibble
    p = int4.pack_int4(q)
    assert p.shape == (4, 4) and p.dtype == torch.int32
    assert torch.equal(int4.unpack_int4(p), q)


def test_quantize_matches_compressed_tensors_convention():
    w = _rand_w()
    p, s = int4.quantize_int4_g32(w)
    assert p.shape == (48, 32) and s.shape == (48, 8) and s.dtype == torch.bfloat16
    # nibble j of word k holds element 8k + j, offset by 8
    q = torch.round(w.reshape(48, 8, 32) / s.float().unsqueeze(-1)).clamp(-8, 7).reshape(48, 256).to(torch.int32)
    assert int((p[0, 0] & 0xF).item()) == int(q[0, 0].item()) + 8
    assert int(((p[0, 0] >> 4) & 0xF).item()) == int(q[0, 1].item()) + 8
    rel = (int4.dequantize_int4_g32(p, s) - w).norm() / w.norm()
    assert rel < 0.15  # int4 of a gaussian


def test_reference_repack_preserves_values():
    w = _rand_w(seed=1)
    p, s = int4.quantize_int4_g32(w)
    q, qs = int4.repack_int4_reference(p, s)
    assert q.shape == (32, 48) and qs.shape == (8, 48)
    assert torch.equal(int4.dequantize_repacked(q, qs), int4.dequantize_int4_g32(p, s))


def test_mxfp4_bytes_read_as_words_decode_as_mx():
    """MXFP4's uint8 bytes, read as int32 words and repacked, decode (e2m1 nibbles) to what
    kttune.kernels.mx decodes from the bytes themselves; a hand-worked byte pins the nibble order."""
    from kttune.kernels import mx

    p, s = mx.quantize_mxfp4(_rand_w(seed=3))
    q, qs = int4.repack_int4_reference(int4.mxfp4_words(p), s)
    assert q.shape == (32, 48) and q.dtype == torch.int32
    assert torch.equal(int4.dequantize_repacked(q, qs, codes="e2m1"), mx.dequant_mxfp4(p, s))
    # byte 0x79: element 0 = code 9 (-0.5), element 1 = code 7 (6.0); the rest zero
    b = torch.zeros(1, 16, dtype=torch.uint8)
    b[0, 0] = 0x79
    one = torch.ones(1, 1, dtype=torch.bfloat16)
    q, qs = int4.repack_int4_reference(int4.mxfp4_words(b), one)
    got = int4.dequantize_repacked(q, qs, codes="e2m1")
    assert got[0, :3].tolist() == [-0.5, 6.0, 0.0]
    with pytest.raises(ValueError, match="uint8"):
        int4.mxfp4_words(torch.zeros(2, 8, dtype=torch.int32))


def test_repack_dispatch_cpu_writes_into_out():
    p, s = int4.quantize_int4_g32(_rand_w(seed=2))
    oq, os_ = torch.full((32, 48), -1, dtype=torch.int32), torch.zeros(8, 48, dtype=torch.bfloat16)
    q, qs, backend = int4.repack_int4(p, s, oq, os_)
    assert backend == "torch" and q.data_ptr() == oq.data_ptr()
    assert torch.equal(oq, p.t()) and torch.equal(os_, s.t())


def test_batched_reference_repack():
    ps, ss = zip(*(int4.quantize_int4_g32(_rand_w(seed=k)) for k in range(3)))
    p, s = torch.stack(ps), torch.stack(ss)
    q, qs = int4.repack_int4_reference(p, s)
    assert q.shape == (3, 32, 48)
    assert torch.equal(q[1], ps[1].t())


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="set TRITON_INTERPRET=1 to run Triton kernels on CPU"
)
def test_triton_repack_interpreter():
    pytest.importorskip("triton")
    from kttune.kernels import triton_int4

    p, s = int4.quantize_int4_g32(_rand_w(out_f=80, in_f=512, seed=3))  # not a multiple of the 64 tile
    q, qs = triton_int4.repack_int4(p, s)
    assert torch.equal(q, p.t()) and torch.equal(qs, s.t())


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1536, 2048), (2048, 768), (4096, 7168), (100, 256)])
def test_triton_repack_gpu(shape):
    from kttune.kernels import triton_int4

    out_f, in_f = shape
    p = torch.randint(-(2**31), 2**31 - 1, (3, out_f, in_f // 8), dtype=torch.int32, device="cuda")
    s = torch.rand(3, out_f, in_f // 32, device="cuda").to(torch.bfloat16)
    oq = torch.full((3, in_f // 8, out_f), 7, dtype=torch.int32, device="cuda")  # poisoned
    os_ = torch.full((3, in_f // 32, out_f), float("nan"), dtype=torch.bfloat16, device="cuda")
    q, qs, backend = int4.repack_int4(p, s, oq, os_)
    assert backend == "triton" and triton_int4.available()
    assert torch.equal(oq, p.transpose(-2, -1)) and torch.equal(os_, s.transpose(-2, -1))
