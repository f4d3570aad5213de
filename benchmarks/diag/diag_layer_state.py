"""What the path runner's per-layer times depend on beyond the work: the order the GPU-expert counts
run in, the first layer of a prompt against the ones after it, the host's page size and torch's
CPU threads. Prints one line per forward (MoE part of each of the K layers, ms) with the seconds
since the stack was built and the process's anonymous huge pages.

    python benchmarks/diag/diag_layer_state.py order deepseek-v3 FP8 0,16 64,128 [reps]
    python benchmarks/diag/diag_layer_state.py first qwen3-30b-a3b BF16 0 256,1024
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from kttune.runner.path_runner import PathRunner
from diag_common import diag_stack
from kttune.spec.loader import load_model


def thp_state() -> str:
    base = Path("/sys/kernel/mm/transparent_hugepage")
    parts = []
    for f in ("enabled", "defrag"):
        p = base / f
        parts.append(f"{f}={p.read_text().strip() if p.exists() else '?'}")
    return " ".join(parts)


def anon_huge_mib() -> int:
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1]) // 1024
    return -1


def main() -> None:
    mode, name, method = sys.argv[1], sys.argv[2], sys.argv[3]
    ns = [int(x) for x in sys.argv[4].split(",")]
    sizes = [int(x) for x in sys.argv[5].split(",")]
    reps = int(sys.argv[6]) if len(sys.argv) > 6 else 4
    layers = 3 if mode == "order" else 4
    spec = load_model(name, method)
    print(f"# {name} {method} K={layers} THP {thp_state()} torch threads {torch.get_num_threads()}", flush=True)
    t0 = time.perf_counter()
    st = diag_stack(spec, method, layers=layers, max_tokens=max(sizes + [128]))
    built = time.perf_counter()
    print(f"# built in {built - t0:.1f} s, anon huge pages {anon_huge_mib()} MiB; {st.cpu_backend}", flush=True)

    def show(tag: str, r: PathRunner, m: int, path: str) -> None:
        run = r.run_prompt(m, m, m, path)
        f = run.forwards[0]
        print(
            f"{tag} M={m} {path:9s} moe "
            + " ".join(f"{x:7.1f}" for x in f.moe_ms)
            + "  attn "
            + " ".join(f"{x:5.1f}" for x in f.attn_ms)
            + f"  t={time.perf_counter() - built:5.1f}s huge={anon_huge_mib()}MiB",
            flush=True,
        )

    if mode == "order":
        for rep in range(reps):
            for n in ns:
                st.set_gpu_experts(n)
                r = PathRunner(st)
                r.run_prompt(64, 64, 64, "layerwise")  # the slot
                for m in sizes:
                    for i in range(2):
                        show(f"rep {rep} n={n} try {i}", r, m, "hybrid")
                for i in range(2):
                    show(f"rep {rep} n={n} try {i}", r, sizes[0], "layerwise")
    else:
        st.set_gpu_experts(ns[0])
        r = PathRunner(st)
        r.run_prompt(64, 64, 64, "hybrid")
        r.run_prompt(128, 64, 0, "hybrid")
        r.run_prompt(64, 64, 64, "layerwise")
        threads = torch.get_num_threads()
        for variant in ("default", "torch-1-thread", "sleep-0.2s", "default-again"):
            torch.set_num_threads(1 if variant == "torch-1-thread" else threads)
            for m in sizes:
                for path in ("layerwise", "hybrid"):
                    for i in range(3):
                        if variant.startswith("sleep"):
                            time.sleep(0.2)
                        show(f"{variant} try {i}", r, m, path)
        torch.set_num_threads(threads)
    st.close()


if __name__ == "__main__":
    main()
