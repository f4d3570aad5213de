"""The GPU probes end to end on a small scale (GPU box only)."""

import pytest

from kttune.probes.common import NullReporter
from kttune.spec.moe_shape import MoeLayerShape
from kttune.units import MIB

pytestmark = pytest.mark.gpu

SMALL = MoeLayerShape(hidden=1024, inter=512, experts=16, top_k=4, method="RAWINT4", name="small")


def test_copy_probe_small():
    from kttune.probes import gpu_copy

    curves = gpu_copy.probe_copy_gpu(0, 32 * MIB, quick=True)
    kinds = {(c.kind, c.params["pinned"]) for c in curves}
    assert kinds == {("h2d", True), ("h2d", False), ("d2h", True), ("d2h", False)}
    for c in curves:
        assert [p.x for p in c.points] == [MIB, 16 * MIB, 32 * MIB]
        assert all(p.t_ms > 0 and p.extra["gbps"] > 0 for p in c.points)


CONFIGS = [(2, 3, 1, "host"), (2, 1, 4, "host"), (3, 1, 2, "stream"), (2, 2, 1, "stream")]


@pytest.mark.parametrize("method", ["BF16", "RAWINT4", "FP8"])
@pytest.mark.parametrize("prefer_kt", [False, True])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(map(str, c)))
def test_pipeline_delivers_the_layer(method, prefer_kt, cfg):
    """After an overlapped run the GPU layer holds every expert, repacked where the method needs it."""
    import torch

    from kttune.kernels.expert_weights import HostExperts, make_writer
    from kttune.runner.pipeline import LayerPipeline, PipelineConfig

    host = HostExperts.random(method, 1024, 512, 10, seed=5)
    writer, _ = make_writer(host, threads=4, prefer_kt=prefer_kt)
    if cfg[3] == "stream" and not writer.stream_capable:
        pytest.skip(f"{writer.backend} cannot submit on a CUDA stream")
    pl = LayerPipeline(host, writer, PipelineConfig(*cfg), "cuda")
    for t in pl.gpu.dst.values():
        t.view(torch.uint8).fill_(0xEE)
    pl.run()
    for e in range(10):
        for name, want in host.expected(e).items():
            got = pl.gpu.dst[name][e].cpu()
            if method == "RAWINT4":
                got = got.t()
            assert torch.equal(got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)), (name, e)
    res = pl.measure(repeats=1)
    # a 10-expert layer times in a few ms: check the bookkeeping, not the overlap (one repeat is noise)
    assert res.layer_ms > 0 and res.stage_a_ms > 0 and res.stage_b_ms > 0 and res.stage_c_ms >= 0
    assert res.extra()["overlap_ratio"] == round(res.overlap, 4)


def test_suite_quick_small_model():
    from kttune.probes import gpu_suite

    curves = gpu_suite.run_gpu_probes(None, None, True, NullReporter(), only=("repack", "gemm"))
    assert {c.kind for c in curves} == {"stage_c_repack", "gpu_gemm"}


def test_quick_pipeline_streams_the_capped_layer_at_every_thread_count():
    """Quick mode: a part of the layer (whole experts within the cap), two points per thread count,
    one curve per thread count, the curve naming the shape's expert count."""
    from kttune.probes import gpu_pipeline
    from kttune.probes.gpu_pipeline import expert_stream_bytes, layer_experts

    shape = MoeLayerShape(hidden=1024, inter=512, experts=64, top_k=4, method="BF16", name="small")
    cap = 20 * expert_stream_bytes(shape)
    curves, _, notes = gpu_pipeline.probe_pipeline_layer(
        shape,
        configs=gpu_pipeline.QUICK_CONFIGS,
        repeats=1,
        threads_options=(2, 1),
        expert_fractions=gpu_pipeline.QUICK_EXPERT_FRACTIONS,
        max_layer_bytes=cap,
        reporter=NullReporter(),
    )
    assert layer_experts(shape, cap) == 20 and any("20 of 64 experts" in n for n in notes)
    assert sorted(c.params["threads"] for c in curves) == [1, 2]
    for c in curves:
        assert c.params["experts"] == 64
        assert [p.extra["experts_streamed"] for p in c.points] == [10, 20]
        assert c.points[-1].x == cap
