"""kt-kernel 0.7.2 keeps an AMX-family layer's packed weights after the layer is destroyed; kttune keeps
such a closed layer and hands it to the next layer of the same random weights
(kttune.kernels.kt_spares). Held to the process's resident size (the leak itself, read from the
kernel, not a count of kttune's own bookkeeping) and to what the kept layer computes and writes."""

from __future__ import annotations

import gc

import psutil
import pytest
import torch

from kttune.kernels import expert_weights as ew
from kttune.kernels import kt_spares
from kttune.kernels.kt_ext import load_kt_kernel
from kttune.kernels.kt_moe import KtMoeLayer
from kttune.spec.kt_classes import kt_class_leaks


def test_which_classes_leak_by_name_and_version():
    assert kt_class_leaks("AMXBF16_MOE", "0.7.2") and kt_class_leaks("AMXInt4_MOE", "0.6.1.post1")
    assert kt_class_leaks("AMXFP8_MOE", "") and kt_class_leaks("AMXFP8_MOE", "dev")  # unknown: kept
    assert not kt_class_leaks("AMXBF16_MOE", "0.7.3") and not kt_class_leaks("AMXBF16_MOE", "0.8.0+cu128")
    assert not kt_class_leaks("AVX2BF16_MOE", "0.7.2")


def test_random_experts_name_their_values_until_written():
    a = ew.HostExperts.random("BF16", 128, 64, 4, seed=2)
    b = ew.HostExperts.random("BF16", 128, 64, 4, seed=2)
    assert a.content_key is not None and a.content_key == b.content_key
    assert ew.HostExperts.random("BF16", 128, 64, 4, seed=3).content_key != a.content_key
    b.gate[0].zero_()  # written in place: its values are no longer what the key says
    assert b.content_key is None
    assert ew.HostExperts.empty("BF16", 128, 64, 4).content_key is None


def _kt_or_skip():
    kt = load_kt_kernel()
    if kt is None:
        pytest.skip("needs kt-kernel")
    return kt


def _layer(host, **kw):
    return KtMoeLayer(host, top_k=2, threads=1, max_tokens=16, isa=None, **kw)


@pytest.mark.kt
def test_building_and_closing_one_layer_again_grows_the_process_once():
    kt = _kt_or_skip()
    host = ew.HostExperts.random("BF16", 1024, 512, 32, seed=11)  # 96 MiB of bf16 experts
    first = _layer(host)
    if not kt_class_leaks(first.kernel_class, kt.version):
        first.close()
        pytest.skip(f"{first.kernel_class} of kt-kernel {kt.version} frees its weights")
    first.close()
    gc.collect()
    proc = psutil.Process()
    before = proc.memory_info().rss
    for _ in range(4):
        _layer(ew.HostExperts.random("BF16", 1024, 512, 32, seed=11)).close()
        gc.collect()
    grown = proc.memory_info().rss - before
    # each build kt-kernel could not free would keep its packed layer, about the experts' own bytes
    assert grown < host.nbytes / 2, (
        f"grew {grown / 2**20:.0f} MiB over 4 builds of a {host.nbytes / 2**20:.0f} MiB layer"
    )


@pytest.mark.kt
def test_a_kept_layer_computes_and_writes_the_weights_of_the_new_host():
    _kt_or_skip()
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(8, 256, generator=g) * 0.5).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(8, generator=g)[:2] for _ in range(8)]).to(torch.int64)
    w = torch.rand(8, 2, generator=g, dtype=torch.float32)

    def run(layer):
        out = torch.zeros(8, 256, dtype=torch.bfloat16)
        layer.forward(x, ids, w, out)
        return out

    old = ew.HostExperts.random("BF16", 256, 128, 8, seed=21)
    with _layer(old) as first:
        first.set_gpu_experts(3)  # closed with three experts masked
        out_masked = run(first)
        built = id(first.moe)
    del old  # the kept layer may not read the host it was built from
    gc.collect()
    host = ew.HostExperts.random("BF16", 256, 128, 8, seed=21)
    with _layer(host, gpu_mask=torch.zeros(8, dtype=torch.bool)) as fresh:  # a caller's mask: built anew
        out_fresh = run(fresh)
    with _layer(host) as again:  # the kept one (where kt-kernel cannot free it), its mask now all CPU
        assert again.gpu_mask.sum() == 0
        assert id(again.moe) == built or not kt_class_leaks(again.kernel_class, again.kt.version)
        out_again = run(again)
        if again.can_write_buffer:
            slot = ew.HostSlot(host.slot_kinds(), 1, pin=False)
            slot.buffer.fill_(0xAB)
            again.write_expert(5, *([p] for p in slot.ptrs(0)))
            for name, want in host.expected(5).items():
                assert torch.equal(slot.views[name][0].view(torch.uint8), want.contiguous().view(torch.uint8)), name
    assert torch.equal(out_again, out_fresh)
    assert not torch.equal(out_masked, out_fresh)  # the three experts it skipped did contribute


@pytest.mark.kt
def test_live_layers_are_never_shared_and_closed_ones_are_taken_once():
    kt = _kt_or_skip()
    host = ew.HostExperts.random("BF16", 256, 128, 8, seed=31)
    a, b = _layer(host), _layer(host)
    assert a.moe is not b.moe
    if not kt_class_leaks(a.kernel_class, kt.version):
        a.close(), b.close()
        pytest.skip(f"{a.kernel_class} of kt-kernel {kt.version} frees its weights")
    n = kt_spares.spare_count()
    objs = {id(a.moe), id(b.moe)}
    a.close(), b.close()
    assert kt_spares.spare_count() == n + 2
    c, d = _layer(host), _layer(host)
    assert {id(c.moe), id(d.moe)} == objs and c.moe is not d.moe
    assert kt_spares.spare_count() == n
    e = _layer(ew.HostExperts.random("BF16", 256, 128, 8, seed=32))  # other weights: built anew
    assert id(e.moe) not in objs
    for layer in (c, d, e):
        layer.close()
    n = kt_spares.spare_count()
    # masked at its build (kt-kernel's loaders may skip masked experts) or over a caller's mask: not kept
    _layer(host, gpu_experts=2).close()
    _layer(host, gpu_mask=torch.zeros(8, dtype=torch.bool)).close()
    assert kt_spares.spare_count() == n
