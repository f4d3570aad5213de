"""Repeatability of the CPU probe, and the CPU MoE throughput table it measures.

Runs `run_probe` twice with the same options (quick by default), pairs every measured point of the
two profiles (same curve kind, params and x) and reports the relative difference
|a - b| / mean(a, b): its median over all points (the issue's criterion: within 10 %), p90, and
the share of points within 10 %. Then prints CPU MoE time and tokens/s per method, thread count and
token count (run 1), and stage A throughput.

    python benchmarks/bench_cpu_probe.py            # quick probe, twice
    python benchmarks/bench_cpu_probe.py --full     # full probe (long)
    python benchmarks/bench_cpu_probe.py --methods BF16,RAWINT4 --threads 15,16
"""

from __future__ import annotations

import argparse
import statistics
import time

from kttune.hw.profile import HardwareProfile
from kttune.probes.common import NullReporter
from kttune.probes.run import CpuLoadMonitor, ProbeOptions, run_probe
from kttune.units import MIB


def _key(c) -> tuple:
    return (c.kind,) + tuple(sorted((k, str(v)) for k, v in c.params.items()))


def paired_differences(a: HardwareProfile, b: HardwareProfile) -> list[tuple[tuple, float, float, float]]:
    """[(curve key, x, t_a, t_b)] for every point measured in both profiles."""
    bs = {_key(c): {p.x: p.t_ms for p in c.points} for c in b.curves}
    out = []
    for c in a.curves:
        other = bs.get(_key(c), {})
        for p in c.points:
            if p.x in other:
                out.append((_key(c), p.x, p.t_ms, other[p.x]))
    return out


def rel_diff(a: float, b: float) -> float:
    return abs(a - b) / ((a + b) / 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="full probe instead of --quick")
    ap.add_argument("--methods", default="", help="comma-separated KT methods")
    ap.add_argument("--threads", default="", help="comma-separated thread counts")
    ap.add_argument("--max-tokens", type=int, default=None)
    args = ap.parse_args()
    opts = ProbeOptions(
        quick=not args.full,
        methods=tuple(m for m in args.methods.split(",") if m),
        threads=tuple(int(t) for t in args.threads.split(",") if t),
        max_tokens=args.max_tokens,
        write_cache=False,
        gpu=False,
        command="benchmarks/bench_cpu_probe.py",
    )
    runs, walls, others = [], [], []
    for _ in range(2):
        t0 = time.perf_counter()
        load = CpuLoadMonitor()
        runs.append(run_probe(opts, NullReporter()))
        walls.append(time.perf_counter() - t0)
        others.append(load.other_share())
    a, b = runs
    print(f"machine: {a.provenance.machine}")
    print(
        f"kt-kernel {a.inventory.software.kt_kernel} ({a.inventory.software.kt_cpu_variant}), "
        f"torch {a.inventory.software.torch}, timer {a.timer.resolution_ns:.0f} ns ({a.timer.clocksource})"
    )
    print(f"probe wall time: run 1 {walls[0]:.1f} s, run 2 {walls[1]:.1f} s ({'quick' if opts.quick else 'full'})")
    print(
        "CPU used by other processes during the runs: "
        + ", ".join(f"{o * 100:.0f} %" if o is not None else "?" for o in others)
        + " of all CPUs (anything above a few % makes the two runs disagree)"
    )

    pairs = paired_differences(a, b)
    print(f"\nrepeatability over {len(pairs)} paired points (|a-b| / mean):")
    for kind in ("cpu_moe", "stage_a_write", None):
        sel = [rel_diff(ta, tb) for k, _, ta, tb in pairs if kind is None or k[0] == kind]
        if not sel:
            continue
        q = statistics.quantiles(sel, n=10, method="inclusive") if len(sel) >= 2 else [sel[0]] * 9
        within = sum(d <= 0.10 for d in sel) / len(sel)
        print(
            f"  {kind or 'all':14s} n={len(sel):3d}  median {statistics.median(sel) * 100:5.1f} %  "
            f"p90 {q[-1] * 100:5.1f} %  within 10 %: {within * 100:5.1f} %"
        )
    worst = sorted(pairs, key=lambda r: -rel_diff(r[2], r[3]))[:5]
    print("  worst points:")
    for k, x, ta, tb in worst:
        params = dict(k[1:])
        print(f"    {k[0]} {params.get('method')} threads={params.get('threads')} x={x:g}: {ta:.3f} vs {tb:.3f} ms")

    print("\nCPU MoE layer forward (run 1 / run 2 ms; tokens/s from run 1)")
    bmap = {_key(c): {p.x: p.t_ms for p in c.points} for c in b.curves}
    print(
        f"  {'method':8s} {'threads':>7s} {'H/I/E/k':>16s} {'tokens':>7s} {'ms':>9s} {'ms(2)':>9s} {'tok/s':>9s}  kernel"
    )
    for c in sorted(
        a.curves_of("cpu_moe"), key=lambda c: (c.params["hidden"], c.params["method"], c.params["threads"])
    ):
        p = c.params
        shape = f"{p['hidden']}/{p['inter']}/{p['experts']}/{p['top_k']}"
        for pt in c.points:
            t2 = bmap.get(_key(c), {}).get(pt.x)
            t2s = f"{t2:9.3f}" if t2 is not None else f"{'-':>9s}"
            print(
                f"  {p['method']:8s} {p['threads']:7d} {shape:>16s} {int(pt.x):7d} {pt.t_ms:9.3f} {t2s} "
                f"{pt.x / pt.t_ms * 1e3:9.1f}  {c.backend} {p.get('kernel', '')}"
            )
        for s in c.skipped:
            if s.get("x"):
                print(f"  {p['method']:8s} {p['threads']:7d} {shape:>16s} {int(s['x']):7d}   skipped: {s['reason']}")

    print("\nStage A write_weight_scale_to_buffer (run 1)")
    for c in sorted(a.curves_of("stage_a_write"), key=lambda c: (c.params["method"], c.params["threads"])):
        for pt in c.points:
            print(
                f"  {c.params['method']:8s} threads {c.params['threads']:3d}  {pt.x / MIB:8.2f} MiB/expert  "
                f"{pt.t_ms:8.3f} ms  {pt.x / pt.t_ms / 1e6:7.2f} GB/s  ({'pinned' if pt.extra.get('pinned') else 'pageable'})"
            )
    for n in a.provenance.notes:
        print(f"note: {n}")


if __name__ == "__main__":
    main()
