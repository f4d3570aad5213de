"""Wall time of a model-evaluated search (target: 1000 trials under 30 s on a 2-core box).

    python benchmarks/bench_search.py [--trials 1000] [--models qwen3-30b-a3b kimi-k2-thinking ...]

Each run uses a fresh journal file (real Optuna storage, as `kttune search` does) and the default
shipped profile; it reports trials, wall seconds, per-trial ms and the pick, and where it ran.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from kttune import app
from kttune.app import resolve
from kttune.units import GIB

DEFAULT_MODELS = ("qwen3-30b-a3b", "minimax-m2.1", "kimi-k2-thinking", "deepseek-v3")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    ap.add_argument("--vram", default="80G")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in a.models:
            inp = app.resolve_inputs(name, resolve.vram_bytes(a.vram), host_ram_bytes=2048 * GIB)
            t0 = time.perf_counter()
            res = app.search(inp, trials=a.trials, seed=0, storage=os.path.join(d, f"{name}.journal")).result
            wall = time.perf_counter() - t0
            c = res.best.cfg
            rows.append(
                {
                    "model": name,
                    "method": inp.request.method,
                    "trials": res.trials_new,
                    "wall_s": round(wall, 2),
                    "ms_per_trial": round(wall / max(1, res.trials_new) * 1e3, 2),
                    "feasible": res.trials_feasible,
                    "pick": f"n={c.num_gpu_experts} chunk={c.chunked_prefill_size} thr={c.gpu_prefill_token_threshold} "
                    f"kv={c.max_total_tokens} threads={c.cpuinfer_threads}",
                }
            )
    from kttune.probes.inventory import host_line

    where = host_line()
    if a.json:
        print(json.dumps({"machine": where, "runs": rows}, indent=1))
        return
    print(f"model-evaluated search, {a.trials} trials each, VRAM {a.vram}, on {where}")
    print(f"{'model':<20} {'method':<8} {'trials':>6} {'wall s':>7} {'ms/trial':>9} {'feasible':>8}  pick")
    for r in rows:
        print(
            f"{r['model']:<20} {r['method']:<8} {r['trials']:>6} {r['wall_s']:>7} {r['ms_per_trial']:>9} {r['feasible']:>8}  {r['pick']}"
        )


if __name__ == "__main__":
    main()
