"""MXFP4 and MXFP8 on the CPU: kt-kernel's own MX classes timed, against what the cost model charged
them before the probe could time them (the curves of the nearest measured method of the same bits per
weight, rescaled by bytes per expert: `Components._pick_cpu_method`).

Until 2026-12-07 the CPU probe built no MX layer, so a model served with MXFP4 (gpt-oss, DeepSeek-V4-Flash)
or MXFP8 (MiniMax-M3) was predicted from AMXINT4's or AMXINT8's curves. The probe now builds both
(`kttune.kernels.mx`; tests/probes/test_cpu_moe.py holds kt-kernel's forward to the dequantized
weights) and times them for a model served with one. This measures, at each model's own expert
shape, in shuffled rounds in one process, the MX method and the methods the cost model would have
substituted, and writes one profile a round (`measure`); `report` reads them back:

- the MX method's time over each substitute's, at each token count (median and range over rounds);
- the cost model's prediction of the MX forward from a profile without MX curves (what it read before)
  and from one with them, against the measured MX time of each round held out in turn: the curves
  the prediction reads come from the other rounds (their median).

    python benchmarks/bench_mx_methods.py measure --out DIR [--threads 1] [--rounds 3] [--models gpt-oss-20b,gpt-oss-120b]
    python benchmarks/bench_mx_methods.py report DIR --out FILE_STEM [--gpu-from h200-pcie5-xeon-amx-16c] [--prefix mx-]

The GPU curves the cost model needs beside the CPU ones come from the shipped profile `--gpu-from`;
the CPU MoE prediction does not read them.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

# The methods of the same bits per weight the probe timed before (the cost model read the first of
# them in name order that a profile holds); every method the probe times unasked is measured, as a
# probe of the model before 2026-12-07 would have (a method kt-kernel cannot build at the model's
# shape is skipped and says why: AMXINT4 and FP8 at gpt-oss's 2,880-wide experts).
SUBSTITUTES = {"MXFP4": ("AMXINT4", "RAWINT4"), "MXFP8": ("AMXINT8", "FP8", "FP8_PERCHANNEL")}
TOKENS = (1, 4, 16, 64, 256)


def measure(a: argparse.Namespace) -> None:
    """Each (round, model) in a process of its own: kt-kernel 0.7.2 never frees an AMX-family layer
    (docs/path-runner.md#kt-kernels-amx-layers-are-never-freed), and one process building every
    method's layer of gpt-oss-120b round after round ran the 24 GB VM out of memory. A profile already
    written is kept (an interrupted run resumes)."""
    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for r in range(a.rounds):
        for name in a.models.split(","):
            if (a.out / f"mx-{name}-{r}.profile.json").exists():
                continue
            argv = [sys.executable, __file__, "one", "--out", str(a.out), "--threads", str(a.threads)]
            rc = subprocess.run(argv + ["--round", str(r), "--model", name]).returncode
            print(f"round {r} {name}: rc {rc}, {time.perf_counter() - t0:.0f} s", flush=True)


def measure_one(a: argparse.Namespace) -> None:
    """One round of one model: every method (`SUBSTITUTES`' and the probe's defaults) in a shuffled
    order, at the model's expert shape, one profile."""
    from kttune.hw.fingerprint import fingerprint
    from kttune.hw.profile import HardwareProfile, Provenance, save_profile
    from kttune.probes.cpu_moe import DEFAULT_METHODS, CpuMoeOptions, probe_cpu_moe, shape_from_model
    from kttune.probes.inventory import collect_inventory, numa_nodes_with_cpus, usable_cores
    from kttune.spec.loader import load_model

    inv = collect_inventory()
    cpu = inv.cpu
    spec = load_model(a.model)
    order = list(dict.fromkeys([*SUBSTITUTES, *(m for subs in SUBSTITUTES.values() for m in subs), *DEFAULT_METHODS]))
    random.Random(f"{a.round}-{a.model}").shuffle(order)
    curves = []
    for m in order:
        opts = CpuMoeOptions(
            shapes=(shape_from_model(spec),),
            tokens=TOKENS,
            methods=(m,),
            threads=(a.threads,),
            quick=True,
            warmup=1,
            repeats=3,
            min_total_s=0.2,
            max_repeats=10,
            max_point_s=5.0,
        )
        curves += probe_cpu_moe(opts, cpu, cores=usable_cores(cpu), numa_ids=list(numa_nodes_with_cpus(cpu)))
    prov = Provenance(
        kind="measured",
        machine=cpu.model,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        command=f"benchmarks/bench_mx_methods.py measure (round {a.round}, {a.model}, {a.threads} threads, order {order})",
    )
    prof = HardwareProfile(provenance=prov, inventory=inv, curves=tuple(curves), fingerprint=fingerprint(inv))
    save_profile(prof, a.out / f"mx-{a.model}-{a.round}.profile.json")


def _points(prof, method: str) -> dict[int, float]:
    c = next(c for c in prof.curves if c.kind == "cpu_moe" and c.params.get("method") == method)
    return {int(p.x): p.t_ms for p in c.points}


def _median_profile(profs: list, methods: set[str]):
    """The rounds' curves of `methods`, each point the median over the rounds."""
    curves = []
    for c in profs[0].curves:
        if c.kind != "cpu_moe" or c.params.get("method") not in methods:
            continue
        pts = [_points(p, c.params["method"]) for p in profs]
        ys = {x: statistics.median(pt[x] for pt in pts if x in pt) for x in pts[0]}
        curves.append(replace(c, points=tuple(replace(p, t_ms=ys[int(p.x)]) for p in c.points)))
    return replace(profs[0], curves=tuple(curves))


def report(a: argparse.Namespace) -> None:
    from bench_shape_law_probe import quick_cpu_on
    from results_layout import write_result

    from kttune.cost.components import Components
    from kttune.hw.profile import load_profile
    from kttune.hw.registry import load_shipped
    from kttune.spec.loader import load_model

    shipped = load_shipped(a.gpu_from)
    files = sorted(a.dir.glob(f"{a.prefix}*.profile.json"))
    by_model: dict[str, list[Path]] = {}
    for f in files:
        by_model.setdefault(f.name[len(a.prefix) : f.name.rindex("-")], []).append(f)
    rows = []
    for name, paths in sorted(by_model.items()):
        spec = load_model(name)
        profs = [load_profile(p) for p in paths]
        threads = profs[0].curves_of("cpu_moe")[0].params["threads"]
        measured = {c.params["method"] for c in profs[0].curves_of("cpu_moe")}
        for mx, all_subs in SUBSTITUTES.items():
            subs = tuple(s for s in all_subs if s in measured)
            row = {"model": name, "method": mx, "rounds": len(profs), "threads": threads, "ratios": {}, "errors": {}}
            mx_pts = [_points(p, mx) for p in profs]
            for s in subs:
                r = [
                    {x: pt[x] / sp[x] for x in pt if x in sp} for pt, sp in zip(mx_pts, (_points(p, s) for p in profs))
                ]
                row["ratios"][s] = {
                    str(x): {
                        "median": statistics.median(rr[x] for rr in r),
                        "min": min(rr[x] for rr in r),
                        "max": max(rr[x] for rr in r),
                    }
                    for x in TOKENS
                    if all(x in rr for rr in r)
                }
            # held out: each round's MX time against a prediction from the other rounds' curves
            before = measured - set(SUBSTITUTES)
            for label, keep in (("without MX curves", before), ("with MX curves", before | {mx})):
                errs = {str(x): [] for x in TOKENS}
                picked, notes = None, []
                for i in range(len(profs)):
                    rest = [p for j, p in enumerate(profs) if j != i] or profs
                    comp = Components(quick_cpu_on(_median_profile(rest, keep), shipped), spec, mx)
                    picked, notes = comp._cpu_method, [n for n in comp.notes if "not measured" in n]
                    for x in TOKENS:
                        if x in mx_pts[i]:
                            pred = comp.cpu_moe_ms(x, spec.num_experts, threads)
                            errs[str(x)].append(pred / mx_pts[i][x] - 1.0)
                row["errors"][label] = {
                    "curves_read": picked,
                    "notes": notes,
                    "by_tokens": {
                        x: {"median": statistics.median(e), "worst": max(e, key=abs)} for x, e in errs.items() if e
                    },
                }
            rows.append(row)
    result = {
        "what": "kt-kernel's MX classes against the substitutes the cost model read before the probe timed them",
        "machine": profs[0].inventory.cpu.model if rows else "",
        "profiles": [f.name for f in files],
        "gpu_from": a.gpu_from,
        "rows": rows,
    }
    md = [
        "# MXFP4 and MXFP8 on the CPU: measured, and what the cost model charged them before",
        "",
        f"Machine: {result['machine']}; {len(files)} profiles in `{a.dir.name}` (one a round and model, methods in "
        "shuffled order). Ratio: the MX method's time over the substitute's at the same token count (median "
        "[min, max] over rounds). Error: the cost model's prediction of each round's MX forward, from the other "
        "rounds' curves, over the measured time, minus 1 (median, worst).",
        "",
        "| model | method | threads | tokens | MX / same-bits method measured | error, without MX curves (reads) | error, with MX curves |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        wo, wi = row["errors"]["without MX curves"], row["errors"]["with MX curves"]
        for x in TOKENS:
            k = str(x)
            cells = []
            for s, q in ((s, r.get(k)) for s, r in row["ratios"].items()):
                cells.append(f"{s} {q['median']:.2f} [{q['min']:.2f}, {q['max']:.2f}]" if q else f"{s} n/a")
            e0, e1 = wo["by_tokens"].get(k), wi["by_tokens"].get(k)
            md.append(
                f"| {row['model']} | {row['method']} | {row['threads']} | {x} | {'; '.join(cells) or 'none'} | "
                + (f"{e0['median']:+.0%} ({e0['worst']:+.0%}; {wo['curves_read']})" if e0 else "n/a")
                + " | "
                + (f"{e1['median']:+.0%} ({e1['worst']:+.0%})" if e1 else "n/a")
                + " |"
            )
    write_result(a.out, result, "\n".join(md) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--threads", type=int, default=1)
    m.add_argument("--rounds", type=int, default=3)
    m.add_argument("--models", default="gpt-oss-20b,gpt-oss-120b")
    o = sub.add_parser("one")  # one (round, model), in a process of its own (`measure`)
    o.add_argument("--out", type=Path, required=True)
    o.add_argument("--threads", type=int, default=1)
    o.add_argument("--round", type=int, required=True)
    o.add_argument("--model", required=True)
    r = sub.add_parser("report")
    r.add_argument("dir", type=Path)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--gpu-from", default="h200-pcie5-xeon-amx-16c")
    r.add_argument("--prefix", default="mx-", help="the profiles are DIR/PREFIX<model>-<round>.profile.json")
    a = ap.parse_args()
    {"measure": measure, "one": measure_one, "report": report}[a.cmd](a)


if __name__ == "__main__":
    main()
