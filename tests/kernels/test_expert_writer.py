"""Stage A writers put each expert into its slot exactly as the GPU layer expects it
(w13 = gate|up rows, w2 = down, scales likewise)."""

import pytest
import torch

from kttune.kernels.expert_writer import (
    HostExperts,
    HostSlot,
    KtExpertWriter,
    TorchExpertWriter,
    expert_bytes,
    expert_tensor_kinds,
)
from kttune.spec.methods import bytes_per_expert, get_method

METHODS = ["BF16", "RAWINT4", "FP8", "FP8_PERCHANNEL"]


@pytest.mark.parametrize("method", METHODS)
def test_kinds_match_bytes_per_expert(method):
    h, i = 7168, 2048
    assert expert_bytes(expert_tensor_kinds(method, h, i)) == bytes_per_expert(get_method(method).cpu_format, h, i)


def _check(writer, host, experts):
    slot = HostSlot(host.kinds, len(experts), pin=False)
    slot.buffer.fill_(0xAB)
    writer.submit(experts, slot)
    writer.wait()
    for j, e in enumerate(experts):
        for name, want in host.expected(e).items():
            got = slot.views[name][j]
            assert torch.equal(got.view(torch.uint8), want.contiguous().view(torch.uint8)), (name, e)


@pytest.mark.parametrize("method", METHODS)
def test_torch_writer(method):
    host = HostExperts(method, 256, 128, 5, seed=3)
    _check(TorchExpertWriter(host), host, range(2, 5))


@pytest.mark.kt
@pytest.mark.parametrize("method", ["BF16", "RAWINT4", "FP8"])
def test_kt_writer(method):
    host = HostExperts(method, 256, 128, 4, seed=4)
    try:
        w = KtExpertWriter(host, threads=2)
    except RuntimeError as e:
        pytest.skip(f"kt-kernel has no {method} writer for this CPU: {e}")
    _check(w, host, range(1, 3))
    w.close()
