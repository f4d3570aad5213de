"""Wall time and memory of the serving simulator.

    python benchmarks/bench_simulate.py [--requests 10000] [--models qwen3-30b-a3b kimi-k2-thinking]
    python benchmarks/bench_simulate.py --scale 100000 1000000 10000000 [--model qwen3-30b-a3b]

Default: for each model, the paper's two workload presets and each schedule it simulates
`--requests` requests at the given rate on the GPU box's measured profile (flags: chunk 8192,
threshold 4096 where the method has layerwise, 8 GPU experts, 32 running, KV 256K tokens) and
prints the wall seconds and the iterations simulated (target: 10,000 requests in under 10 s).

--scale N...: runs the real command `kttune simulate -m MODEL --profile h200-pcie5-xeon-amx-16c
--requests N --schedules chunked --json` (default workload rag and default rate) in a child process
per N, samples its resident memory (psutil) every half second, and prints the wall time, the peak
RSS (the kernel's ru_maxrss of that child, from wait4) and the largest RSS sampled up to each
quarter of the run, so that memory flat in N shows (target: 10,000,000 requests within 2 GB).

Both print where they ran, with the load average (the machine may be shared).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from kttune.sim.engine import SCHEDULES
from kttune.app.simulation import simulation_inputs
from kttune.sim.simulate import simulate_one
from kttune.probes.inventory import host_line

RATES = {"arxiv-summarize": 0.05, "sharegpt-chat": 0.3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--models", nargs="*", default=["qwen3-30b-a3b", "kimi-k2-thinking"])
    ap.add_argument("--profile", default="h200-pcie5-xeon-amx-16c")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--scale", nargs="*", type=int, help="request counts for the memory run of the real command")
    ap.add_argument("--model", default="qwen3-30b-a3b")
    a = ap.parse_args()
    if a.scale:
        scale(a.scale, a.model, a.profile, a.json)
        return
    rows = []
    load_start = os.getloadavg()[0]
    for name in a.models:
        for wl, rate in RATES.items():
            inp = simulation_inputs(
                name, a.profile, workload=wl, rate=rate, requests=a.requests, gpu_experts=8, this_machine=None
            )
            for s in inp.schedules:
                t0 = time.perf_counter()
                r = simulate_one(inp.comp, inp.cfg, inp.requests, s, inp.slo)
                wall = time.perf_counter() - t0
                rows.append(
                    {
                        "model": name,
                        "workload": wl,
                        "rate_per_s": rate,
                        "schedule": s.name,
                        "requests": r.requests,
                        "iterations": r.iterations,
                        "simulated_s": round(r.duration_s),
                        "wall_s": round(wall, 2),
                    }
                )
    where = f"{host_line()}, 1-min load average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    if a.json:
        print(json.dumps({"machine": where, "runs": rows}, indent=1))
        return
    print(f"serving simulator, {a.requests} requests per run, profile {a.profile}, on {where}")
    print(
        f"{'model':<18} {'workload':<16} {'rate':>5} {'schedule':<8} {'iterations':>10} {'simulated s':>11} {'wall s':>7}"
    )
    for r in rows:
        print(
            f"{r['model']:<18} {r['workload']:<16} {r['rate_per_s']:>5} {r['schedule']:<8} {r['iterations']:>10} "
            f"{r['simulated_s']:>11} {r['wall_s']:>7}"
        )
    worst = max(r["wall_s"] for r in rows)
    print(f"slowest run: {worst} s for {a.requests} requests ({'under' if worst < 10 else 'OVER'} the 10 s target)")


def _run_child(argv: list[str]) -> dict:
    """Run argv, sampling its RSS; its wall time, its own peak RSS (wait4's ru_maxrss of that
    child) and the samples."""
    import subprocess
    import sys
    import tempfile

    import psutil

    t0 = time.perf_counter()
    with tempfile.TemporaryFile(mode="w+") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, text=True)
        proc, samples = psutil.Process(child.pid), []
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            try:
                samples.append((time.perf_counter() - t0, proc.memory_info().rss))
            except psutil.Error:
                pass
            time.sleep(0.5)
        wall = time.perf_counter() - t0
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            sys.exit(f"{' '.join(argv)} exited {child.returncode}")
        out.seek(0)
        result = json.loads(out.read())
    return {"wall_s": wall, "peak_rss_bytes": usage.ru_maxrss * 1024, "samples": samples, "result": result}


def scale(counts: list[int], model: str, profile: str, as_json: bool) -> None:
    import shutil
    import sys

    exe = shutil.which("kttune") or sys.exit("kttune is not on PATH")
    load_start = os.getloadavg()[0]
    rows = []
    for n in sorted(counts):
        argv = [
            exe,
            "simulate",
            "-m",
            model,
            "--profile",
            profile,
            "--requests",
            str(n),
            "--schedules",
            "chunked",
            "--json",
        ]
        r = _run_child(argv)
        s = r["result"]["schedules"][0]
        quarters = []
        for q in (0.25, 0.5, 0.75, 1.0):
            at = [rss for t, rss in r["samples"] if t <= q * r["wall_s"]]
            quarters.append(max(at) if at else 0)
        rows.append(
            {
                "requests": n,
                "wall_s": round(r["wall_s"], 1),
                "peak_rss_mib": round(r["peak_rss_bytes"] / 2**20),
                "rss_mib_by_quarter": [round(b / 2**20) for b in quarters],
                "iterations": s["iterations"],
                "rate_per_s": r["result"]["workload"]["rate_per_s"],
                "ttft_p50_s": s["ttft_s"]["p50"],
                "ttft_p99_s": s["ttft_s"]["p99"],
                "tbt_p99_ms": s["tbt_ms"]["p99"],
                "attainment": s["attainment"],
                "quantiles_exact": s["quantiles_exact"],
                "command": " ".join(["kttune"] + argv[1:]),
            }
        )
    where = f"{host_line()}, 1-min load average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    if as_json:
        print(json.dumps({"machine": where, "runs": rows}, indent=1))
        return
    print(f"kttune simulate in bounded memory, {model}, profile {profile}, default workload (rag) and rate, on {where}")
    print(
        f"{'requests':>10} {'wall s':>8} {'us/req':>7} {'peak RSS MiB':>12} {'RSS MiB at 1/4 1/2 3/4 end':>27} "
        f"{'iterations':>11} {'TTFT p50/p99 s':>15} {'exact':>5}"
    )
    for r in rows:
        qs = " ".join(f"{v:>5}" for v in r["rss_mib_by_quarter"])
        print(
            f"{r['requests']:>10,} {r['wall_s']:>8} {1e6 * r['wall_s'] / r['requests']:>7.0f} {r['peak_rss_mib']:>12} {qs:>27} "
            f"{r['iterations']:>11,} {r['ttft_p50_s']:>7.2f}/{r['ttft_p99_s']:<7.2f} {str(r['quantiles_exact']):>5}"
        )
    big = rows[-1]
    print(
        f"largest run: {big['requests']:,} requests in {big['wall_s']} s, peak RSS {big['peak_rss_mib']} MiB "
        f"({'within' if big['peak_rss_mib'] <= 2048 else 'OVER'} the 2 GB target); command: {big['command']}"
    )


assert SCHEDULES  # the schedules benchmarked are all of kttune.sim.engine.SCHEDULES
if __name__ == "__main__":
    main()
