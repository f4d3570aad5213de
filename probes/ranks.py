"""One process per rank for the probes that need torch.distributed (the all-reduce probe, the path
runner at TP > 1): spawn `ranks` processes running `target(rank, *args, port, queue)`, wait for rank
0's `("ok", payload)` or `("error", message)` on the queue, and reap them."""

from __future__ import annotations

import os
import queue as q
from typing import Any, Callable

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
