"""Record the CUDA caching allocator's history over one path-runner forward and save the snapshot
(replayed offline to list what is alive at the forward's peak, by allocating source line).

    python benchmarks/diag/diag_memory_trace.py --model deepseek-v3:FP8 --n 16 --tokens 4096 --path hybrid --out snap.pickle
"""

from __future__ import annotations

import argparse
import pickle


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="deepseek-v3:FP8")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--path", default="hybrid")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import torch

    from kttune.runner.path_runner import PathRunner
    from diag_common import diag_stack
    from kttune.spec.loader import load_model

    name, method = a.model.split(":")
    spec = load_model(name, method)
    st = diag_stack(spec, method, max_tokens=a.tokens, cpu_max_tokens=4096)
    st.set_gpu_experts(a.n)
    r = PathRunner(st)
    r.run_prompt(64, 64, 0, "hybrid")
    r.run_prompt(64, 64, 64, "layerwise")
    r.run_prompt(a.tokens, a.tokens, a.tokens, a.path)
    torch.cuda.memory._record_memory_history(max_entries=200000, stacks="python")
    run = r.run_prompt(a.tokens, a.tokens, a.tokens, a.path)
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(a.out, "wb") as fh:
        pickle.dump({"snapshot": snap, "peak": run.peak_allocated_bytes, "run": run.to_dict()}, fh)
    print(f"{a.model} n={a.n} {a.tokens} {a.path}: peak {run.peak_allocated_bytes / 2**30:.3f} GiB", flush=True)
    st.close()


if __name__ == "__main__":
    main()
