"""Where a layerwise load's time goes at TP 1 and TP 2 (sglang-kt's loop: kttune.runner.pipeline at
PipelineConfig(2, 1), the TP slots of kttune.runner.tp_slots): per model expert shape, one layer of
E experts at full shape, rank 0's kt-kernel writer on `--threads` workers, and in each repeat, with a
barrier of all ranks between the phases,

- stage A alone: rank 0 writes every expert (at TP 2 both ranks' shares, one `write_weight_scale_to_buffer_task` each);
- stage B alone: every rank copies its share of every expert from its slot, all ranks at once;
- the whole loop (`LayerPipeline.run`, diagnose on: where rank 0's driving thread waited, the barrier apart);
- the barrier alone (NCCL: an all-reduce of one element and a host wait), 200 in a row.

Medians over `--repeats`. One JSON line per (model, TP) on stdout and in --out.

    python benchmarks/diag/diag_tp_pipeline.py --models qwen3-30b-a3b,glm-4.5-air --threads 28 --out F
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any


def _worker(
    rank: int, tp: int, model: str, method: str, threads: int, repeats: int, small: bool, port: int, queue: Any
) -> None:
    import torch
    import torch.distributed as dist

    from kttune.kernels.expert_weights import HostExperts, KtExpertWriter
    from kttune.probes.ranks import rank_process_group
    from kttune.runner.path_runner import Dist
    from kttune.runner.pipeline import LayerPipeline, PipelineConfig
    from kttune.runner.tp_slots import PeerWritten, SharedSlots
    from kttune.spec.loader import load_model

    cuda = torch.cuda.is_available()  # else the CPU variant (gloo, serial stages): the script's own check
    if cuda:
        torch.cuda.set_device(rank)
    with rank_process_group(rank, tp, "nccl" if cuda else "gloo", port, queue, reraise=True):
        spec = load_model(model, method)
        h, i, e = spec.hidden_size, spec.moe_intermediate_size, spec.num_experts
        if small:
            h, i, e = 256, 128, 8
        host = HostExperts.random(method, h, i, e if rank == 0 else 1, seed=1)
        writer = KtExpertWriter(host, threads) if rank == 0 else PeerWritten()
        d = Dist(rank, tp)
        slots = SharedSlots(d, pin=cuda) if tp > 1 else None
        pl = LayerPipeline(
            host,
            writer,
            PipelineConfig(2, 1),
            f"cuda:{rank}" if cuda else "cpu",
            experts=e,
            tp=tp,
            barrier=d.barrier if tp > 1 else None,
            slot_factory=slots,
            diagnose=True,
        )
        sync = d.barrier if tp > 1 else (lambda: None)
        rows: dict[str, list] = {"a_alone": [], "b_alone": [], "layer": [], "barrier": []}
        hosts = []
        for r in range(repeats + 1):  # the first is warm-up
            sync()
            a = pl.stage_a_alone_ms() if rank == 0 else 0.0
            sync()
            b = pl.stage_b_alone_ms() if cuda else 0.0
            sync()
            if cuda:
                layer, _, _ = pl.run()
                host_ms = dict(pl.host_ms)
                torch.cuda.synchronize()
            else:
                t0 = time.perf_counter()
                pl.run_serial()
                layer, host_ms = (time.perf_counter() - t0) * 1e3, {}
            sync()
            t0 = time.perf_counter()
            for _ in range(200):
                sync()
            bar = (time.perf_counter() - t0) * 1e3 / 200
            if r:
                rows["a_alone"].append(a)
                rows["b_alone"].append(b)
                rows["layer"].append(layer)
                rows["barrier"].append(bar)
                hosts.append(host_ms)
        out = {k: statistics.median(v) for k, v in rows.items()}
        out["host_ms"] = {k: statistics.median(x.get(k, 0.0) for x in hosts) for k in hosts[0]} if hosts[0] else {}
        out.update(
            model=model,
            method=method,
            tp=tp,
            rank=rank,
            experts=e,
            threads=threads,
            repeats=repeats,
            expert_bytes=sum(k.nbytes for k in host.slot_kinds(1)),
        )
        writer.close()
        if slots is not None:
            slots.close()
        if tp > 1:
            got = [None] * tp
            dist.all_gather_object(got, out)
        else:
            got = [out]
        if rank == 0:
            queue.put(("ok", got))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen3-30b-a3b,glm-4.5-air")
    ap.add_argument("--method", default="BF16")
    ap.add_argument("--threads", type=int, default=28)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tp", default="1,2")
    ap.add_argument("--small", action="store_true", help="small shapes (the CPU variant's check)")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    from kttune.probes.ranks import run_ranks

    lines = []
    for model in a.models.split(","):
        for tp in (int(x) for x in a.tp.split(",")):
            got = run_ranks(_worker, tp, (tp, model, a.method, a.threads, a.repeats, a.small), timeout_s=300)
            for row in got:
                print(json.dumps(row), flush=True)
                lines.append(row)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(lines, f, indent=1)


if __name__ == "__main__":
    main()
