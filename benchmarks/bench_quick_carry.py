"""The quick probe's CPU MoE layer carried to a model's experts, against the model's own layer on the
same instance: the cost model's kt-kernel forward (`Components.cpu_moe_ms`, every expert on the CPU,
11 threads) from the call's first quick probe over the same from `kttune probe --model M` of that
instance, at 256, 1,024 and 3,072 tokens, for every BF16 model whose own layer an H100 call probed
(`quick-transfer-model-M-TAG[-again].profile.json`), grouped by the instance's CPU generation (lscpu's
model in the call's machine file: 143 Sapphire Rapids, else Emerald Rapids).

What it asks: whether the quick probe's reading of a BF16 model's CPU experts departs from the
model's own layer by CPU generation (Sapphire Rapids instances read the BF16 hybrid paths slow, Emerald
Rapids ones mostly fast: docs/probe.md#one-name-two-cpus), or by how far the quick series (to 256
tokens) is carried up in tokens. The own layer is measured to 8,192 tokens, so each ratio is the
quick probe's carry over a measurement.

    python benchmarks/bench_quick_carry.py [--out benchmarks/results/2026-12-07-computed/quick-carry]
"""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

from bench_cpu_generation import generation
from results_layout import write_result

from kttune import app
from kttune.cost.components import Components
from kttune.hw.profile import load_profile

RESULTS = Path(__file__).resolve().parent / "results"
TOKENS = (256, 1024, 3072)
THREADS = 11
OWN = re.compile(r"quick-transfer-model-(.+)-(h100[a-z]+)(-again)?\.profile\.json")


def rows() -> list[dict]:
    out = []
    for f in sorted(RESULTS.glob("*-h100-*/quick-transfer-model-*.profile.json")):
        m = OWN.fullmatch(f.name)
        if not m:
            continue
        model, tag, again = m.groups()
        quick = f.parent / f"quick-transfer-{tag}.profile.json"
        machine = f.parent / f"quick-transfer-machine-{tag}.txt"
        own_prof = load_profile(f)
        if not quick.is_file() or not machine.is_file() or not own_prof.curves_of("cpu_moe", method="BF16"):
            continue
        spec = app.model_spec(model)
        own = Components(own_prof, spec, "BF16")
        carried = Components(load_profile(quick), spec, "BF16")
        out.append(
            {
                "generation": generation(machine),
                "probe": f"{f.parent.name}/{f.name}",
                "call": tag + (again or ""),
                "model": model,
                "ratio": {
                    t: carried.cpu_moe_ms(t, spec.num_experts, THREADS) / own.cpu_moe_ms(t, spec.num_experts, THREADS)
                    for t in TOKENS
                },
            }
        )
    return out


def _bf16_curve(path: Path):
    """A profile's BF16 kt-kernel MoE curve at THREADS, or None."""
    cs = load_profile(path).curves_of("cpu_moe", method="BF16", threads=THREADS)
    return cs[0] if cs else None


def marginal_ps_per_flop(curve, rows: tuple[int, int]) -> float | None:
    """A `cpu_moe` curve's time per flop at the margin between the two token counts whose rows per
    expert (tokens x top-k / experts) are `rows`; None where it did not measure both."""
    at = {p.x: p.t_ms for p in curve.points}
    e, k = int(curve.params["experts"]), int(curve.params["top_k"])
    t0, t1 = (r * e // k for r in rows)
    if t0 not in at or t1 not in at:
        return None
    flops_per_token = k * 3 * int(curve.params["hidden"]) * int(curve.params["inter"]) * 2
    return (at[t1] - at[t0]) * 1e9 / ((t1 - t0) * flops_per_token)


MARGIN_ROWS = (64, 256)  # rows per expert of the quick layer at 256 and 1,024 tokens


def margins(rs: list[dict]) -> list[dict]:
    """Where the call also timed the quick layer warm to 1,024 tokens (`cold-warm-TAG.profile.json`,
    COLD=1): the marginal time per flop between 64 and 256 rows an expert, of that layer and of the
    model's own, at the same rows."""
    out = []
    for r in rs:
        folder = RESULTS / r["probe"].split("/")[0]
        tag = r["call"].removesuffix("-again")
        warm = folder / f"quick-transfer-cold-warm-{tag}.profile.json"
        if not warm.is_file():
            continue
        quick_c, own_c = _bf16_curve(warm), _bf16_curve(RESULTS / r["probe"])
        if quick_c is None or own_c is None:
            continue
        q, o = marginal_ps_per_flop(quick_c, MARGIN_ROWS), marginal_ps_per_flop(own_c, MARGIN_ROWS)
        if q is not None and o is not None:
            out.append(
                {"generation": r["generation"], "call": r["call"], "model": r["model"], "quick_ps": q, "own_ps": o}
            )
    return out


def summary(rs: list[dict]) -> dict:
    gens = sorted({r["generation"] for r in rs})
    return {
        g: {
            t: {
                "median": statistics.median(x := [r["ratio"][t] for r in rs if r["generation"] == g]),
                "low": min(x),
                "high": max(x),
                "n": len(x),
            }
            for t in TOKENS
        }
        for g in gens
    }


def markdown(doc: dict) -> str:
    lines = [
        "# The quick layer carried to a BF16 model's experts, over the model's own layer",
        "",
        "The cost model's kt-kernel forward (every expert on the CPU, 11 threads) from the call's first quick "
        "probe over the same from `kttune probe --model M` of the same instance (benchmarks/bench_quick_carry.py).",
        "",
        "| generation | tokens | median | range | own-layer probes |",
        "|---|---|---|---|---|",
    ]
    for g, by_t in doc["summary"].items():
        for t, s in by_t.items():
            lines.append(f"| {g} | {t} | {s['median']:.2f} | {s['low']:.2f}-{s['high']:.2f} | {s['n']} |")
    if doc["margins"]:
        lines += [
            "",
            f"Where the call also timed the quick layer warm to 1,024 tokens (COLD=1): the time per flop at the margin "
            f"between {MARGIN_ROWS[0]} and {MARGIN_ROWS[1]} rows an expert (tokens x top-k / experts), the quick layer's "
            "and the model's own at the same rows, in ps per flop:",
            "",
            "| generation | call | model | quick layer | own layer | quick / own |",
            "|---|---|---|---|---|---|",
        ]
        for m in doc["margins"]:
            lines.append(
                f"| {m['generation']} | {m['call']} | {m['model']} | {m['quick_ps']:.3f} | {m['own_ps']:.3f} | "
                f"{m['quick_ps'] / m['own_ps']:.2f} |"
            )
    lines += ["", "| generation | call | model | " + " | ".join(f"{t} tokens" for t in TOKENS) + " |"]
    lines.append("|---|---|---|" + "---|" * len(TOKENS))
    for r in doc["rows"]:
        cells = " | ".join(f"{r['ratio'][t]:.2f}" for t in TOKENS)
        lines.append(f"| {r['generation']} | {r['call']} | {r['model']} | {cells} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    a = ap.parse_args()
    rs = sorted(rows(), key=lambda r: (r["generation"], r["call"], r["model"]))
    doc = {"threads": THREADS, "tokens": list(TOKENS), "rows": rs, "summary": summary(rs), "margins": margins(rs)}
    write_result(a.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
