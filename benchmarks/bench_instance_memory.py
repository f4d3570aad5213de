"""What tracks a model's big CPU MoE layer from one machine instance to the next? Over the quick-transfer
calls (one quick probe and the path runner's sweeps on one instance), per instance: the quick probe's
kt-kernel MoE call on its cache-resident layer (BF16, 11 threads, 256 tokens), its stage A write from
a source twice the last-level cache (BF16, 11 threads, the largest expert: a read from DRAM), and the
runner's hybrid MoE layer of GLM-4.5-Air (4.15 GB of CPU experts) and Qwen3-30B-A3B (1.1 GB) at
3,072 tokens, 11 threads; the instance's CPU generation (lscpu's family and model in the call's
machine file). Spearman's rank correlation of each probe figure with each runner figure over the
instances of one box, and of one CPU generation of it (docs/cost-model.md#the-instances-own-quick-probe).

    python3 benchmarks/bench_instance_memory.py --out benchmarks/results/2026-12-05-computed/instance-memory
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from bench_cpu_generation import generation
from results_layout import write_result

from kttune.probes.cpu_moe import QUICK_SHAPE
from kttune.runner.result import runs_in_results

RESULTS = Path(__file__).resolve().parent / "results"
H100 = RESULTS / "2026-12-05-h100-pcie5-xeon-amx-16c"
H100_LATER = RESULTS / "2026-12-06-h100-pcie5-xeon-amx-16c"
H200 = RESULTS / "2026-12-04-h200-pcie5-xeon-amx-16c"
# the quick layer's point every quick series holds (its last until 2026-12-07, when it went on to 1,024)
QUICK_TOKENS = 256
H200_LATER = RESULTS / "2026-12-06-h200-pcie5-xeon-amx-16c"
H100_7 = RESULTS / "2026-12-07-h100-pcie5-xeon-amx-16c"
H100_8 = RESULTS / "2026-12-08-h100-pcie5-xeon-amx-16c"
TOKENS, THREADS, METHOD = 3072, 11, "BF16"
MODELS = ("glm-4.5-air", "qwen3-30b-a3b")
# (box, instance, quick profile, the runner's results per model, the call's machine file) of every
# call with both models swept
CALLS = [
    *[
        (
            "H100",
            t,
            folder / f"quick-transfer-{t}.profile.json",
            {m: folder / f"quick-transfer-crossover-{m}-{t}.json" for m in MODELS},
            folder / f"quick-transfer-machine-{t}.txt",
        )
        for folder, tags in (
            (H100, ("h100a", "h100c", "h100f", "h100g", "h100h", "h100i", "h100k")),
            (H100_LATER, ("h100m", "h100n", "h100o", "h100p", "h100r", "h100s", "h100t", "h100u", "h100v", "h100x")),
            # 2026-12-07 (twenty-first to twenty-third sessions): their first call each
            (
                H100_7,
                ("h100ae", "h100af", "h100ah", "h100aj", "h100al", "h100am", "h100ao", "h100ap", "h100aq", "h100ar"),
            ),
            (H100_8, ("h100av", "h100aw")),
        )
        for t in tags
    ],
    (
        "H100",
        "h100l",
        H100 / "quick-tokens-h100l-quick-256-1.profile.json",
        {m: H100 / f"quick-tokens-h100l-crossover-{m}.json" for m in MODELS},
        H100 / "quick-tokens-h100l-machine.txt",
    ),
    *[
        (
            "H200",
            t,
            H200 / f"quick-transfer-{t}.profile.json",
            {m: H200 / f"quick-transfer-crossover-{m}-{t}.json" for m in MODELS},
            H200 / f"quick-transfer-machine-{'ab' if t in 'ab' else t}.txt",
        )
        for t in "abcd"
    ],
    (
        "H200",
        "h200f",
        H200_LATER / "quick-transfer-h200f.profile.json",
        {m: H200_LATER / f"quick-transfer-crossover-{m}-h200f.json" for m in MODELS},
        H200_LATER / "quick-transfer-machine-h200f.txt",
    ),
]


def quick_layer_ms(profile: dict) -> float | None:
    """The quick layer's call at the top of the quick probe's default series."""
    for c in profile["curves"]:
        p = c["params"]
        if c["kind"] == "cpu_moe" and (p.get("method"), p.get("threads"), p.get("hidden"), p.get("inter")) == (
            METHOD,
            THREADS,
            QUICK_SHAPE.hidden,
            QUICK_SHAPE.inter,
        ):
            return {pt["x"]: pt["t_ms"] for pt in c["points"]}.get(QUICK_TOKENS)
    return None


def stage_a_gb_s(profile: dict) -> float | None:
    """The largest expert's stage A write: bytes per ms / 1e6 = GB/s."""
    pts = {}
    for c in profile["curves"]:
        p = c["params"]
        if c["kind"] == "stage_a_write" and (p.get("method"), p.get("threads")) == (METHOD, THREADS):
            pts.update({pt["x"]: pt["t_ms"] for pt in c["points"]})
    if not pts:
        return None
    x = max(pts)
    return x / pts[x] / 1e6


def runner_ms(path: Path) -> float | None:
    """The forced hybrid forward's MoE time per layer at TOKENS (mean over the run's layers)."""
    if not path.exists():
        return None
    for _, runs in runs_in_results(json.loads(path.read_text())):
        for r in runs:
            if r.forced_path == "hybrid" and r.forwards[0].tokens == TOKENS:
                return r.forwards[0].mean_moe_ms
    return None


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (no ties in timings)."""
    ra = [sorted(a).index(x) for x in a]
    rb = [sorted(b).index(x) for x in b]
    return statistics.correlation(ra, rb)


def run() -> dict:
    rows = []
    for box, tag, prof, sweeps, machine in CALLS:
        p = json.loads(prof.read_text())
        rows.append(
            {
                "box": box,
                "instance": tag,
                "cpu": generation(machine),
                "profile": str(prof.relative_to(RESULTS)),
                "quick_layer_ms": quick_layer_ms(p),
                "stage_a_gb_s": stage_a_gb_s(p),
                **{f"runner_{m}_ms": runner_ms(s) for m, s in sweeps.items()},
            }
        )
    corr = {}
    groups = {box: [r for r in rows if r["box"] == box] for box in sorted({r["box"] for r in rows})}
    for box, cpu in sorted({(r["box"], r["cpu"]) for r in rows}):
        if len({r["cpu"] for r in groups[box]}) > 1:  # a box of two CPU generations: each on its own too
            groups[f"{box} {cpu}"] = [r for r in rows if (r["box"], r["cpu"]) == (box, cpu)]
    for group, members in groups.items():
        for probe in ("quick_layer_ms", "stage_a_gb_s"):
            for m in MODELS:
                pairs = [(r[probe], r[f"runner_{m}_ms"]) for r in members]
                pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
                if len(pairs) >= 4:
                    corr[f"{group}: {probe} ~ {m}"] = {
                        "n": len(pairs),
                        "spearman": spearman([a for a, _ in pairs], [b for _, b in pairs]),
                    }
    return {"tokens": TOKENS, "threads": THREADS, "method": METHOD, "rows": rows, "spearman": corr}


def markdown(doc: dict) -> str:
    lines = [
        "# What tracks a model's big CPU MoE layer between instances",
        "",
        f"Per instance: the quick probe's cache-resident layer ({doc['method']}, {doc['threads']} threads, 256 tokens), "
        "its stage A write from a source twice the L3 (the largest expert), and the path runner's forced hybrid MoE "
        f"layer at {doc['tokens']} tokens.",
        "",
        "| box | instance | CPU | quick layer, ms | stage A, GB/s | "
        + " | ".join(f"runner {m}, ms" for m in MODELS)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(MODELS),
    ]

    def f(x, nd=1):
        return "n/a" if x is None else f"{x:.{nd}f}"

    for r in doc["rows"]:
        lines.append(
            f"| {r['box']} | {r['instance']} | {r['cpu']} | {f(r['quick_layer_ms'], 2)} | {f(r['stage_a_gb_s'])} | "
            + " | ".join(f(r[f"runner_{m}_ms"]) for m in MODELS)
            + " |"
        )
    lines += ["", "| box, probe figure ~ runner model | instances | Spearman |", "|---|---|---|"]
    for k, v in doc["spearman"].items():
        lines.append(f"| {k} | {v['n']} | {v['spearman']:+.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    doc = run()
    write_result(a.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
