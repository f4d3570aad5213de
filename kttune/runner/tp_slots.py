"""Stage A's host slots at TP > 1, laid out as sglang-kt lays them (docs/sglang-kt.md#layerwise-prefill-at-tp--1):
every GPU rank has its own pinned slot, all of them in shared memory and mapped into rank 0, whose one
kt-kernel write per expert (`write_weight_scale_to_buffer_task` with one destination per rank) puts
each rank's I/tp share into that rank's slot. The other ranks write nothing: they pass the per-expert
barrier and copy their slot to their GPU.

`SharedSlots` is the `LayerPipeline`'s slot factory: called with the same arguments in the same order
on every rank (the ranks run the same prompts), it creates one file per rank under /dev/shm (rank 0),
maps it in every process that needs it, and removes the names once every rank has mapped them, so no
file outlives the run. On CUDA each rank pins its own mapping (`cudaHostRegister`) for its copy
engine; rank 0's mappings of the others are only written by the CPU."""

from __future__ import annotations

import itertools
import os
from typing import Any, Sequence

import torch

from kttune.kernels.expert_weights import HostSlot

SHM_DIR = "/dev/shm"
_SERIAL = itertools.count()


def _shm_dir() -> str:
    return SHM_DIR if os.path.isdir(SHM_DIR) else os.environ.get("TMPDIR", "/tmp")


def check_space(directory: str, nbytes: int) -> None:
    """Raise a one-line error when `directory` (a tmpfs: /dev/shm) has less than `nbytes` free: a file
    mapped there beyond its free space faults on first touch (SIGBUS) instead of failing cleanly.
    Containers get 64 MB of /dev/shm unless told otherwise; sglang-kt's own TP slots need the same."""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    if free < nbytes:
        raise RuntimeError(
            f"{directory} has {free / 2**20:.0f} MiB free and the TP layerwise slots need {nbytes / 2**20:.0f} MiB: "
            "give the container more shared memory (docker run --shm-size=...G) or free some"
        )


class SharedSlots:
    """Slot factory for one `LayerPipeline` at TP: `dist` has the rank, the TP size and the barrier
    (kttune.runner.path_runner.Dist); `pin` registers each rank's own mapping with CUDA."""

    def __init__(self, dist: Any, pin: bool):
        self.dist, self.pin = dist, pin
        # the same on every rank: the launching process and this process's count of factories
        self.tag = f"kttune-tp{dist.tp}-{os.getppid()}-{next(_SERIAL)}"
        self._registered: list[torch.Tensor] = []
        self.notes: list[str] = []

    def _path(self, index: int, rank: int) -> str:
        return os.path.join(_shm_dir(), f"{self.tag}-slot{index}-rank{rank}")

    def _map(self, path: str, nbytes: int) -> torch.Tensor:
        return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)

    def _pin(self, t: torch.Tensor) -> torch.Tensor:
        if not self.pin:
            return t
        err = torch.cuda.cudart().cudaHostRegister(t.data_ptr(), t.numel(), 0)
        if int(err) != 0:
            self.notes.append(f"cudaHostRegister of a shared slot failed ({err}): its copies run from pageable memory")
        else:
            self._registered.append(t)
        return t

    def __call__(self, kinds: Sequence[Any], group: int, index: int) -> HostSlot:
        rank, tp = self.dist.rank, self.dist.tp
        n = HostSlot.nbytes(kinds, group)
        paths = [self._path(index, r) for r in range(tp)]
        if rank == 0:
            check_space(os.path.dirname(paths[0]), n * tp)
            maps = [self._map(p, n) for p in paths]  # creates the files
        self.dist.barrier()
        if rank != 0:
            own = self._map(paths[rank], n)
        self.dist.barrier()  # every rank has mapped its file: the names can go
        if rank == 0:
            for p in paths:
                os.unlink(p)
            own = maps[0]
        slot = HostSlot(kinds, group, buffer=self._pin(own))
        if rank == 0:
            slot.peers = (slot,) + tuple(HostSlot(kinds, group, buffer=m) for m in maps[1:])
        return slot

    def close(self) -> None:
        for t in self._registered:
            torch.cuda.cudart().cudaHostUnregister(t.data_ptr())
        self._registered.clear()


class PeerWritten:
    """The stage A writer of a rank other than 0 at TP: rank 0 writes this rank's share into its slot
    (`SharedSlots`); here there is nothing to do but wait for the barrier, which the pipeline passes."""

    backend = "rank 0's writer (shared slots)"
    asynchronous = True
    stream_capable = False

    def submit(self, experts: range, slot: HostSlot) -> None:
        pass

    def wait(self) -> None:
        pass

    def close(self) -> None:
        pass
