"""The layerwise pipeline probe of one layer, quick and full, in interleaved rounds of one process.

On H100 instance ae (2026-12-07, docs/cost-model.md "Instance ae") both quick probes streamed
Qwen3-30B-A3B's BF16 layer whole in 32.5-33.6 ms (11 threads, sglang-kt's loop) and the model's own
probe, between them in time, in 40.7 ms, where the runner's sweeps sided with the own probe. The two
modes differ in what they run around that point: the quick step times two configurations and the
layer at 1/2 and 1, the full one five configurations and the layer at 1/4, 1/2 and 1. Here each round
runs the gpu suite's pipeline step (`kttune.probes.gpu_suite.PipelineStep`) of the model's layer in
either mode, the order alternating per round, so that a drift of the machine falls on both alike.
Per round and mode: the whole layer's time and stage A in sglang-kt's loop, and the time per GiB of
each point. Needs a CUDA GPU and kt-kernel.

Run on H100 instance af (2026-12-07, "Instance af" there), four rounds: 33.3 ms median in either mode
(33.0-34.1 quick, 33.0-33.6 full), where that instance's quick and own probes read the layer at
32.6-34.9 ms: the modes agree, and ae's 40.7 ms was not their difference.

    python benchmarks/diag/diag_pipeline_modes.py --model qwen3-30b-a3b --threads 11 --rounds 3 --out DIR
        [--apart]   # the full step here and in a process of its own, in place of quick and full
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


# (label, quick, isolate): the quick and full steps where the probe runs them, or with --apart the full
# step in this process and in a process of its own (PipelineStep.apart)
MODES = (("quick", True, None), ("full", False, None))
APART = (("here", False, False), ("apart", False, True))


def one(shape, threads: int, quick: bool, isolate: bool | None = None, device: str = "cuda") -> dict:
    from kttune.probes.gpu_suite import PipelineStep

    t0 = time.perf_counter()
    curves = PipelineStep(shape, threads=(threads,), quick=quick, isolate=isolate, device=device)()
    wall = time.perf_counter() - t0
    if not curves:
        return {"quick": quick, "wall_s": wall, "error": "no curve"}
    c = curves[0]
    pts = sorted(c.points, key=lambda p: p.x)
    full = pts[-1]
    loop = next(iter((full.extra.get("configs") or {}).values()), {})
    return {
        "quick": quick,
        "wall_s": round(wall, 2),
        "layer_ms": full.t_ms,
        "layer_ms_p10": full.t_ms_p10,
        "layer_ms_p90": full.t_ms_p90,
        "stage_a_ms": loop.get("a"),
        "stage_b_ms": loop.get("b"),
        "configs": full.extra.get("configs"),
        "ms_per_gib": [round(p.t_ms / (p.x / 2**30), 2) for p in pts],
        "bytes": [int(p.x) for p in pts],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen3-30b-a3b")
    ap.add_argument("--method", default="BF16")
    ap.add_argument("--threads", type=int, default=11)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--apart",
        action="store_true",
        help="the full step here and in a process of its own, in place of quick and full",
    )
    ap.add_argument("--device", default="cuda", help="cpu: the stages on the CPU, one after another (a dry run)")
    a = ap.parse_args()
    from kttune import app
    from kttune.spec.moe_shape import MoeLayerShape

    shape = MoeLayerShape.of_model(app.model_spec(a.model), method=a.method)
    rows = []
    a.out.mkdir(parents=True, exist_ok=True)
    modes = APART if a.apart else MODES
    out = a.out / f"diag-pipeline-modes-{a.model}{'-apart' if a.apart else ''}.json"
    for r in range(a.rounds):
        for label, quick, isolate in modes if r % 2 == 0 else modes[::-1]:
            row = {"round": r, "mode": label, **one(shape, a.threads, quick, isolate, a.device)}
            rows.append(row)
            print(
                f"round {r} {label:5}: layer {row.get('layer_ms', float('nan')):.1f} ms, "
                f"stage A {row.get('stage_a_ms')}, ms/GiB {row.get('ms_per_gib')}, {row['wall_s']:.0f} s",
                flush=True,
            )
            out.write_text(json.dumps({"args": vars(a) | {"out": str(a.out)}, "rows": rows}, indent=1))
    for label, _, _ in modes:
        xs = [r["layer_ms"] for r in rows if r["mode"] == label and "layer_ms" in r]
        if xs:
            print(
                f"{label}: layer median {statistics.median(xs):.1f} ms over {len(xs)} rounds ({min(xs):.1f}-{max(xs):.1f})"
            )


if __name__ == "__main__":
    main()
