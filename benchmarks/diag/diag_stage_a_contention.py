"""Does stage A (kt-kernel writing an expert into a pinned slot) slow down while DMA copies read and
write host memory? The layerwise loop runs stage A beside the copies of the previous expert; on the
32-core two-GPU box the loop's stage A took 1.4-1.5x the stage A probe's time for the same expert
(`2026-12-04-h200x2-pcie5-xeon-amx-32c/diag-tp-pipeline.log`), on the 16-core box the two agree.
The candidate cause is the host's memory bandwidth, shared by the writes and the DMA engines.

On one GPU: stage A writes of one expert shape, cycling over a layer larger than the last-level cache,
timed alone, beside a stream of host-to-device copies (the loop's stage B), and beside copies both
ways (twice the DMA traffic, what two GPUs' stage B put on the host at TP 2), in shuffled interleaved
rounds; the copies' own rate is timed with CUDA events in the same windows. Needs CUDA and kt-kernel.

    python benchmarks/diag/diag_stage_a_contention.py [--threads 11,15] [--shape 4096x1408] [--rounds 7] --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

GIB = 1 << 30


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="11,15")
    ap.add_argument("--shape", default="4096x1408", help="HxI of the expert (BF16)")
    ap.add_argument("--layer-gib", type=float, default=4.0, help="source bytes the writes cycle over")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--writes", type=int, default=40, help="timed writes per window")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    import torch

    from kttune.kernels.expert_weights import HostExperts, HostSlot, expert_nbytes, slot_kinds, write_nbytes
    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.kernels.kt_moe import KtMoeLayer
    from kttune.probes.inventory import collect_cpu, host_line

    h, i = (int(v) for v in a.shape.split("x"))
    method = "BF16"
    experts = max(4, int(a.layer_gib * GIB // expert_nbytes(method, h, i)))
    cpu = collect_cpu()
    host = HostExperts.random(method, h, i, experts)
    threads = [int(t) for t in a.threads.split(",")]
    layers = {}
    for t in threads:
        with quiet_stdout(to_stderr=True):
            layers[t] = KtMoeLayer(host, top_k=1, threads=t, max_tokens=1, isa=cpu.isa, writer=True)
    slot = HostSlot(slot_kinds(method, h, i), 1, pin=True)
    ptr = list(zip(slot.ptrs(0)))
    nbytes = write_nbytes(method, h, i)
    # the DMA load: 1 GiB pinned buffers each way
    src_h = torch.empty(GIB, dtype=torch.uint8).pin_memory()
    dst_d = torch.empty(GIB, dtype=torch.uint8, device="cuda")
    src_d = torch.empty(GIB, dtype=torch.uint8, device="cuda")
    dst_h = torch.empty(GIB, dtype=torch.uint8).pin_memory()
    h2d, d2h = torch.cuda.Stream(), torch.cuda.Stream()
    state = {"e": 0}

    def window(t: int, load: str, writes: bool = True) -> dict:
        lay = layers[t]
        for _ in range(3):  # warm-up writes
            lay.write_expert(state["e"], *ptr)
            state["e"] = (state["e"] + 1) % experts
        events = []
        copies = 0 if load == "none" else 40  # ~0.8 s of copies per direction at 50 GB/s
        for stream, dst, src, on in ((h2d, dst_d, src_h, load != "none"), (d2h, dst_h, src_d, load == "both")):
            if not on:
                continue
            with torch.cuda.stream(stream):
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(copies):
                    dst.copy_(src, non_blocking=True)
                e1.record()
                events.append((e0, e1))
        if copies:
            time.sleep(0.05)  # the copies under way
        ms = []
        while writes and len(ms) < a.writes or not all(e1.query() for _, e1 in events):
            if not writes:  # the copies alone: the host only waits
                time.sleep(0.002)
                continue
            s = time.perf_counter()
            lay.write_expert(state["e"], *ptr)
            ms.append(round((time.perf_counter() - s) * 1e3, 4))  # 0.1 us
            state["e"] = (state["e"] + 1) % experts
        torch.cuda.synchronize()
        gbps = [round(copies * GIB / (e0.elapsed_time(e1) * 1e6), 2) for e0, e1 in events]
        return {"threads": t, "load": load, "writes": writes, "write_ms": ms, "copy_gbps": gbps}

    out = {
        "host": host_line(),
        "shape": [h, i],
        "expert_write_bytes": nbytes,
        "layer_experts": experts,
        "windows": [],
    }
    # every (threads, copies) window with writes, and the copies alone (their rate without stage A)
    keys = [(t, load, True) for t in threads for load in ("none", "h2d", "both")]
    keys += [(threads[0], load, False) for load in ("h2d", "both")]
    rng = random.Random(0)
    t0 = time.perf_counter()
    for r in range(a.rounds):
        rng.shuffle(keys)
        for t, load, writes in keys:
            w = window(t, load, writes)
            w["round"] = r
            out["windows"].append(w)
        print(f"[{time.perf_counter() - t0:6.1f}s] round {r + 1}/{a.rounds}", flush=True)
    for load in ("h2d", "both"):
        gb = [g for w in out["windows"] if w["load"] == load and not w["writes"] for g in w["copy_gbps"]]
        print(f"copies {load:5s} alone: {statistics.median(gb):.1f} GB/s each [{min(gb):.1f}-{max(gb):.1f}]")
    for t in threads:
        for load in ("none", "h2d", "both"):
            ws = [w for w in out["windows"] if w["threads"] == t and w["load"] == load and w["writes"]]
            med = [statistics.median(w["write_ms"]) for w in ws]
            gb = [g for w in ws for g in w["copy_gbps"]]
            print(
                f"{t:3d} threads, copies {load:5s}: write {statistics.median(med):.3f} ms "
                f"[{min(med):.3f}-{max(med):.3f}] = {nbytes / statistics.median(med) / 1e6:.1f} GB/s"
                + (f"; copies {statistics.median(gb):.1f} GB/s each" if gb else ""),
                flush=True,
            )
    for lay in layers.values():
        lay.close()
    Path(a.out).write_text(json.dumps(out, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
