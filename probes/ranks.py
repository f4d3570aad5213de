"""One process per rank for the probes that need torch.distributed (the all-reduce probe, the path
runner at TP > 1): spawn `ranks` processes running `target(rank, *args, port, queue)`, wait for rank
0's `("ok", payload)` or `("error", message)` on the queue, and reap them. Inside a rank,
`rank_process_group` joins the group, reports a failure to the parent and always leaves the group."""

from __future__ import annotations

import os
import queue as q
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from kttune.net import free_port


def run_ranks(target: Callable[..., None], ranks: int, args: tuple, timeout_s: float) -> Any:
    """Rank 0's payload; RuntimeError with the rank's message if a rank failed or none answered."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    procs = [ctx.Process(target=target, args=(r, *args, port, queue)) for r in range(ranks)]
    for p in procs:
        p.start()
    try:
        status, payload = queue.get(timeout=timeout_s)
    except q.Empty:
        status, payload = "error", f"no result from rank 0 within {timeout_s:.0f} s"
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
    if status != "ok":
        raise RuntimeError(payload)
    return payload


@contextmanager
def rank_process_group(
    rank: int, ranks: int, backend: str, port: int, queue: Any, reraise: bool = False
) -> Iterator[None]:
    """In a rank's process: join the `ranks`-process group (`backend` over TCP on localhost:`port`),
    run the body, put `("error", "rank R: Type: message")` on `queue` if it raises (re-raised when
    `reraise`, so the rank's traceback reaches its stderr), and destroy the group in every case."""
    import torch.distributed as dist

    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ranks)
    try:
        yield
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it
        queue.put(("error", f"rank {rank}: {type(e).__name__}: {e}"))
        if reraise:
            raise
    finally:
        dist.destroy_process_group()
