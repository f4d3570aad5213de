"""The path runner on the grid the cost model is judged by: per model, forced single forwards on
both paths (the crossover), prompts of 256..65536 tokens through the switch at chunks 4096..65536, two
GPU-expert counts; the cost model's prediction per forward, the memory model against the measured
peaks. Writes `paths.json` (the `kttune paths` result per model, plus what ran where) and `paths.md` (`paths-TAG.*`
with --tag) to --out.

    python benchmarks/bench_paths.py [--out DIR] [--models qwen3-30b-a3b:BF16,...]   # DIR: benchmarks/results/<today>-<machine>/
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from results_layout import results_dir

# model: (method, K layers, GPU expert counts, sweep sizes, threshold)
GRID = {
    "qwen3-30b-a3b": ("BF16", 2, (0, 32), (256, 512, 1024, 1536, 2048, 3072, 4096), 2048),
    "kimi-k2-thinking": ("RAWINT4", 2, (0, 32), (32, 48, 64, 96, 128, 256, 512, 1024, 2048), 1024),
    "deepseek-v3": ("FP8", 2, (0, 16), (32, 48, 64, 96, 128, 256, 512, 1024), 1024),
}
PROMPTS = (256, 1024, 5000, 16384, 32768, 65536)
CHUNKS = (4096, 16384, 65536)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--out",
        help="folder for the results (default: benchmarks/results/<today>-<this machine>/, benchmarks/results_layout.py)",
    )
    ap.add_argument("--models", default=",".join(GRID))
    ap.add_argument("--cpuinfer", type=int, default=13)
    ap.add_argument("--max-run-s", type=float, default=12.0)
    ap.add_argument("--budget-s", type=float, default=480.0, help="stop starting models after this")
    ap.add_argument("--tag", default="")
    ap.add_argument("--repeats", type=int, default=3, help="timed samples per run (the measurement protocol)")
    ap.add_argument("--resummarize", help="recompute the summaries of this results file and exit")
    a = ap.parse_args()
    if a.resummarize:
        resummarize(a.resummarize)
        return

    import torch

    from kttune.emit.paths import markdown
    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.runner.api import PathsRequest, run_paths

    machine = torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.processor() or "cpu"
    out = Path(a.out) if a.out else results_dir()
    out.mkdir(parents=True, exist_ok=True)
    name = f"paths-{a.tag}" if a.tag else "paths"
    t_start = time.perf_counter()
    blobs, md = (
        [],
        [
            f"# Path runner: measured against the cost and memory models\n\nMachine: {machine}, "
            f"{torch.cuda.device_count()} GPU(s), torch {torch.__version__}; --kt-cpuinfer {a.cpuinfer}. "
            "`K-layer ms`: wall clock of the K layers, CUDA-synchronised, whole prompt; `pred ms`: the raw "
            "cost model (shipped profile) for the same K layers; `full-model ms`: extrapolated to every layer.\n"
        ],
    )
    for name in a.models.split(","):
        if time.perf_counter() - t_start > a.budget_s:
            blobs.append({"model": name, "skipped": f"time budget of {a.budget_s:.0f} s spent"})
            continue
        method, k, ns, sweep, thr = GRID[name]
        req = PathsRequest(
            model=name,
            method=method,
            layers=k,
            gpu_experts=ns,
            chunks=CHUNKS,
            prompts=PROMPTS,
            threshold=thr,
            sweep=sweep,
            cpuinfer=a.cpuinfer,
            max_run_s=a.max_run_s,
            repeats=a.repeats,
        )
        t0 = time.perf_counter()
        try:
            with quiet_stdout(to_stderr=True):
                res = run_paths(
                    req, progress=lambda s: print(f"[{time.perf_counter() - t_start:6.1f}s] {s}", flush=True)
                )
            d = res.to_dict()
        except Exception as e:  # one model failing must not lose the others
            import traceback

            traceback.print_exc()
            d = {"model": name, "error": f"{type(e).__name__}: {e}"}
        d["wall_s"] = round(time.perf_counter() - t0, 1)
        blobs.append(d)
        if "runs" in d:
            md.append(markdown(d, f"{name} {method}, K={k} layers, threshold {thr}"))
        (out / f"{name}.json").write_text(json.dumps({"machine": machine, "results": blobs}, indent=1))
        (out / f"{name}.md").write_text("\n".join(md))
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    print(f"done in {time.perf_counter() - t_start:.0f} s")


def resummarize(path: str, profile: str = "h200-pcie5-xeon-amx-16c") -> None:
    """Recompute the summaries and the Markdown of a results file (no device needed)."""
    from kttune.emit.paths import markdown
    from kttune.hw.registry import resolve_profile

    p = Path(path)
    d = json.loads(p.read_text())
    md = [
        p.with_suffix(".md").read_text().split("\n## ")[0].split("\n\nPredictions:")[0]
        + f"\n\nPredictions: the shipped profile `{profile}` (measured on this machine kind).\n"
    ]
    from kttune.runner.api import repredict

    prof = resolve_profile(profile, None)
    repredict(d, prof)
    for blob in d["results"]:
        if "runs" not in blob:
            continue
        req = blob["request"]
        blob["summary"]["profile"] = profile
        md.append(
            markdown(blob, f"{req['model']} {req['method']}, K={req['layers']} layers, threshold {req['threshold']}")
        )
    p.write_text(json.dumps(d, indent=1))
    p.with_suffix(".md").write_text("\n".join(md))


if __name__ == "__main__":
    main()
