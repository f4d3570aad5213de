"""A test set that is not the training set: the path runner on six models across the native methods
it runs, at design points drawn by a space-filling design rather than a hand grid, for the
leave-one-model-out and leave-one-thread-count-out analysis (benchmarks/bench_transfer.py).

Models (K layers each): two BF16 families (Qwen3-30B-A3B, GLM-4.5-Air), two FP8 families
(MiniMax-M2.1, Qwen3-235B-A22B-FP8), RAWINT4 (Kimi-K2-Thinking) and FP8_PERCHANNEL (GLM-4.7).
MXFP4 (gpt-oss, DeepSeek-V4-Flash) is not run: the runner has no MXFP4 expert format and no GPU
MXFP4 MoE kernel (sglang-kt runs it through triton_kernels or its Marlin v4 path, neither importable
on the measured box).

Per model, `--points` design points from a scrambled Latin hypercube (scipy.stats.qmc, seeded by
the model's name) over: prompt length (log-uniform), chunk, threshold (a share of the chunk; the
lowest fifth is 0, layerwise off), GPU experts per layer and the `--kt-cpuinfer` thread count (the
counts the profile measured). One `kttune paths` request per (model, thread count): its kt-kernel
pool is built for that count. Plus, per model at its first thread count, forced single forwards on
both paths at three sizes around the raw model's crossover. Every run goes through the measurement
protocol (kttune.protocol, as `kttune paths` does): warmed, then `--repeats` timed samples in
interleaved rounds, each run carrying its median and interval under `timing`.

Each model runs in its own process (kt-kernel 0.7.2 keeps every layer it built until its process
ends: six models' layers in one process would hold ~75 GB). Runs the cost model predicts above
`--max-run-s` are skipped with the reason; models stop starting after `--budget-s`. Writes
paths-<tag>.json (results file format, `design` added) after every model, and the design.

    python benchmarks/bench_transfer_runs.py --out DIR [--small] [--plan] [--models a,b] [--points 6]
"""

from __future__ import annotations

import argparse
import json
import math
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

MODELS = {
    "qwen3-30b-a3b": "BF16",
    "glm-4.5-air": "BF16",
    "minimax-m2.1": "FP8",
    "qwen3-235b-a22b-fp8": "FP8",
    "kimi-k2-thinking": "RAWINT4",
    "glm-4.7": "FP8_PERCHANNEL",
}
THREADS = (11, 13, 15)  # --kt-cpuinfer counts the shipped 16-core profile measured
CHUNKS = (2048, 4096, 8192, 16384)
PROMPTS = (256, 12288)
GPU_EXPERTS_MAX = 64
# the CPU variant (--small): the same design at small shapes on this host's CPU
SMALL = dict(threads=(1,), chunks=(128, 256), prompts=(32, 512), gpu_experts_max=8)


@dataclass(frozen=True)
class DesignPoint:
    model: str
    method: str
    prompt: int
    chunk: int
    threshold: int
    gpu_experts: int
    threads: int


def design(
    model: str,
    method: str,
    n: int,
    threads: tuple[int, ...],
    chunks: tuple[int, ...],
    prompts: tuple[int, int],
    gpu_experts_max: int,
    experts: int,
    layerwise: bool,
) -> list[DesignPoint]:
    """`n` points of a scrambled Latin hypercube over (prompt, chunk, threshold, GPU experts,
    threads), seeded by the model's name so a model's points do not change with the others."""
    from scipy.stats import qmc

    u = qmc.LatinHypercube(d=5, seed=zlib.crc32(model.encode())).random(n)
    lo, hi = math.log(prompts[0]), math.log(prompts[1])
    out = []
    for a, b, c, d, e in u:
        chunk = chunks[min(len(chunks) - 1, int(b * len(chunks)))]
        thr = 0 if (c < 0.2 or not layerwise) else max(64, int(round(c * chunk / 64)) * 64)
        out.append(
            DesignPoint(
                model,
                method,
                int(round(math.exp(lo + a * (hi - lo)))),
                chunk,
                min(thr, chunk),
                int(round(d * min(experts, gpu_experts_max))),
                threads[min(len(threads) - 1, int(e * len(threads)))],
            )
        )
    return out


def sweep_sizes(model: str, method: str, profile, threads: int, n: int, small: bool) -> tuple[int, ...]:
    """Three forward sizes around the raw model's crossover (half, at, twice), for the forced runs."""
    if small:
        return (32, 128)
    from kttune.config import LaunchConfig
    from kttune.cost.components import Components
    from kttune.cost.prefill import crossover_tokens
    from kttune.spec.loader import load_model

    c = Components(profile, load_model(model, method), method, 1)
    x = crossover_tokens(c, LaunchConfig(method, 1, n, 16384, 64, 65536, threads), max_tokens=16384) or 2048
    return tuple(sorted({max(32, min(4096, int(x * f) // 32 * 32)) for f in (0.5, 1.0, 2.0)}))


def predicted_s(profile, req) -> float:
    """The raw cost model's time for a request's runs on K layers (each prompt once; warm-ups and
    repeats not counted), to plan the device time."""
    from kttune.config import LaunchConfig
    from kttune.cost.components import Components
    from kttune.cost.prefill import hybrid_moe_layer, layerwise_moe_layer
    from kttune.memory.vram import EXPAND_EVERY_PREFIX
    from kttune.spec.forwards import forward_plan
    from kttune.spec.loader import load_model

    c = Components(profile, load_model(req.model, req.method), req.method, 1)
    total = 0.0
    jobs = [(p, ch, thr, n, None) for p, ch, thr, n in req.points]
    jobs += [(m, m, m, req.gpu_experts[0], f) for m in req.sweep for f in ("hybrid", "layerwise")]
    for p, ch, thr, n, force in jobs:
        cfg = LaunchConfig(req.method, 1, n, ch, thr, 65536, req.cpuinfer)
        for path, m, prefix in forward_plan(c.method.layerwise, p, ch, thr, force):
            lt = layerwise_moe_layer(c, cfg, m) if path == "layerwise" else hybrid_moe_layer(c, cfg, m)
            total += req.layers * (lt.total_ms + c.attention_ms(m, prefix, EXPAND_EVERY_PREFIX) + c.dense_ms(m))
    return total / 1e3


def requests(points: list[DesignPoint], args, profile) -> list[tuple[str, object]]:
    """One PathsRequest per (model, threads), the model's first thread count with the forced sweep."""
    from kttune.runner.api import PathsRequest

    out = []
    for model in dict.fromkeys(p.model for p in points):
        mine = [p for p in points if p.model == model]
        first = True
        for th in sorted({p.threads for p in mine}):
            pts = [p for p in mine if p.threads == th]
            ns = tuple(sorted({p.gpu_experts for p in pts}))
            sweep = sweep_sizes(model, pts[0].method, profile, th, ns[0], args.small) if first else ()
            first = False
            out.append(
                (
                    f"{model} {pts[0].method} {th} threads",
                    PathsRequest(
                        model=model,
                        method=pts[0].method,
                        layers=args.layers,
                        gpu_experts=ns,
                        points=tuple((p.prompt, p.chunk, p.threshold, p.gpu_experts) for p in pts),
                        sweep=sweep,
                        cpuinfer=th,
                        small=args.small,
                        device="cpu" if args.small else "",
                        max_run_s=args.max_run_s,
                        repeats=args.repeats,
                        profile=args.profile,
                        cpu_max_tokens=max(p.chunk for p in pts),
                    ),
                )
            )
    return out


def measure_request(req, say):
    """Run one request through the path runner (its session and the measurement protocol)."""
    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.runner.api import run_paths

    with quiet_stdout(to_stderr=True):
        return run_paths(req, progress=say).to_dict()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--points", type=int, default=6, help="design points per model")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--small", action="store_true", help="the CPU variant: small shapes on this host's CPU")
    ap.add_argument("--plan", action="store_true", help="print the design and the predicted run times, run nothing")
    ap.add_argument("--profile", default="h200-pcie5-xeon-amx-16c", help="predictions (and the thread counts drawn)")
    ap.add_argument("--max-run-s", type=float, default=6.0)
    ap.add_argument("--budget-s", type=float, default=400.0, help="stop starting requests after this")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tag", default="")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # internal: run --models' requests here, blobs to this file
    a = ap.parse_args()
    from kttune.hw.registry import resolve_profile
    from kttune.spec.loader import load_model
    from kttune.spec.methods import get_method

    prof = resolve_profile(a.profile, None)
    cfg = SMALL if a.small else dict(threads=THREADS, chunks=CHUNKS, prompts=PROMPTS, gpu_experts_max=GPU_EXPERTS_MAX)
    points = []
    for m in a.models.split(","):
        method = MODELS[m]
        spec = load_model(m, method)
        experts = 16 if a.small else spec.num_experts  # small_spec's expert count
        points += design(
            m,
            method,
            a.points,
            cfg["threads"],
            cfg["chunks"],
            cfg["prompts"],
            cfg["gpu_experts_max"],
            experts,
            get_method(method).layerwise,
        )
    reqs = requests(points, a, prof)
    if a.child:
        run_requests(reqs, Path(a.child), a.budget_s)
        return
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = a.tag or ("transfer-small" if a.small else "transfer-h200")
    design_doc = {
        "models": {m: MODELS[m] for m in a.models.split(",")},
        "points": [asdict(p) for p in points],
        "mxfp4": "not run: the runner has no MXFP4 expert format or GPU MXFP4 MoE kernel",
        "args": {k: v for k, v in vars(a).items()},
    }
    (out / f"design-{tag}.json").write_text(json.dumps(design_doc, indent=1) + "\n")
    plan_s = 0.0
    for label, r in reqs:
        est = 0.0 if a.small else predicted_s(prof, r)
        plan_s += est
        print(
            f"{label}: {len(r.points)} points {[p[:3] + (f'n={p[3]}',) for p in r.points]}, sweep {r.sweep}"
            + ("" if a.small else f", predicted {est:.1f} s once each"),
            flush=True,
        )
    if not a.small:
        print(f"predicted run time, each run once: {plan_s:.0f} s (plus stack builds, warm-ups and repeats)")
    if a.plan:
        return
    t0 = time.perf_counter()
    blobs: list[dict] = []
    for model in dict.fromkeys(p.model for p in points):
        if time.perf_counter() - t0 > a.budget_s:
            blobs.append(
                {
                    "request": {"model": model, "method": MODELS[model]},
                    "skipped": f"time budget of {a.budget_s:.0f} s spent",
                }
            )
            continue
        blobs += run_model_process(model, a, a.budget_s - (time.perf_counter() - t0))
        (out / f"paths-{tag}.json").write_text(
            json.dumps({"machine": machine_label(a.small), "design": design_doc, "results": blobs}, indent=1)
        )
        print(f"[{time.perf_counter() - t0:6.1f}s] {model} done", flush=True)
    print(f"done in {time.perf_counter() - t0:.0f} s: {out / f'paths-{tag}.json'}")


def machine_label(small: bool) -> str:
    import platform

    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() and not small else platform.processor() or "cpu"


def run_model_process(model: str, a, budget_s: float) -> list[dict]:
    """The model's requests in a fresh process (see the module docstring); its results blobs."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "blobs.json"
        argv = [
            sys.executable,
            __file__,
            "--out",
            a.out,
            "--models",
            model,
            "--points",
            str(a.points),
            "--layers",
            str(a.layers),
            "--profile",
            a.profile,
            "--max-run-s",
            str(a.max_run_s),
            "--repeats",
            str(a.repeats),
            "--budget-s",
            str(budget_s),
            "--child",
            str(dest),
        ]
        if a.small:
            argv.append("--small")
        p = subprocess.run(argv)
        if p.returncode or not dest.is_file():
            return [
                {
                    "request": {"model": model, "method": MODELS[model]},
                    "error": f"the model's process exited {p.returncode}",
                }
            ]
        return json.loads(dest.read_text())


def run_requests(reqs, dest: Path, budget_s: float) -> None:
    """In the model's process: every request (none started after `budget_s`), its blob written after each."""
    blobs: list[dict] = []
    t0 = time.perf_counter()
    for label, r in reqs:
        t1 = time.perf_counter()
        if t1 - t0 > budget_s:
            blobs.append(
                {
                    "request": {"model": r.model, "method": r.method, "cpuinfer": r.cpuinfer},
                    "skipped": "time budget spent",
                }
            )
            continue
        try:
            d = measure_request(r, lambda s: print(f"[{time.perf_counter() - t0:6.1f}s] {s}", flush=True))
        except Exception as e:  # one request failing must not lose the others
            import traceback

            traceback.print_exc()
            d = {
                "request": {"model": r.model, "method": r.method, "cpuinfer": r.cpuinfer},
                "error": f"{type(e).__name__}: {e}",
            }
        d["wall_s"] = round(time.perf_counter() - t1, 1)
        blobs.append(d)
        dest.write_text(json.dumps(blobs))
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass


if __name__ == "__main__":
    main()
