"""The layerwise load at TP 2 as sglang-kt runs it (two processes: over gloo on the CPU, serially; over
NCCL on two GPUs, the overlapped host loop with pinned shared slots): rank 0's writer alone fills both
ranks' slots in shared memory, the other rank writes nothing; after one layer each rank's GPU layer
holds exactly its own I/tp share of every streamed expert (checked byte for byte against the
checkpoint tensors), and no shared-memory file is left behind."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from kttune.probes.ranks import rank_process_group, run_ranks

TP = 2


def _worker(rank: int, method: str, writer_kind: str, device: str, port: int, queue: Any) -> None:
    import torch.distributed as dist

    from kttune.kernels.expert_weights import HostExperts, KtExpertWriter, TorchExpertWriter
    from kttune.runner.path_runner import Dist
    from kttune.runner.pipeline import LayerPipeline, PipelineConfig
    from kttune.runner.tp_slots import PeerWritten, SharedSlots

    cuda = device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    torch.set_num_threads(1)
    with rank_process_group(rank, TP, "nccl" if cuda else "gloo", port, queue, reraise=True):
        experts, first = 6, 1  # expert 0 stands for a GPU-resident one (not streamed)
        host = HostExperts.random(method, 256, 256, experts, seed=5)  # the same weights on both ranks
        writer: Any = PeerWritten()
        if rank == 0:
            writer = KtExpertWriter(host, threads=1) if writer_kind == "kt" else TorchExpertWriter(host)
        d = Dist(rank, TP)
        slots = SharedSlots(d, pin=cuda)
        dev = f"cuda:{rank}" if cuda else "cpu"
        pl = LayerPipeline(
            host, writer, PipelineConfig(2, 1), dev, first=first, tp=TP, barrier=d.barrier, slot_factory=slots
        )
        for t in pl.gpu.dst.values():
            t.view(torch.uint8).fill_(0xEE)
        if cuda:
            pl.run()
        else:
            pl.run_serial()
        bad = [
            (e, name)
            for e in range(first, experts)
            for name, want in host.expected(e, TP, rank).items()
            if not torch.equal(
                pl.gpu.dst[name][e].cpu().contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)
            )
        ]
        left = [f for f in os.listdir("/dev/shm") if f.startswith(slots.tag)] if os.path.isdir("/dev/shm") else []
        writer.close()
        slots.close()
        mismatches = [None] * TP
        dist.all_gather_object(mismatches, (bad, left))
        if rank == 0:
            queue.put(("ok", mismatches))


def _skip_without_kt_writer(method: str) -> None:
    from kttune.kernels.expert_weights import HostExperts
    from kttune.kernels.kt_moe import KtMoeLayer

    try:
        KtMoeLayer.for_writer(HostExperts.random(method, 256, 256, 2, seed=1), threads=1).close()
    except (RuntimeError, ImportError) as ex:
        pytest.skip(f"kt-kernel has no {method} writer here: {ex}")


def _check(method: str, writer_kind: str, device: str) -> None:
    if writer_kind == "kt":
        _skip_without_kt_writer(method)
    per_rank = run_ranks(_worker, TP, (method, writer_kind, device), timeout_s=300)
    for rank, (bad, left) in enumerate(per_rank):
        assert bad == [], (rank, bad[:4])
        assert left == [], (rank, left)


@pytest.mark.parametrize("writer_kind", ["torch", pytest.param("kt", marks=pytest.mark.kt)])
@pytest.mark.parametrize("method", ["BF16", "FP8"])
def test_rank0_writes_every_ranks_share(method, writer_kind):
    _check(method, writer_kind, "cpu")


@pytest.mark.gpu
@pytest.mark.kt
@pytest.mark.parametrize("method", ["BF16", "FP8"])
def test_rank0_writes_every_ranks_share_on_two_gpus(method):
    if torch.cuda.device_count() < TP:
        pytest.skip(f"needs {TP} GPUs")
    _check(method, "kt", "cuda")


def test_too_little_shared_memory_is_a_clear_error(tmp_path):
    """A slot file mapped beyond a tmpfs's free space faults on first touch; the factory says so first."""
    from kttune.runner.tp_slots import check_space

    check_space(str(tmp_path), 1)
    with pytest.raises(RuntimeError, match=r"MiB free and the TP layerwise slots need .* --shm-size"):
        check_space(str(tmp_path), 2**62)
