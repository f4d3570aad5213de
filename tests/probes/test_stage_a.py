"""Stage A: kt-kernel's write_weight_scale_to_buffer writes the expert we gave it, in the GPU layout
we size the slot for, and the probe times it."""

from __future__ import annotations

import pytest

from kttune.probes import cpu_moe as cm
from kttune.probes import stage_a as sa
from kttune.probes.inventory import collect_cpu
from kttune.spec.methods import bytes_per_expert


@pytest.mark.parametrize("method,fmt", [("BF16", "bf16"), ("FP8", "fp8_block"), ("RAWINT4", "int4_g32")])
@pytest.mark.parametrize("h,i", [(7168, 2048), (2048, 768), (4096, 1536)])
def test_slot_bytes_match_the_bytes_per_expert_formula(method, fmt, h, i):
    assert sa.expert_write_bytes(method, h, i) == bytes_per_expert(fmt, h, i)
    # split over 2 GPU ranks: each rank holds half of I
    assert sa.expert_write_bytes(method, h, i, gpu_tp=2) == 2 * bytes_per_expert(fmt, h, i // 2)


@pytest.fixture(scope="module")
def kt():
    k = cm.load_kt_kernel()
    if k is None:
        pytest.skip("kt-kernel not importable")
    return k


@pytest.mark.kt
@pytest.mark.parametrize("method", sa.STAGE_A_METHODS)
@pytest.mark.parametrize("gpu_tp", [1, 2])
def test_writer_puts_the_expert_into_the_slot(kt, method, gpu_tp):
    import torch

    cpu = collect_cpu()
    shape = cm.ExpertShape(hidden=256, inter=256, experts=4, top_k=2)
    w = cm.random_weights(method, shape, seed=3)
    for t in (w.gate, w.up, w.down, w.gate_scale):  # make each expert distinct
        if t is None:
            continue
        for x in range(shape.experts):
            if t.dtype == torch.uint8:
                t[x] = t[x] ^ (x + 1)
            else:
                t[x] = t[x] * (x + 2)
    sizes = sa.slot_buffer_bytes(method, shape.hidden, shape.inter, gpu_tp)
    slots = {k: [torch.zeros(max(v, 1), dtype=torch.uint8) for _ in range(gpu_tp)] for k, v in sizes.items()}
    ptr = {k: [t.data_ptr() if sizes[k] else 0 for t in ts] for k, ts in slots.items()}
    e = 2
    with cm.KtMoeLayer(kt, method, shape, w, threads=1, max_tokens=1, isa=cpu.isa) as layer:
        assert layer.can_write_buffer
        layer.write_expert(e, ptr["w13"], ptr["w13_scale"], ptr["w2"], ptr["w2_scale"])

    def raw(t):
        return t.contiguous().view(torch.uint8).reshape(t.shape[0], -1)

    n_r = shape.inter // gpu_tp
    for r in range(gpu_tp):
        gate = raw(w.gate[e])[r * n_r:(r + 1) * n_r]
        up = raw(w.up[e])[r * n_r:(r + 1) * n_r]
        w13 = slots["w13"][r][: sizes["w13"]].view(2 * n_r, -1)
        assert torch.equal(w13[:n_r], gate) and torch.equal(w13[n_r:], up)
        down = raw(w.down[e])
        cols = down.shape[1] // gpu_tp
        w2 = slots["w2"][r][: sizes["w2"]].view(shape.hidden, -1)
        assert torch.equal(w2, down[:, r * cols:(r + 1) * cols])
        if method == "RAWINT4":  # bf16 group scales, gate then up
            scale = slots["w13_scale"][r][: sizes["w13_scale"]].view(torch.bfloat16).view(2 * n_r, -1)
            assert torch.equal(scale[:n_r], w.gate_scale[e][r * n_r:(r + 1) * n_r])


@pytest.mark.kt
def test_stage_a_probe_writes_curves_from_kt_kernel(kt):
    import torch

    cpu = collect_cpu()
    opts = sa.StageAOptions(hidden=1024, inters=(256, 512), threads=(1,), layer_bytes=16 * 1024**2,
                            warmup=1, repeats=3, min_total_s=0.0)
    curves = sa.probe_stage_a(opts, cpu, cores=1, numa_ids=[0], quick=True)
    assert {c.params["method"] for c in curves} == set(sa.STAGE_A_METHODS)
    for c in curves:
        assert c.kind == "stage_a_write" and c.x_unit == "bytes"
        assert c.backend == f"kt-kernel:{kt.variant}" and c.params["threads"] == 1
        assert [p.x for p in c.points] == [sa.expert_write_bytes(c.params["method"], 1024, i) for i in (256, 512)]
        for p in c.points:
            assert p.t_ms > 0 and p.extra["kernel"] == c.params["kernel"]
            assert p.extra["pinned"] is torch.cuda.is_available()  # pinned slot only with CUDA
