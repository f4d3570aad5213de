"""The path runner at tensor parallelism: one process per GPU (NCCL), or per CPU rank over gloo (the
CPU variant), each building its I/tp share of the same K layers (attention heads, shared and GPU
experts sharded; CPU experts on rank 0 at full width) and running the same prompts; each layer's
attention and MoE outputs are all-reduced; the layerwise load runs sglang-kt's loop: rank 0's writer
fills every rank's share of an expert into that rank's slot in shared memory
(kttune.runner.tp_slots), a barrier of all ranks closes every expert, then each rank copies its own
share. Rank 0's records come back."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class TpJob:
    model: str
    method: str
    tp: int
    stack: Any  # StackOptions (rank/tp/device are set per process)
    prompts: tuple[tuple, ...]  # (L, chunk, threshold, force[, prompt seed: 0 if left out])
    small: bool = False
    backend: str = ""  # "" = nccl when CUDA has tp GPUs, else gloo
    keep_hidden: bool = True  # return each prompt's last hidden states (the checks'; a timing run needs none)


def _worker(rank: int, job: TpJob, port: int, queue: Any) -> None:
    import torch

    from kttune.runner.path_runner import Dist, PathRunner
    from kttune.runner.stack import build_stack, small_spec
    from kttune.probes.ranks import rank_process_group
    from kttune.spec.loader import load_model

    backend = job.backend or ("nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= job.tp else "gloo")
    device = f"cuda:{rank}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)
    with rank_process_group(rank, job.tp, backend, port, queue, reraise=True):
        spec = load_model(job.model, job.method)
        if job.small:
            spec = small_spec(spec)
        st = build_stack(spec, spec.router, job.method, replace(job.stack, tp=job.tp, rank=rank, device=device))
        runner = PathRunner(st, dist=Dist(rank, job.tp))
        out = []
        for p, c, t, f, *seed in job.prompts:
            run = runner.run_prompt(p, c, t, f, seed=seed[0] if seed else 0)
            hidden = runner.last_hidden.float().cpu().numpy() if job.keep_hidden else None  # no shared tensors
            out.append((run.to_dict(), hidden))
        runner.close()
        st.close()
        if rank == 0:
            queue.put(("ok", out))


def run_tp(job: TpJob, timeout_s: float = 600.0) -> list[tuple[dict, Any]]:
    """Run `job` on `job.tp` processes; returns rank 0's (PathRun dict, last hidden states as a numpy
    array) per prompt."""
    from kttune.probes.ranks import run_ranks

    return run_ranks(_worker, job.tp, (job,), timeout_s)


def sweep_tp(job: TpJob, sizes: tuple[int, ...], rounds: int, seed: int = 0, timeout_s: float = 900.0) -> list[Any]:
    """Every size of `sizes` as one forward (chunk = threshold = size) forced onto each path, at
    `job.tp` ranks: each once untimed (warm-up), then `rounds` rounds in the measurement protocol's
    shuffled order (kttune.protocol), all in one job (the ranks' processes built once). Returns one
    PathRun per (size, path), the sample nearest the median, with the rounds' estimates under `timing`
    (as `kttune paths` records a run: kttune.runner.api.representative_run); round r's runs draw their
    prompt with `prompt_seed(seed, r)`, as `kttune paths` does. `job.prompts` is ignored."""
    from kttune.protocol import Protocol, prompt_seed
    from kttune.runner.api import representative_run
    from kttune.runner.result import PathRun

    items = [(m, path) for m in sizes for path in ("hybrid", "layerwise")]
    proto = Protocol(repeats=rounds, seed=seed)
    order = [(r, it) for r in range(rounds) for it in proto.order(items, r)]
    prompts = tuple((m, m, m, path) for m, path in items) + tuple(
        (m, m, m, path, prompt_seed(seed, r)) for r, (m, path) in order
    )
    out = run_tp(replace(job, prompts=prompts, keep_hidden=False), timeout_s)
    timed = [PathRun.from_dict(d) for d, _ in out[len(items) :]]
    runs = []
    for it in items:
        tries = [(r, run) for (r, i), run in zip(order, timed) if i == it]
        est = proto.estimate([run.measured_ms for _, run in tries], [r for r, _ in tries])
        runs.append(representative_run([run for _, run in tries], est, proto))
    return runs
