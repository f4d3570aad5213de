"""The GPU probes end to end on a small scale (GPU box only)."""

import pytest

from kttune.probes.common import NullReporter
from kttune.probes.gpu_common import MoeShape
from kttune.units import MIB

pytestmark = pytest.mark.gpu

SMALL = MoeShape("small", 1024, 512, 16, 4, "RAWINT4")


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
    from kttune.probes.gpu_pipeline import LayerPipeline, PipelineConfig

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
