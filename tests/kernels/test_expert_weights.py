"""Expert weights: the tensor shapes add up to the byte formula of the docs, quantisation round-trips
within each format's precision, and both stage A writers put each expert (and each TP rank's share)
into its slot exactly as the GPU layer reads it."""

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kttune.kernels import expert_weights as ew
from kttune.spec.methods import bytes_per_expert, host_bytes_per_expert

FORMAT = {
    "BF16": "bf16",
    "FP8": "fp8_block",
    "FP8_PERCHANNEL": "fp8_channel",
    "RAWINT4": "int4_g32",
    "AMXINT4": "bf16",
    "AMXINT8": "bf16",
    "MXFP4": "mxfp4",
    "MXFP8": "mxfp8",
}


@settings(max_examples=60, deadline=None)
@given(
    method=st.sampled_from(ew.METHODS),
    h=st.integers(1, 64).map(lambda x: 32 * x),
    i=st.integers(1, 64).map(lambda x: 32 * x),
    tp=st.sampled_from([1, 2, 4]),
)
def test_shapes_add_up_to_the_documented_bytes(method, h, i, tp):
    # the table in docs/weight-formats.md, written out here independently of spec.methods' code path
    assert ew.source_format(method) == FORMAT[method]
    # MXFP4's ue8m0 scale bytes reach kt-kernel as bf16: one more byte per 32 weights than on disk
    held_as_bf16 = 3 * h * i // 32 if method == "MXFP4" else 0
    assert ew.kinds_nbytes(ew.host_kinds(method, h, i)) == bytes_per_expert(FORMAT[method], h, i) + held_as_bf16
    assert ew.expert_nbytes(method, h, i) == ew.kinds_nbytes(ew.host_kinds(method, h, i))
    assert host_bytes_per_expert(FORMAT[method], h, i) == ew.expert_nbytes(method, h, i)
    if method in ew.LAYERWISE_METHODS and i % tp == 0:
        assume(method not in ("RAWINT4", "MXFP4") or (i // tp) % 32 == 0)  # groups of 32 per rank
        assert tp * ew.kinds_nbytes(ew.slot_kinds(method, h, i, tp)) == ew.write_nbytes(method, h, i, tp)


def test_rawint4_words_are_the_checkpoints_bytes():
    """kt-kernel's loader takes `weight_packed` as int32 [out, in/8] or uint8 [out, in/2]: one memory
    image. Element 8w+j sits in nibble j of word w, i.e. element 2b (2b+1) in the low (high) nibble of
    byte b."""
    row = torch.arange(-7, 9).repeat(2).float()  # amax 8 -> scale 8/7
    gate = torch.zeros(1, 32, 32)
    gate[0, 0] = row
    w = ew.HostExperts.from_dense("RAWINT4", gate, gate.clone(), torch.randn(1, 32, 32))
    b = w.gate[0].view(torch.uint8)[0]
    q = [round(x * 7 / 8) for x in row.tolist()]  # the int4 values, independently
    assert float(w.gate_scale[0, 0, 0]) == pytest.approx(8 / 7, rel=1e-2)
    assert int(b[0]) & 0xF == q[0] + 8 and int(b[0]) >> 4 == q[1] + 8
    assert int(b[5]) & 0xF == q[10] + 8 and int(b[5]) >> 4 == q[11] + 8


@pytest.mark.parametrize(
    "method,bound",
    [("BF16", 0.005), ("FP8", 0.05), ("FP8_PERCHANNEL", 0.05), ("RAWINT4", 0.2), ("MXFP4", 0.25), ("MXFP8", 0.06)],
)
def test_quantisation_round_trip_within_the_formats_precision(method, bound):
    g = torch.Generator().manual_seed(0)
    gate, up, down = (
        torch.randn(3, 64, 256, generator=g),
        torch.randn(3, 64, 256, generator=g),
        torch.randn(3, 256, 64, generator=g),
    )
    w = ew.HostExperts.from_dense(method, gate, up, down)
    for a, b in zip(w.dense(), (gate, up, down)):
        rel = ((a - b).abs().mean() / b.abs().mean()).item()
        assert rel < bound
        if method in ("RAWINT4", "MXFP4"):
            assert rel > 0.02  # 4 bits: the error is really there (the test can fail both ways)


def test_mxfp4_bytes_are_the_checkpoints_e2m1_codes_with_power_of_two_scales():
    """Element 2j in the low nibble of byte j, 2j+1 in the high one, a sign bit over three magnitude
    bits (0, 0.5, 1, 1.5, 2, 3, 4, 6); the block's scale puts its largest magnitude in e2m1's top
    binade: amax 12 -> 2^(3 - 2) = 2, so 12 is code 7 (6 x 2) and -3 is code 8|3 (1.5 x 2)."""
    row = torch.zeros(32)
    row[0], row[1], row[2], row[3] = 12.0, -3.0, 0.9, 100.0 / 9
    gate = torch.zeros(1, 32, 32)
    gate[0, 0] = row
    w = ew.HostExperts.from_dense("MXFP4", gate, gate.clone(), torch.randn(1, 32, 32))
    b = w.gate[0][0]
    assert float(w.gate_scale[0, 0, 0]) == 2.0
    assert int(b[0]) & 0xF == 7 and int(b[0]) >> 4 == 8 | 3
    assert int(b[1]) & 0xF == 1  # 0.9 / 2 = 0.45 -> 0.5, code 1
    assert int(b[1]) >> 4 == 7  # 11.1 / 2 = 5.6 -> 6, code 7
    assert w.dense()[0][0, 0, :4].tolist() == [12.0, -3.0, 1.0, 12.0]


def test_mxfp8_scales_are_ue8m0_bytes():
    """The block's scale byte is 127 + floor(log2 amax) - 8 (e4m3's top binade is 2^8): amax 3 -> 120."""
    gate = torch.zeros(1, 32, 64)
    gate[0, 0, :32] = 3.0
    gate[0, 0, 32:] = 0.001
    w = ew.HostExperts.from_dense("MXFP8", gate, gate.clone(), torch.randn(1, 64, 32))
    assert w.gate_scale.dtype == torch.uint8 and w.gate_scale[0, 0].tolist() == [120, 127 - 10 - 8]
    assert w.dense()[0][0, 0, 0].item() == 3.0


def test_random_experts_are_finite_distinct_and_tiled_when_large():
    w = ew.HostExperts.random("FP8", 256, 128, 6, seed=1)
    g, u, d = w.dense()
    assert all(torch.isfinite(t).all() for t in (g, u, d))
    assert not torch.equal(w.gate[0].view(torch.uint8), w.gate[1].view(torch.uint8))
    for method in ("MXFP4", "MXFP8"):
        assert all(
            torch.isfinite(t).all() and t.abs().sum() > 0 for t in ew.HostExperts.random(method, 64, 32, 2).dense()
        )
    big = ew.HostExperts.random("BF16", 256, 128, 10, distinct=3)
    assert torch.equal(big.down[3], big.down[0]) and not torch.equal(big.down[1], big.down[0])
    assert big.nbytes == 10 * ew.expert_nbytes("BF16", 256, 128)


def _check(writer, host, experts):
    slot = ew.HostSlot(host.slot_kinds(), len(experts), pin=False)
    slot.buffer.fill_(0xAB)
    writer.submit(experts, slot)
    writer.wait()
    for j, e in enumerate(experts):
        for name, want in host.expected(e).items():
            got = slot.views[name][j]
            assert torch.equal(got.view(torch.uint8), want.contiguous().view(torch.uint8)), (name, e)


@pytest.mark.parametrize("method", ew.LAYERWISE_METHODS)
def test_torch_writer(method):
    host = ew.HostExperts.random(method, 256, 128, 5, seed=3)
    _check(ew.TorchExpertWriter(host), host, range(2, 5))


@pytest.mark.kt
@pytest.mark.parametrize("method", ["BF16", "RAWINT4", "FP8", "MXFP4"])
def test_kt_writer(method):
    host = ew.HostExperts.random(method, 256, 128, 4, seed=4)
    try:
        w = ew.KtExpertWriter(host, threads=2)
    except RuntimeError as e:
        pytest.skip(f"kt-kernel has no {method} writer for this CPU: {e}")
    _check(w, host, range(1, 3))
    w.close()


@pytest.mark.kt
@pytest.mark.parametrize("method", ["BF16", "RAWINT4", "FP8", "MXFP4"])
def test_kt_writer_splits_an_expert_over_tp_ranks(method):
    """One write puts each GPU rank's I/tp share into that rank's slot (sglang-kt's TP layout),
    checked slice by slice against the checkpoint tensors."""
    from kttune.kernels.kt_moe import KtMoeLayer

    tp, e = 2, 2
    host = ew.HostExperts.random(method, 256, 256, 4, seed=3)
    slots = [ew.HostSlot(host.slot_kinds(tp), 1, pin=False) for _ in range(tp)]
    try:
        layer = KtMoeLayer.for_writer(host, threads=1)
    except RuntimeError as ex:
        pytest.skip(f"kt-kernel has no {method} writer for this CPU: {ex}")
    with layer:
        layer.write_expert(e, *zip(*(s.ptrs(0) for s in slots)))
    n = host.inter // tp
    for r, slot in enumerate(slots):
        w13 = slot.views["w13"][0]
        assert torch.equal(w13[:n].view(torch.uint8), host.gate[e][r * n : (r + 1) * n].contiguous().view(torch.uint8))
        assert torch.equal(w13[n:].view(torch.uint8), host.up[e][r * n : (r + 1) * n].contiguous().view(torch.uint8))
        cols = host.down.shape[2] // tp
        assert torch.equal(
            slot.views["w2"][0].view(torch.uint8),
            host.down[e][:, r * cols : (r + 1) * cols].contiguous().view(torch.uint8),
        )
