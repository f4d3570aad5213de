"""Why the path runner's layerwise MoE takes longer than the pipeline probe's layer for the same
layer: at GLM-4.7's FP8_PERCHANNEL layer (3.8 GB) on the H200 box the runner's layerwise MoE took
108-122 ms at 11 threads (stream driver, slots=2,group=2) and the pipeline probe's layer 76.5 ms. In
one process, on one runner stack, from the runner's way to the probe's:
- the runner end to end: forced layerwise forwards, the MoE part of each of the K layers as it reports;
- the runner's steps one by one: its own pipeline object's `run()` (the layer's load alone), then the
  GPU MoE over the loaded slot (synchronised), then the runner's MoE again;
- the probe's measurement on the runner's pipeline object (`LayerPipeline.measure`: stages alone and
  the overlapped layer);
- the probe's way: a fresh host layer, a fresh kt-kernel writer, a fresh pipeline (as
  kttune.probes.gpu_pipeline builds them), measured the same way;
- the process's pages per NUMA node (/proc/self/numa_maps) after each step.
Nothing is asserted; one JSON line per step.
    python benchmarks/diag/diag_layerwise_gap.py glm-4.7 FP8_PERCHANNEL 11 [slots=2,group=2,driver=stream] [tokens]
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from pathlib import Path

import torch

from kttune.kernels.gpu_experts import GpuExperts
from kttune.runner.path_runner import PathRunner
from kttune.runner.pipeline import LayerPipeline, PipelineConfig
from diag_common import diag_stack
from kttune.spec.loader import load_model


def numa_pages() -> dict:
    """Resident pages per NUMA node of this process (numa_maps' N<node>=<pages> fields, summed)."""
    out: dict = {}
    try:
        for line in Path("/proc/self/numa_maps").read_text().splitlines():
            for node, pages in re.findall(r"\bN(\d+)=(\d+)", line):
                out[f"N{node}"] = out.get(f"N{node}", 0) + int(pages)
    except OSError as e:
        out["error"] = type(e).__name__
    return out


def say(step: str, **kw) -> None:
    print(json.dumps({"step": step, **kw, "numa_pages": numa_pages()}), flush=True)


def med(xs):
    return round(statistics.median(xs), 2) if xs else None


def main() -> None:
    name, method, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    label = sys.argv[4] if len(sys.argv) > 4 else "slots=2,group=2,driver=stream"
    m = int(sys.argv[5]) if len(sys.argv) > 5 else 384
    reps = 5
    spec = load_model(name, method)
    cfg = PipelineConfig.from_label(label)
    t0 = time.perf_counter()
    st = diag_stack(spec, method, gpu_experts=8, threads=threads, max_tokens=m)
    say("built", s=round(time.perf_counter() - t0, 1), backend=st.cpu_backend, pipeline=label)
    r = PathRunner(st, cfg)

    def runner_moe() -> list[list[float]]:
        out = []
        for _ in range(reps):
            run = r.run_prompt(m, m, m, "layerwise")
            out.append([round(x, 2) for x in run.forwards[0].moe_ms])
        return out

    r.run_prompt(m, m, m, "layerwise")  # warm
    first = runner_moe()
    say("runner layerwise moe_ms per layer", tokens=m, runs=first, median=med([sum(x) / len(x) for x in first]))

    pl = st.pipeline
    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(m, spec.hidden_size, generator=g, device="cuda", dtype=torch.bfloat16).mul_(0.5)
    ids = torch.randint(0, spec.num_experts, (m, spec.top_k), generator=g, device="cuda")
    w = torch.full((m, spec.top_k), 1.0 / spec.top_k, device="cuda")
    loads, computes = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        a = time.perf_counter()
        pl.run()
        torch.cuda.synchronize()
        b = time.perf_counter()
        GpuExperts(st.method, pl.gpu.dst).forward(h, ids, w)
        torch.cuda.synchronize()
        c = time.perf_counter()
        loads.append((b - a) * 1e3)
        computes.append((c - b) * 1e3)
    say(
        "runner pipeline run() alone, then the GPU MoE",
        load_ms=med(loads),
        compute_ms=med(computes),
        loads=[round(x, 1) for x in loads],
    )

    res = pl.measure(3)
    say("probe measure on the runner's pipeline", **res.extra())

    again = runner_moe()
    say("runner layerwise moe_ms again", runs=again, median=med([sum(x) / len(x) for x in again]))

    from kttune.kernels.expert_weights import HostExperts, make_writer

    host = HostExperts.random(method, spec.hidden_size, spec.moe_intermediate_size, spec.num_experts)
    writer, notes = make_writer(host, threads)
    fresh = LayerPipeline(host, writer, cfg, "cuda")
    res2 = fresh.measure(3)
    say("probe measure on a fresh host layer, writer and pipeline", writer=writer.backend, notes=notes, **res2.extra())
    del fresh
    writer.close()
    torch.cuda.empty_cache()

    last = runner_moe()
    say("runner layerwise moe_ms at the end", runs=last, median=med([sum(x) / len(x) for x in last]))
    st.close()


if __name__ == "__main__":
    main()
