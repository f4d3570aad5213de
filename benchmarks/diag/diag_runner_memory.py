"""Spot check of the path runner's device peaks against the memory model (kttune paths' own
comparison, kttune/calibration/runner.py) at a few points per model: large chunks, long prefixes, both
paths. Prints one line per run: measured peak, predicted (SGLang terms + the runner-only terms), ratio.

    python benchmarks/diag/diag_runner_memory.py [--models deepseek-v3:FP8,...] [--out file.json]
"""

from __future__ import annotations

import argparse
import json
import time

POINTS = {  # model: (method, gpu_experts, [(prompt, chunk, threshold, force)])
    "qwen3-30b-a3b": (
        "BF16",
        32,
        [(4096, 4096, 0, "hybrid"), (16384, 4096, 2048, None), (65536, 16384, 2048, None), (65536, 65536, 2048, None)],
    ),
    "deepseek-v3": (
        "FP8",
        16,
        [(4096, 4096, 0, "hybrid"), (5000, 4096, 1024, None), (32768, 16384, 1024, None), (65536, 65536, 1024, None)],
    ),
    "kimi-k2-thinking": (
        "RAWINT4",
        32,
        [(2048, 2048, 0, "hybrid"), (16384, 4096, 1024, None), (65536, 65536, 1024, None)],
    ),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(f"{k}:{v[0]}" for k, v in POINTS.items()))
    ap.add_argument("--out")
    a = ap.parse_args()
    import torch

    from kttune.runner.memory import predicted_phase_peaks, predicted_runner_peak_bytes
    from kttune.runner.path_runner import PathRunner
    from diag_common import diag_stack
    from kttune.spec.loader import load_model
    from kttune.units import GIB

    rows = []
    for item in a.models.split(","):
        name, method = item.split(":")
        _, n, points = POINTS[name]
        spec = load_model(name, method)
        biggest = max(c for _, c, _, _ in points)
        t0 = time.perf_counter()
        st = diag_stack(spec, method, max_tokens=biggest, cpu_max_tokens=4096)
        r = PathRunner(st)
        print(f"{name}: stack {time.perf_counter() - t0:.1f} s", flush=True)
        for n, (p, c, thr, f) in [(n0, pt) for n0 in (0, n) for pt in points]:
            st.set_gpu_experts(n)
            r.run_prompt(64, 64, 0, "hybrid")
            r.run_prompt(64, 64, 64, "layerwise")
            run = r.run_prompt(p, c, thr, f)
            terms = predicted_runner_peak_bytes(spec, run)
            ratio = terms["total"] / run.peak_allocated_bytes
            print(
                f"  n={n} L={p} chunk={c} thr={thr} {'/'.join(run.paths)}: {run.measured_ms:.0f} ms, peak "
                f"{run.peak_allocated_bytes / GIB:.2f} GiB, predicted {terms['total'] / GIB:.2f} GiB, ratio {ratio:.3f}, "
                f"runner-only {terms['runner_activation_difference'] / GIB:.2f} GiB",
                flush=True,
            )
            for f, pp in zip(run.forwards, predicted_phase_peaks(spec, run)):
                print(
                    f"    fwd {f.tokens}@{f.prefix} {f.path}: attn {f.attn_peak_bytes / GIB:.3f} (pred {pp['attn'] / GIB:.3f}) "
                    f"moe {f.moe_peak_bytes / GIB:.3f} (pred {pp['moe'] / GIB:.3f}) GiB",
                    flush=True,
                )
            rows.append(
                {
                    "model": name,
                    "method": method,
                    "prompt": p,
                    "chunk": c,
                    "threshold": thr,
                    "force": f,
                    "gpu_experts": n,
                    "paths": list(run.paths),
                    "measured_ms": run.measured_ms,
                    "peak_allocated_bytes": run.peak_allocated_bytes,
                    "terms": terms,
                    "ratio": ratio,
                    "run": run.to_dict(),
                    "phase_predictions": predicted_phase_peaks(spec, run),
                }
            )
        st.close()
        del st, r
        torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"machine": torch.cuda.get_device_name(0), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
