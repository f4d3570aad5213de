"""`rank_process_group`: the helper every rank worker (the all-reduce probe, the path runner at TP > 1)
joins its group with: a failing rank's error reaches the parent as one line, and the group is left
(a rank that joins again in the same process would fail if it were not)."""

from __future__ import annotations

from typing import Any

import pytest

from kttune.probes.ranks import rank_process_group, run_ranks


def _worker(rank: int, fail_rank: int, port: int, queue: Any) -> None:
    import torch.distributed as dist

    with rank_process_group(rank, 2, "gloo", port, queue):
        size = dist.get_world_size()
        if rank == fail_rank:
            raise ValueError("boom")
    # left the group: joining a fresh one in the same process works only if it was destroyed
    assert not dist.is_initialized()
    if rank == 0 and fail_rank < 0:
        queue.put(("ok", size))


def test_ranks_report_their_result_and_leave_the_group():
    assert run_ranks(_worker, 2, (-1,), timeout_s=120) == 2


def test_a_failing_rank_reaches_the_parent_as_one_line():
    with pytest.raises(RuntimeError, match=r"^rank 1: ValueError: boom$"):
        run_ranks(_worker, 2, (1,), timeout_s=120)
