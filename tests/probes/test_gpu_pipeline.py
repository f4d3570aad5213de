"""The layerwise pipeline's bookkeeping (slots, one-copy staging ring, stage C batches) on the CPU.
The overlapped drivers need CUDA streams and are checked on the GPU box (test_gpu_probes.py)."""

import pytest
import torch

from kttune.kernels import triton_int4
from kttune.kernels.expert_weights import HostExperts, TorchExpertWriter
from kttune.runner.pipeline import LayerPipeline, PipelineConfig


@pytest.mark.parametrize(
    "method,cfg",
    [
        ("BF16", PipelineConfig(2, 1)),
        ("FP8", PipelineConfig(3, 2)),
        ("RAWINT4", PipelineConfig(2, 1)),
        ("RAWINT4", PipelineConfig(2, 3)),
        ("RAWINT4", PipelineConfig(2, 1, post_batch=4)),
        ("RAWINT4", PipelineConfig(3, 1, post_batch=3)),
    ],
)
def test_serial_run_delivers_every_expert(method, cfg):
    if method == "RAWINT4" and not triton_int4.available("cpu"):
        pytest.skip("the int4 repack needs Triton (CPU interpreter here)")
    experts = 10  # not a multiple of group or post_batch: the last step and batch are partial
    host = HostExperts.random(method, 256, 128, experts, seed=3)
    pl = LayerPipeline(host, TorchExpertWriter(host), cfg, "cpu")
    for t in pl.gpu.dst.values():
        t.view(torch.uint8).fill_(0xEE)
    pl.run_serial()
    for e in range(experts):
        for name, want in host.expected(e).items():
            got = pl.gpu.dst[name][e]
            if method == "RAWINT4":
                got = got.t()
            assert torch.equal(got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)), (name, e)


def test_config_validation():
    with pytest.raises(ValueError, match="slots"):
        PipelineConfig(1, 1)
    with pytest.raises(ValueError, match="group 1"):
        PipelineConfig(2, 2, post_batch=2)
    with pytest.raises(ValueError, match="driver"):
        PipelineConfig(2, 1, driver="thread")
    assert PipelineConfig(2, 1).label() == "slots=2,group=1"
    assert PipelineConfig(3, 1, 4, "stream").label() == "slots=3,group=1,post_batch=4,driver=stream"


def test_stream_driver_needs_a_stream_writer():
    host = HostExperts.random("BF16", 256, 128, 4)
    with pytest.raises(ValueError, match="stream"):
        LayerPipeline(host, TorchExpertWriter(host), PipelineConfig(2, 1, driver="stream"), "cpu")


def test_quick_layer_cap_keeps_whole_experts_within_the_cap():
    from hypothesis import given, strategies as st

    from kttune.spec.moe_shape import MoeLayerShape
    from kttune.probes.gpu_pipeline import expert_stream_bytes, layer_experts
    from kttune.units import GIB, MIB

    @given(st.sampled_from(["BF16", "FP8", "RAWINT4"]), st.sampled_from([1024, 2048, 4096, 7168]),
           st.sampled_from([256, 512, 768, 1536, 2048]), st.integers(8, 512), st.sampled_from([2, 4, 8]),
           st.integers(64 * MIB, 8 * GIB))
    def law(method, h, i, e, k, cap):
        shape = MoeLayerShape(hidden=h, inter=i, experts=e, top_k=k, method=method, name="s")
        n = layer_experts(shape, cap)
        assert layer_experts(shape, None) == e  # a full probe streams the whole layer
        assert 1 <= n <= e
        assert n * expert_stream_bytes(shape) <= cap or n == min(e, 2 * k)  # within the cap, or the floor
        assert n == e or (n + 1) * expert_stream_bytes(shape) > cap  # as many as fit

    law()


def test_quick_pipeline_plan_caps_the_10gb_layers_and_keeps_two_points():
    from kttune.probes import gpu_pipeline, gpu_suite
    from kttune.probes.common import NullReporter
    from kttune.probes.gpu_common import shapes_for

    quick = [f for n, f in gpu_suite.plan_gpu_probes(None, None, True, NullReporter()) if n.startswith("pipeline")]
    full = [f for n, f in gpu_suite.plan_gpu_probes(None, None, False, NullReporter()) if n.startswith("pipeline")]
    assert [f.shape for f in quick] == [f.shape for f in full] == list(shapes_for(None).moe)
    assert all(f.max_layer_bytes is None for f in full)
    for f in quick:
        n = gpu_pipeline.layer_experts(f.shape, f.max_layer_bytes)
        assert n * gpu_pipeline.expert_stream_bytes(f.shape) <= gpu_pipeline.QUICK_LAYER_BYTES
        assert n < f.shape.experts or f.shape.method == "BF16"  # only the 1.2 GB Qwen3 layer is whole
    assert len(gpu_pipeline.QUICK_EXPERT_FRACTIONS) >= 2  # a slope, not a constant, for the cost fit
