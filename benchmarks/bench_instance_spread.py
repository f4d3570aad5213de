"""How much do instances of one machine kind differ? kt-kernel's MoE on the quick probe's layer
(1,024 x 512, 32 experts, top-8) at one thread count, in every profile of one machine kind that
measured it, grouped by instance (the GPU's UUID: one VM of a GPU box is one physical GPU; else the
profile's fingerprint and date; a layer cycled over copies past the cache left out), against the
shipped profile's curve: per method and forward size,
each instance's median over its profiles, and where the shipped profile sits among them.

    python benchmarks/bench_instance_spread.py --results benchmarks/results --machine h200-pcie5-xeon-amx-16c \
        --shipped h200-pcie5-xeon-amx-16c --threads 11 --out FILE.md
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from results_layout import write_result

from kttune.hw.profile import load_profile
from kttune.hw.registry import load_shipped
from kttune.probes.cpu_moe import layer_nbytes
from kttune.spec.moe_shape import MoeLayerShape

SHAPE = (1024, 512, 32, 8)
SIZES = (1, 16, 64, 256)


def _times(profile, threads: int) -> dict[tuple[str, float], float]:
    out = {}
    for c in profile.curves_of("cpu_moe"):
        s = c.shape
        if (s.hidden, s.inter, s.experts, s.top_k) != SHAPE or int(c.params.get("threads", 0)) != threads:
            continue
        if c.params.get("cold_bytes") or c.params.get("numa_nodes") or int(c.params.get("threadpools", 1)) != 1:
            continue
        one_layer = layer_nbytes(s.method, MoeLayerShape(s.hidden, s.inter, s.experts, s.top_k))
        # a warm layer only: a point that cycled over copies past the cache (bench_cpu_moe_cold.py) is another measurement
        out.update(
            {
                (s.method, p.x): p.t_ms
                for p in c.points
                if p.x in SIZES and p.extra.get("source_bytes", one_layer) <= one_layer
            }
        )
    return out


def _instance(profile, path: Path) -> str:
    uuids = [g.uuid for g in profile.inventory.gpus if getattr(g, "uuid", None)]
    return ",".join(u[-12:] for u in uuids) or f"{profile.fingerprint}@{path.parent.name[:10]}"


def run(results: Path, machine: str, shipped_name: str, threads: int) -> dict:
    shipped = _times(load_shipped(shipped_name), threads)
    by_instance: dict[str, list[dict]] = {}
    files = []
    for f in sorted(results.glob(f"*-{machine}/*.profile.json")):
        prof = load_profile(f)
        t = _times(prof, threads)
        if t:
            by_instance.setdefault(_instance(prof, f), []).append(t)
            files.append(str(f.relative_to(results)))
    rows = []
    for key in sorted(shipped):
        per = [
            statistics.median(t[key] for t in ts if key in t)
            for ts in by_instance.values()
            if any(key in t for t in ts)
        ]
        if len(per) < 2:
            continue
        below = sum(1 for v in per if v < shipped[key])
        rows.append(
            {
                "method": key[0],
                "tokens": key[1],
                "instances": len(per),
                "min_ms": min(per),
                "median_ms": statistics.median(per),
                "max_ms": max(per),
                "shipped_ms": shipped[key],
                "instances_faster_than_shipped": below,
            }
        )
    return {
        "machine": machine,
        "shipped": shipped_name,
        "threads": threads,
        "files": files,
        "instances": sorted(by_instance),
        "rows": rows,
    }


def markdown(doc: dict) -> str:
    lines = [
        f"# Instances of {doc['machine']}: kt-kernel MoE at {doc['threads']} threads on the quick probe's layer",
        "",
        f"{len(doc['files'])} profiles, {len(doc['instances'])} instances (per instance the median over its profiles); "
        f"the shipped profile `{doc['shipped']}` beside them.",
        "",
        "| method | tokens | instances | min ms | median ms | max ms | max / min | shipped ms | instances faster than shipped |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        lines.append(
            f"| {r['method']} | {r['tokens']:g} | {r['instances']} | {r['min_ms']:.3f} | {r['median_ms']:.3f} | "
            f"{r['max_ms']:.3f} | {r['max_ms'] / r['min_ms']:.2f}x | {r['shipped_ms']:.3f} | "
            f"{r['instances_faster_than_shipped']} of {r['instances']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "results")
    ap.add_argument("--machine", default="h200-pcie5-xeon-amx-16c")
    ap.add_argument("--shipped", default="h200-pcie5-xeon-amx-16c")
    ap.add_argument("--threads", type=int, default=11)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    doc = run(a.results, a.machine, a.shipped, a.threads)
    write_result(a.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
