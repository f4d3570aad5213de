"""How well a derived profile predicts a measured one: the measured 16-core H200 box
(profiles/h200-pcie5-xeon-amx-16c.json) scaled to 32 cores by `kttune.hw.derive`, against the measured
32-core two-GPU box (profiles/h200x2-pcie5-xeon-amx-32c.json), at every CPU MoE and stage A point
both hold. Prints predicted / measured per point and writes
benchmarks/results/<today>-computed/derive-16c-to-32c.json. No timing: both profiles were measured on the GPU boxes.

    python benchmarks/bench_derive.py
"""

from __future__ import annotations

import json

from kttune.hw.derive import Change, CpuTarget, derive_profile, serial_fractions
from kttune.hw.registry import load_shipped
from results_layout import COMPUTED, results_dir

SRC, DST = "h200-pcie5-xeon-amx-16c", "h200x2-pcie5-xeon-amx-32c"


def main() -> None:
    src, dst = load_shipped(SRC), load_shipped(DST)
    cpu = dst.inventory.cpu
    derived = derive_profile(src, Change(cpu=CpuTarget(cores=cpu.physical_cores, isa=cpu.isa))).profile
    rows = []
    for kind in ("cpu_moe", "stage_a_write"):
        for c in dst.curves_of(kind):
            p = c.params
            if p["threads"] >= cpu.physical_cores:
                continue
            keys = (
                ("method", "threads", "hidden", "inter", "experts", "top_k")
                if kind == "cpu_moe"
                else ("method", "threads")
            )
            pred = {}
            for d in derived.curves_of(kind, **{k: p[k] for k in keys}):
                for q in d.points:
                    pred[(q.x, q.extra.get("hidden"), q.extra.get("inter"), q.extra.get("layer_experts"))] = q.t_ms
            for q in c.points:
                key = (q.x, q.extra.get("hidden"), q.extra.get("inter"), q.extra.get("layer_experts"))
                if key in pred:
                    rows.append(
                        {
                            "kind": kind,
                            "method": p["method"],
                            "threads": p["threads"],
                            "x": q.x,
                            "predicted_ms": pred[key],
                            "measured_ms": q.t_ms,
                            "ratio": pred[key] / q.t_ms,
                        }
                    )
    for r in rows:
        print(
            f"{r['kind']:13s} {r['method']:8s} {r['threads']:3d} threads  x {r['x']:>10g}: predicted {r['predicted_ms']:8.3f} ms, "
            f"measured {r['measured_ms']:8.3f} ms, ratio {r['ratio']:.2f}"
        )
    worst = max(max(r["ratio"], 1 / r["ratio"]) for r in rows)
    print(
        f"{len(rows)} points, worst {worst:.2f}x; serial share fitted on {SRC}, per method: cpu_moe "
        f"{serial_fractions(src)}, stage A {serial_fractions(src, 'stage_a_write')}"
    )
    out = results_dir(COMPUTED) / "derive-16c-to-32c.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"source": SRC, "target": DST, "worst_factor": worst, "points": rows}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
