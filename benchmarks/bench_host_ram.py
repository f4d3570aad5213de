"""Host RAM that real kt-kernel MoE objects allocate, against kttune.memory.host's formula.

For each method, expert shape, layer count and max_len (the chunk), builds the layers in a fresh
process (`kttune.probes.host_ram.run_point`) and records the reserved (mapped) and resident growth.
Then it compares two predictions with the measurement:
  - the formula read from kt-kernel's source (`kt_allocation_bytes`, no fitted parameter), and
  - a straight line fitted on the two smallest chunks of each series, checked on the larger
    (held-out) chunks: how far a fit from small probes would carry.

    python benchmarks/bench_host_ram.py                      # the default grid (about 5 minutes on 2 cores)
    python benchmarks/bench_host_ram.py --quick
    python benchmarks/bench_host_ram.py --out FILE.json             # default: benchmarks/results/<today>-<machine>/host_ram.json
    python benchmarks/bench_host_ram.py --probe-step         # times `kttune probe`'s host RAM step (quick and full plans)

Results: benchmarks/results/<today>-<machine>/host_ram.json (a copy in tests/data/host_ram-<machine>.json is read by
tests/memory/test_host.py).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kttune.probes.host_ram import predicted_bytes, run_point
from kttune.spec.moe_shape import MoeLayerShape
from kttune.units import MIB
from kttune.probes.inventory import host_line
from results_layout import results_dir

GRID = [
    # (methods, hidden, inter, experts, top_k, layers, chunks)
    (("BF16", "FP8", "RAWINT4", "AMXINT4", "AMXINT8"), 1024, 512, 32, 8, 1, (256, 1024, 4096, 8192)),
    (("BF16", "RAWINT4"), 1024, 512, 32, 8, 2, (256, 1024, 4096, 8192)),
    (("FP8", "RAWINT4"), 1024, 512, 64, 8, 1, (256, 1024, 4096)),
    (("RAWINT4", "FP8"), 2048, 768, 128, 8, 1, (256, 1024, 4096)),
]
QUICK = [(("BF16", "RAWINT4"), 1024, 512, 32, 8, 1, (256, 1024, 4096))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="")
    ap.add_argument(
        "--probe-step",
        action="store_true",
        help="time the host RAM step of `kttune probe --quick` (and the full one with --full)",
    )
    ap.add_argument("--full", action="store_true")
    a = ap.parse_args()
    if a.probe_step:
        time_probe_step(a.full)
        return
    rows = []
    for methods, h, i, e, k, layers, chunks in QUICK if a.quick else GRID:
        for m in methods:
            shape = MoeLayerShape(hidden=h, inter=i, experts=e, top_k=k, method=m)
            series = [run_point(shape, n, layers) for n in chunks]
            (x0, y0), (x1, y1) = [(p.max_len, p.reserved_bytes) for p in series[:2]]
            slope = (y1 - y0) / (x1 - x0)
            for p in series:
                pred = predicted_bytes(p)
                line = y0 + slope * (p.max_len - x0)
                row = {
                    **p.to_dict(),
                    "predicted_bytes": pred,
                    "pred_over_reserved": pred / p.reserved_bytes,
                    "pred_over_resident": pred / p.resident_bytes,
                    "line_fit_bytes": int(line),
                    "line_over_reserved": line / p.reserved_bytes,
                    "held_out": p.max_len > x1,
                }
                rows.append(row)
                print(
                    f"{m:8s} {p.kernel:20s} H{h} I{i} E{e} L{layers} max_len {p.max_len:6d}: reserved "
                    f"{p.reserved_bytes / MIB:8.1f} MiB, resident {p.resident_bytes / MIB:8.1f} MiB, "
                    f"formula {pred / MIB:8.1f} MiB ({pred / p.reserved_bytes:5.3f}x reserved), "
                    f"line fit {line / MIB:8.1f} MiB{' (held out)' if p.max_len > x1 else ''}",
                    flush=True,
                )
    worst = max(abs(r["pred_over_reserved"] - 1) for r in rows)
    print(f"formula vs reserved: worst relative error {worst:.3f} over {len(rows)} points")
    machine = host_line()
    out = Path(a.out) if a.out else results_dir() / f"host_ram{'-quick' if a.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": machine,
                "command": "python benchmarks/bench_host_ram.py" + (" --quick" if a.quick else ""),
                "points": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {out}")


def time_probe_step(full: bool) -> None:
    """Wall time of the host RAM step as `kttune probe` plans it without --model (all methods the
    host runs; quick keeps one), on this machine."""
    import os
    import time

    from kttune.kernels.kt_ext import load_kt_kernel
    from kttune.probes.common import NullReporter, kt_thread_counts
    from kttune.probes.cpu_moe import FULL_SHAPES, QUICK_SHAPE, supported_methods
    from kttune.probes.host_ram import plan_host_ram, run_host_ram_step
    from kttune.probes.inventory import collect_cpu, usable_cores

    cpu = collect_cpu()
    methods = supported_methods(load_kt_kernel(), cpu.isa)
    for quick in (True, False) if full else (True,):
        plan = plan_host_ram(
            QUICK_SHAPE if quick else FULL_SHAPES[0],
            methods,
            quick,
            threads=max(kt_thread_counts(usable_cores(cpu), quick)),
        )
        rep = NullReporter()
        t0 = time.perf_counter()
        curves = run_host_ram_step(plan, rep)
        dt = time.perf_counter() - t0
        print(
            f"{'quick' if quick else 'full'} host RAM step on {cpu.model} ({os.cpu_count()} CPUs): {plan.steps} points "
            f"({', '.join(plan.methods)} at max_len {', '.join(map(str, plan.chunks))}; {plan.shape.label}) in {dt:.1f} s, "
            f"{len(curves)} curves, {len(rep.notes)} notes"
        )


if __name__ == "__main__":
    main()
