"""Does a small probe layer read its experts from the cache? The quick CPU MoE probe's layer
(1,024 x 512, 32 experts: 100 MB in BF16, 25 MB in int4) fits in the H200 box's 300 MB last-level
cache, where it stays between timed calls; a server's forward reads every layer's experts from DRAM
in turn. `CpuMoeOptions.cold_bytes` cycles such a layer over copies until their weights reach it (here
twice the cache, as the quick stage A source: `kttune.probes.run.cold_cpu_moe_options`); the probe's
default is one layer (docs/probe.md#the-quick-layer-in-the-cache says why). Until 2026-12-07 (the
twenty-fourth session) the cold variant took the probe's options, whose cold bytes had become 0, so
the `COLD=1` calls of 2026-12-06 and 2026-12-07 (H100 instances m, n, o, p, ae, af, ag) timed the
layer warm twice; their files say `cold_bytes 0` in their command. A cold variant that cycles over
no copies is now refused.

This measures both in one process, alternating (warm, cold, warm, cold, ...): the quick probe's
`cpu_moe` curves with one layer (cold_bytes 0) and with the copies, each written as a profile
(`warm-<i>.profile.json`, `cold-<i>.profile.json` under --out) that `bench_shape_law_probe.py --base`
reads to predict models' own curves of the same instance.

    python benchmarks/bench_cpu_moe_cold.py --out DIR [--threads 11] [--rounds 2] [--max-tokens 1024] [--cold-mib 256,1536,6144]

`--max-tokens` times the layer further than the quick probe's 256 tokens (64 rows an expert): to
1,024, the rows a BF16 model's long hybrid forwards run
(docs/probe.md#the-quick-layers-series-how-far-up-in-tokens). `--cold-mib` cycles over several sizes
in turn (`cold<MiB>-<i>.profile.json`; at most `MAX_COLD_COPIES` copies of the layer): how big a
layer must be before it runs as slowly as a model's layer of gigabytes.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path


def main() -> None:
    from kttune.hw.fingerprint import fingerprint
    from kttune.hw.profile import HardwareProfile, Provenance, save_profile
    from kttune.probes.cpu_moe import probe_cpu_moe
    from kttune.probes.inventory import collect_inventory, numa_nodes_with_cpus, usable_cores
    from kttune.probes.run import ProbeOptions, cold_cpu_moe_options
    from kttune.units import MIB

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=11)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--methods", default="", help="comma-separated KT methods (default: every one kt-kernel runs)")
    ap.add_argument("--max-tokens", type=int, default=None, help="the series' top (default: the quick probe's)")
    ap.add_argument(
        "--cold-mib",
        default="",
        help="comma-separated sizes in MiB to cycle over, each its own variant cold<MiB> (default: the probe's cold bytes)",
    )
    a = ap.parse_args()
    inv = collect_inventory()
    cpu = inv.cpu
    methods = tuple(m for m in a.methods.split(",") if m)
    cold = cold_cpu_moe_options(
        ProbeOptions(quick=True, threads=(a.threads,), methods=methods, max_tokens=a.max_tokens),
        cpu.last_level_cache_bytes,
    )
    warm = replace(cold, cold_bytes=0)
    sizes = [int(m) for m in a.cold_mib.split(",") if m]
    named = [("warm", warm)] + (
        [(f"cold{m}", replace(cold, cold_bytes=m * MIB)) for m in sizes] if sizes else [("cold", cold)]
    )
    if any(name != "warm" and o.cold_bytes <= 0 for name, o in named):
        raise SystemExit("a cold variant cycles over no copies: it would time the layer warm again")
    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for r in range(a.rounds):
        for name, opts in named:
            curves = probe_cpu_moe(opts, cpu, cores=usable_cores(cpu), numa_ids=list(numa_nodes_with_cpus(cpu)))
            prov = Provenance(
                kind="measured",
                machine=inv.cpu.model,
                created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                command=f"benchmarks/bench_cpu_moe_cold.py ({name}: cold_bytes {opts.cold_bytes})",
            )
            prof = HardwareProfile(provenance=prov, inventory=inv, curves=tuple(curves), fingerprint=fingerprint(inv))
            save_profile(prof, a.out / f"{name}-{r + 1}.profile.json")
            lines = [
                f"{c.params['method']} x{c.points[0].extra.get('source_bytes', 0) / 2**20:.0f} MiB: "
                + ", ".join(f"{p.x:.0f}: {p.t_ms:.2f}" for p in c.points)
                for c in curves
            ]
            print(f"[{time.perf_counter() - t0:6.1f}s] {name} {r + 1}\n  " + "\n  ".join(lines), flush=True)


if __name__ == "__main__":
    main()
