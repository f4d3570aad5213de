"""Wall time of the serving simulator (target: 10,000 requests in under 10 s on a 2-core box).

    python benchmarks/bench_simulate.py [--requests 10000] [--models qwen3-30b-a3b kimi-k2-thinking]

For each model, workload preset and schedule it simulates `--requests` requests at the given rate on
the GPU box's measured profile (flags: chunk 8192, threshold 4096 where the method has layerwise,
8 GPU experts, 32 running, KV 256K tokens) and prints the wall seconds, the iterations simulated and
where it ran, with the load average (the machine may be shared).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from kttune.sim.engine import SCHEDULES
from kttune.sim.inputs import resolve
from kttune.sim.simulate import simulate_one
from kttune.probes.inventory import host_line

RATES = {"summarize": 0.05, "chat": 0.3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--models", nargs="*", default=["qwen3-30b-a3b", "kimi-k2-thinking"])
    ap.add_argument("--profile", default="h200-pcie5-xeon-amx-16c")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    load_start = os.getloadavg()[0]
    for name in a.models:
        for wl, rate in RATES.items():
            inp = resolve(name, a.profile, workload=wl, rate=rate, requests=a.requests, gpu_experts=8)
            for s in inp.schedules:
                t0 = time.perf_counter()
                r = simulate_one(inp.comp, inp.cfg, list(inp.requests), s, inp.slo)
                wall = time.perf_counter() - t0
                rows.append({"model": name, "workload": wl, "rate_per_s": rate, "schedule": s.name, "requests": r.requests,
                             "iterations": r.iterations, "simulated_s": round(r.duration_s), "wall_s": round(wall, 2)})
    where = (f"{host_line()}, "
             f"1-min load average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    if a.json:
        print(json.dumps({"machine": where, "runs": rows}, indent=1))
        return
    print(f"serving simulator, {a.requests} requests per run, profile {a.profile}, on {where}")
    print(f"{'model':<18} {'workload':<10} {'rate':>5} {'schedule':<8} {'iterations':>10} {'simulated s':>11} {'wall s':>7}")
    for r in rows:
        print(f"{r['model']:<18} {r['workload']:<10} {r['rate_per_s']:>5} {r['schedule']:<8} {r['iterations']:>10} "
              f"{r['simulated_s']:>11} {r['wall_s']:>7}")
    worst = max(r["wall_s"] for r in rows)
    print(f"slowest run: {worst} s for {a.requests} requests ({'under' if worst < 10 else 'OVER'} the 10 s target)")


assert SCHEDULES  # the schedules benchmarked are all of kttune.sim.engine.SCHEDULES
if __name__ == "__main__":
    main()
