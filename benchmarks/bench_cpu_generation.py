"""One machine kind, two CPUs: the quick probe's reading of the hybrid path by CPU generation.

Every device instance's CPU shows the name "Intel(R) Xeon(R) Processor", 16 cores with AMX. Read from
each call's machine file (`lscpu`: CPU family, model, stepping), the H100 box's instances ran two
generations: Sapphire Rapids (family 6 model 143) and Emerald Rapids (model 207, as every H200
instance did). Here, for every call with quick probes and the runner's sweeps of the same instance
(raw cost model, 11 threads, 3 interleaved repeats), the signed error per path (predicted / measured
- 1 per decoder-layer forward, a sweep's mean; per model the median over the call's probes), then
grouped by generation: whether the sign the earlier sessions called "the instance's" is the CPU's.

    python3 benchmarks/bench_cpu_generation.py --out benchmarks/results/2026-12-06-computed/cpu-generation

`--own-r FOLDER:TAG` reads a call run with `SHAPE_LAW=1` (bench_quick_transfer.sh): its first quick
probe measured r on the instance (`kttune probe --shape-law`); each sweep predicted from that probe
as it is (the kept sets' r) and with its sets left out (the constants), beside the call's other quick
probes: whether the instance's own r reads its generation's BF16 models.

`--r-bf16 3078,4500,6000,8000` instead sets the AMX build's BF16 constant r to each value in turn and
reports the H100 calls' BF16 hybrid errors: whether one r reads a generation's four BF16 models
(docs/probe.md#one-name-two-cpus).
"""

from __future__ import annotations

import argparse
import re
import statistics
from dataclasses import replace
from pathlib import Path

from bench_hybrid_bias import signed_cell, signed_stats
from bench_probe_median import instance_of_call
from bench_quick_transfer import PATHS, predict
from results_layout import write_result

import kttune.spec.kt_classes as kt_classes
from kttune.hw.cpu_generation import cpu_generation
from kttune.hw.profile import load_profile
from kttune.hw.shape_law import output_flops_for

RESULTS = Path(__file__).resolve().parent / "results"
H100 = RESULTS / "2026-12-05-h100-pcie5-xeon-amx-16c"
H100_LATER = RESULTS / "2026-12-06-h100-pcie5-xeon-amx-16c"
H100_7 = RESULTS / "2026-12-07-h100-pcie5-xeon-amx-16c"
H100_8 = RESULTS / "2026-12-08-h100-pcie5-xeon-amx-16c"
H200 = RESULTS / "2026-12-04-h200-pcie5-xeon-amx-16c"
H200_LATER = RESULTS / "2026-12-06-h200-pcie5-xeon-amx-16c"

# (box, folder, call as bench_probe_median.instance_of_call reads it, machine file); h100hog is left
# out (its probe ran beside memory neighbours on purpose)
CALLS = (
    *(
        ("H100", H100, c, H100 / f"quick-transfer-machine-{c.split('+')[0]}.txt")
        for c in ("h100a", "h100b", "h100c", "h100d+h100e", "h100f", "h100g", "h100h", "h100i", "h100k")
    ),
    *(
        ("H100", H100_LATER, c, H100_LATER / f"quick-transfer-machine-{c}.txt")
        for c in (
            "h100m",
            "h100n",
            "h100o",
            "h100p",
            "h100r",
            "h100s",
            "h100t",
            "h100u",
            "h100v",
            "h100x",
            "h100aa",
            "h100ac",
            "h100ad",
        )
    ),
    ("H100", H100_7, "h100ae", H100_7 / "quick-transfer-machine-h100ae.txt"),
    # instance af, two calls: the device tool kept the held H100 when the second asked for an H200
    ("H100", H100_7, "h100af+h100ag", H100_7 / "quick-transfer-machine-h100af.txt"),
    # instance ah (Emerald Rapids), two calls on one boot: the plan's, then its sweeps again (ai)
    ("H100", H100_7, "h100ah+h100ai", H100_7 / "quick-transfer-machine-h100ah.txt"),
    # instance aj (Emerald Rapids), two calls on one boot: the plan twice (ak)
    ("H100", H100_7, "h100aj+h100ak", H100_7 / "quick-transfer-machine-h100aj.txt"),
    # instances al and am (Emerald Rapids), the plan once each
    *(("H100", H100_7, c, H100_7 / f"quick-transfer-machine-{c}.txt") for c in ("h100al", "h100am")),
    # instances ao, ap and aq (Emerald Rapids), the plan once each with three quick probes
    *(("H100", H100_7, c, H100_7 / f"quick-transfer-machine-{c}.txt") for c in ("h100ao", "h100ap", "h100aq")),
    # instance ar (Emerald Rapids, twenty-sixth session), the plan with three probes and a real cold layer
    ("H100", H100_7, "h100ar", H100_7 / "quick-transfer-machine-h100ar.txt"),
    # instance au/av (Emerald Rapids, twenty-ninth session): av the plan with three probes and a real cold
    # layer (au, the call before on the same boot, a quick probe and gpt-oss sweeps only: read apart)
    ("H100", H100_8, "h100av", H100_8 / "quick-transfer-machine-h100av.txt"),
    # instance aw (Emerald Rapids, twenty-ninth session): four models with a real cold layer, a late probe by hand
    ("H100", H100_8, "h100aw", H100_8 / "quick-transfer-machine-h100aw.txt"),
    ("H200", H200, "a+b", H200 / "quick-transfer-machine-ab.txt"),
    *(("H200", H200, c, H200 / f"quick-transfer-machine-{c}.txt") for c in ("c", "d")),
    ("H200", H200_LATER, "h200f", H200_LATER / "quick-transfer-machine-h200f.txt"),
)
# instance l's call (benchmarks/bench_quick_tokens.sh): its probes at the default 256 tokens
L_PROBES = [H100 / f"quick-tokens-h100l-quick-256-{i}.profile.json" for i in (1, 2)]
L_SWEEPS = sorted(H100.glob("quick-tokens-h100l-crossover-*.json"))
L_MACHINE = H100 / "quick-tokens-h100l-machine.txt"


def cpuid(machine: Path) -> tuple[int, int, int]:
    """lscpu's CPU family, model and stepping in a call's machine file."""
    text = machine.read_text()
    got = [re.search(rf"^{k}:\s+(\d+)", text, re.M) for k in ("CPU family", "Model", "Stepping")]
    if not all(got):
        raise SystemExit(f"{machine}: no CPU family / Model / Stepping lines")
    return tuple(int(m.group(1)) for m in got)  # type: ignore[return-value]


def without_shape_sets(profile):
    """The profile with its expert-shape law sets (`cpu_moe_shape` curves) left out: r then comes from
    the shipped constants."""
    return replace(profile, curves=tuple(c for c in profile.curves if c.kind != "cpu_moe_shape"))


def generation(machine: Path, family: int | None = None, model: int | None = None) -> str:
    """The generation lscpu's vendor, family and model in a call's machine file name (family and model
    read from the file by `cpuid` where not given)."""
    if family is None or model is None:
        family, model = cpuid(machine)[:2]
    vendor = re.search(r"^Vendor ID:\s+(\S+)", machine.read_text(), re.M)
    return cpu_generation(vendor.group(1) if vendor else "", family, model) or f"model {model}"


def call_rows(
    box: str, call: str, probes: list[Path], sweeps: list[Path], machine: Path, models: tuple[str, ...] = ()
) -> list[dict]:
    """Per sweep of the call (of `models` where given): the model, the call's CPU, and each path's
    signed error, the median over the call's quick probes (read with the shipped constants r, as a
    quick probe without `--shape-law` is: a probe's own sets are left out, `--own-r` reads them)."""
    fam, model, step = cpuid(machine)
    profs = [without_shape_sets(load_profile(p)) for p in probes]
    rows = []
    for s in sweeps:
        if models and not any(f"crossover-{m}-" in s.name or s.name.endswith(f"crossover-{m}.json") for m in models):
            continue
        got = [predict(str(s), p) for p in profs]
        signed = {}
        for path in PATHS:
            xs = [g[path]["signed"] for g in got if g[path]["signed"] is not None]
            signed[path] = statistics.median(xs) if xs else None
        rows.append(
            {
                "box": box,
                "call": call,
                "cpu": [fam, model, step],
                "generation": generation(machine, fam, model),
                "probes": len(profs),
                "model": got[0]["model"],
                "method": got[0].get("method"),
                **signed,
            }
        )
    return rows


def gather(boxes: tuple[str, ...] = ("H100", "H200"), models: tuple[str, ...] = ()) -> list[dict]:
    rows = []
    for box, folder, call, machine in CALLS:
        probes, sweeps = instance_of_call(folder, call)
        if box in boxes and probes and sweeps and machine.is_file():
            rows += call_rows(box, call, probes, sweeps, machine, models)
    if "H100" in boxes:
        rows += call_rows("H100", "h100l", L_PROBES, L_SWEEPS, L_MACHINE, models)
    return rows


def r_sweep(values: list[float]) -> tuple[dict, str]:
    """The H100 calls' BF16 hybrid errors with the AMX build's BF16 constant r
    (`MATRIX_OUTPUT_FLOPS[("amx", "AMXBF16_MOE")]`) set to each of `values` in turn: whether one r
    reads one generation's four BF16 models."""
    key = ("amx", "AMXBF16_MOE")
    shipped = kt_classes.MATRIX_OUTPUT_FLOPS[key]
    per: dict[tuple[str, str, str], dict[float, float | None]] = {}
    try:
        for r in values:
            kt_classes.MATRIX_OUTPUT_FLOPS[key] = float(r)
            for row in gather(("H100",), BF16):
                per.setdefault((row["generation"], row["call"], row["model"]), {})[r] = row["hybrid"]
    finally:
        kt_classes.MATRIX_OUTPUT_FLOPS[key] = shipped
    rows = [
        {"generation": g, "call": c, "model": m, "hybrid": {str(r): v[r] for r in values}}
        for (g, c, m), v in sorted(per.items())
    ]
    head = " | ".join(f"r {r:,.0f}" for r in values)
    lines = [
        "# One r for a generation? The H100 calls' BF16 hybrid errors at several BF16 constants",
        "",
        f"The AMX build's BF16 cost per output element (shipped: {shipped:,.0f}, measured on Emerald Rapids) set to each "
        "value in turn; each call's own quick probes predicting its sweeps (median over the probes), hybrid signed "
        "error per decoder-layer forward, a sweep's mean, raw cost model.",
        "",
        f"| generation | call | model | {head} |",
        "|---|---|---|" + "---|" * len(values),
    ]
    for row in rows:
        cells = [signed_cell(row["hybrid"][str(r)]) for r in values]
        lines.append(f"| {row['generation']} | {row['call']} | {row['model']} | " + " | ".join(cells) + " |")
    lines += ["", "| generation | " + head + " |", "|---|" + "---|" * len(values)]
    for gen in sorted({r["generation"] for r in rows}):
        cells = []
        for r in values:
            xs = [x["hybrid"][str(r)] for x in rows if x["generation"] == gen and x["hybrid"][str(r)] is not None]
            cells.append(
                f"median {statistics.median(xs):+.0%}, worst {max(xs, key=abs):+.0%}, within 15% {sum(abs(x) <= 0.15 for x in xs)} of {len(xs)}"
            )
        lines.append(f"| {gen} | " + " | ".join(cells) + " |")
    return {"values": values, "shipped": shipped, "rows": rows}, "\n".join(lines + [""])


BF16 = ("glm-4.5-air", "qwen3-30b-a3b", "qwen3-next-80b-a3b", "mixtral-8x7b")


def own_r(folder: Path, tag: str) -> tuple[dict, str]:
    """A `SHAPE_LAW=1` call: each sweep's signed error per path from its first quick probe with its own
    shape-law sets, the same probe with the sets left out, and the call's other quick probes (median);
    the r each set gave (`kttune.hw.shape_law.output_flops_for`)."""
    probes, sweeps = instance_of_call(folder, tag)
    if not probes or not sweeps:
        raise SystemExit(f"--own-r {folder}:{tag}: no quick probe or no sweep there")
    first = load_profile(probes[0])
    if not first.curves_of("cpu_moe_shape"):
        raise SystemExit(f"--own-r: {probes[0].name} holds no shape-law set (was the call run with SHAPE_LAW=1?)")
    constants = without_shape_sets(first)
    others = [load_profile(p) for p in probes[1:]]
    classes = sorted(
        {(c.backend, c.params.get("kernel"), c.params.get("method")) for c in first.curves_of("cpu_moe_shape")}
    )
    r = [
        {
            "build": b,
            "kernel": k,
            "method": m,
            "own": output_flops_for(first.curves, b, k),
            "constant": kt_classes.matrix_output_flops(b, k),
        }
        for b, k, m in classes
    ]
    machine = folder / f"quick-transfer-machine-{tag}.txt"
    fam, model, step = cpuid(machine)
    rows = []
    for sweep in sweeps:
        own, const = predict(str(sweep), first), predict(str(sweep), constants)
        rest = [predict(str(sweep), o) for o in others]
        row = {"model": own["model"]}
        for path in PATHS:
            xs = [g[path]["signed"] for g in rest if g[path]["signed"] is not None]
            row[path] = {
                "own_r": own[path]["signed"],
                "constants": const[path]["signed"],
                "other_probes": statistics.median(xs) if xs else None,
            }
        rows.append(row)
    gen = generation(machine, fam, model)

    lines = [
        f"# The instance's own r: call {tag} ({gen}, family {fam} model {model} stepping {step})",
        "",
        f"`{probes[0].name}` measured the expert-shape law's sets on the instance (`kttune probe --quick --shape-law`). "
        "Signed error = predicted / measured - 1 per decoder-layer forward, a sweep's mean, raw cost model: from that "
        "probe with its sets (each class's r where its set was kept), with its sets left out (the shipped "
        f"constants), and from the call's other quick probes ({len(others)}, the median).",
        "",
        "| build | class | method | r used with the sets | constant |",
        "|---|---|---|---|---|",
    ]
    for x in r:
        lines.append(
            f"| {x['build']} | {x['kernel']} | {x['method']} | {x['own'][0]:,.0f} ({x['own'][1]}) | "
            f"{x['constant']:,.0f} |"
        )
    lines += [
        "",
        "| model | hybrid: own r | constants | other probes | layerwise: own r | constants | other probes |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        h, w = row["hybrid"], row["layerwise"]
        lines.append(
            f"| {row['model']} | {signed_cell(h['own_r'])} | {signed_cell(h['constants'])} | {signed_cell(h['other_probes'])} | "
            f"{signed_cell(w['own_r'])} | {signed_cell(w['constants'])} | {signed_cell(w['other_probes'])} |"
        )
    doc = {"call": tag, "cpu": [fam, model, step], "generation": gen, "r": r, "rows": rows}
    return doc, "\n".join(lines + [""])


def grouped(rows: list[dict]) -> list[dict]:
    """Per (box, generation) and model group (the four BF16 models, the others): median signed error
    per path over (call, model) pairs, its range, how many read fast / slow (beyond 2%), the calls."""
    out = []
    keys = sorted({(r["box"], r["generation"]) for r in rows})
    for box, gen in keys:
        for group, pick in (("BF16 models", lambda m: m in BF16), ("other models", lambda m: m not in BF16)):
            sel = [r for r in rows if (r["box"], r["generation"]) == (box, gen) and pick(r["model"])]
            if not sel:
                continue
            entry = {"box": box, "generation": gen, "group": group, "calls": sorted({r["call"] for r in sel})}
            for path in PATHS:
                entry[path] = signed_stats([r[path] for r in sel if r[path] is not None])
            out.append(entry)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    ap.add_argument(
        "--r-bf16", default="", help="comma-separated BF16 constants r: the H100 calls' BF16 hybrid errors at each"
    )
    ap.add_argument("--own-r", default="", metavar="FOLDER:TAG", help="a SHAPE_LAW=1 call: own r against the constants")
    args = ap.parse_args()
    if args.own_r:
        folder, _, tag = args.own_r.rpartition(":")
        write_result(args.out, *own_r(Path(folder), tag))
        return
    if args.r_bf16:
        write_result(args.out, *r_sweep([float(x) for x in args.r_bf16.split(",")]))
        return
    rows = gather()
    groups = grouped(rows)
    lines = [
        "# The quick probe's reading of each path, by the instance's CPU generation",
        "",
        "Every instance's CPU is named \"Intel(R) Xeon(R) Processor\" (16 cores, AMX); lscpu's family / model in each "
        "call's machine file tells the generation. Signed error = predicted / measured - 1 per decoder-layer forward, "
        "a sweep's mean, from the call's own quick probes (the median over them), raw cost model; then per "
        "generation the median over (call, model) pairs, the range, and how many read fast (< -2%) or slow (> +2%).",
        "",
        "| box | generation | models | calls | hybrid: median | range | fast / slow | layerwise: median | range | fast / slow |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for g in groups:
        h, w = g["hybrid"], g["layerwise"]
        lines.append(
            f"| {g['box']} | {g['generation']} | {g['group']} | {', '.join(g['calls'])} | {h['median']:+.0%} | "
            f"{h['min']:+.0%} to {h['max']:+.0%} | {h['fast']} / {h['slow']} of {h['n']} | {w['median']:+.0%} | "
            f"{w['min']:+.0%} to {w['max']:+.0%} | {w['fast']} / {w['slow']} of {w['n']} |"
        )
    lines += [
        "",
        "## Per call and model",
        "",
        "| box | call | CPU (family, model, stepping) | probes | model | hybrid | layerwise |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [signed_cell(r[p]) for p in PATHS]
        cpu = ", ".join(map(str, r["cpu"]))
        lines.append(
            f"| {r['box']} | {r['call']} | {r['generation']} ({cpu}) | {r['probes']} | {r['model']} | "
            f"{cells[0]} | {cells[1]} |"
        )
    write_result(args.out, {"rows": rows, "groups": groups}, "\n".join(lines + [""]))


if __name__ == "__main__":
    main()
