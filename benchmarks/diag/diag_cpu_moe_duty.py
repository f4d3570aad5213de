"""Does kt-kernel's MoE time depend on how busy the CPU has just been? One layer, one forward size,
timed call by call: after a rest, back to back for a while, then with a gap after each call (the
runner's layers leave the CPU idle while the GPU runs attention), then back to back again. Prints
each phase's first, middle and last calls and the cores' mean clock where /proc/cpuinfo shows it.

    python benchmarks/diag/diag_cpu_moe_duty.py qwen3-30b-a3b BF16 1024
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

from kttune.kernels.expert_weights import HostExperts
from kttune.kernels.kt_ext import quiet_stdout
from kttune.kernels.kt_moe import KtMoeLayer
from kttune.kernels.routing import random_routing
from kttune.spec.loader import load_model


def mean_mhz() -> float:
    xs = [
        float(line.split(":")[1])
        for line in Path("/proc/cpuinfo").read_text().splitlines()
        if line.startswith("cpu MHz")
    ]
    return sum(xs) / len(xs) if xs else float("nan")


def main() -> None:
    name, method, m = sys.argv[1], sys.argv[2], int(sys.argv[3])
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 6.0
    spec = load_model(name, method)
    host = HostExperts.random(method, spec.hidden_size, spec.moe_intermediate_size, spec.num_experts)
    with quiet_stdout(to_stderr=True):
        layer = KtMoeLayer(host, top_k=spec.top_k, threads=13, max_tokens=m)
    x = (torch.randn(m, spec.hidden_size) * 0.5).to(torch.bfloat16)
    ids, w = random_routing(m, spec.num_experts, spec.top_k, seed=1)
    out = torch.empty(m, spec.hidden_size, dtype=torch.bfloat16)
    torch.set_num_threads(1)
    layer.forward(x, ids, w, out)
    print(f"# {name} {method} M={m} {layer.kernel_class} 13 threads", flush=True)
    for phase, gap_s, rest_s in (
        ("back to back after 3 s rest", 0.0, 3.0),
        ("5 ms gap after each", 0.005, 0.0),
        ("20 ms gap after each", 0.020, 0.0),
        ("back to back again", 0.0, 0.0),
    ):
        time.sleep(rest_s)
        xs, mhz = [], []
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            layer.forward(x, ids, w, out)
            xs.append((time.perf_counter() - t0) * 1e3)
            if len(xs) % 10 == 1:
                mhz.append(mean_mhz())
            if gap_s:
                time.sleep(gap_s)
        k = max(1, len(xs) // 10)
        print(
            f"{phase:30s} calls {len(xs):4d}  first {statistics.median(xs[:k]):7.2f}  middle "
            f"{statistics.median(xs[len(xs) // 2 - k // 2 : len(xs) // 2 + k // 2 + 1]):7.2f}  last {statistics.median(xs[-k:]):7.2f} ms"
            f"  min {min(xs):7.2f}  clock {statistics.mean(mhz):6.0f} MHz",
            flush=True,
        )
    layer.close()


if __name__ == "__main__":
    main()
