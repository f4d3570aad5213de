"""The layerwise pipeline's bookkeeping (kttune.runner.pipeline: slots, one-copy staging ring, stage C
batches) on the CPU. The overlapped drivers need CUDA streams and are checked on the GPU box
(tests/probes/test_gpu_probes.py)."""

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
        ("MXFP4", PipelineConfig(2, 1, post_batch=4)),
    ],
)
def test_serial_run_delivers_every_expert(method, cfg):
    if method in ("RAWINT4", "MXFP4") and not triton_int4.available("cpu"):
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
            if method in ("RAWINT4", "MXFP4"):  # repacked: [in/8, out] words (MXFP4's bytes as int32)
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


def test_a_label_names_its_configuration_back():
    for cfg in (PipelineConfig(2, 1), PipelineConfig(2, 2, 1, "stream"), PipelineConfig(3, 1, 4, "stream")):
        assert PipelineConfig.from_label(cfg.label()) == cfg
    assert PipelineConfig.from_label("slots=4") == PipelineConfig(4, 1)
    for bad in ("slots=2,ring=3", "slots", "slots=two", "slots=1,group=1", "driver=thread"):
        with pytest.raises(ValueError):
            PipelineConfig.from_label(bad)
