"""How far up in tokens the quick probe's CPU MoE layer must be timed: the same timing of the quick
layer cut at 256 tokens (64 rows an expert, the quick probe's series until 2026-12-07) and kept to
1,024 (256 rows an expert), each predicting the same call's runner sweeps, grouped by the instance's
CPU generation.

Every H100 call that ran `COLD=1 COLD_TOKENS=1024` (`bench_quick_transfer.sh`) timed the quick
layer again to 1,024 tokens, warm and cold, minutes after its quick probe
(`quick-transfer-cold{,-warm}-TAG.profile.json`). Cutting those curves at 256 tokens gives the short
series from the same minute, so the comparison is the series' length alone, not when it was timed
(a reading minutes apart moves by up to a fifth: docs/probe.md#one-name-two-cpus). The quick probe
as it ran is listed too. Since the quick probe itself times the layer to 1,024 tokens (2026-12-07),
each such probe is judged the same way on its call's sweeps: whole, and cut at 256 tokens. Per curve it also reports the kernel's time per flop at the margin between
16 and 64 rows an expert over the same between 64 and 256 (the short series' rate over the rate the
models' hybrid forwards run at: 1-3K tokens are 64-192 rows an expert for 128 experts at top-8).

    python benchmarks/bench_quick_series.py [--out benchmarks/results/2026-12-07-computed/quick-series]
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace
from pathlib import Path

from bench_cpu_generation import generation
from bench_hybrid_cold import call_files, with_cpu_moe
from bench_quick_transfer import predict
from results_layout import write_result

from kttune.hw.profile import HardwareProfile, load_profile

RESULTS = Path(__file__).resolve().parent / "results"
SHORT, LONG = 256, 1024  # the quick series' last length before and after 2026-12-07 (kttune.probes.run)
VARIANTS = ("quick probe", f"warm to {SHORT}", f"warm to {LONG}", f"cold to {SHORT}", f"cold to {LONG}")
MARGINS = ((64, 256), (256, 1024))  # tokens: 16-64 and 64-256 rows an expert on the quick layer (32 experts, top-8)
THREADS = 11
TARGET = 0.15


def cut(profile: HardwareProfile, max_tokens: int) -> HardwareProfile:
    """`profile` with its `cpu_moe` curves' points past `max_tokens` left out."""
    return replace(
        profile,
        curves=tuple(
            replace(c, points=tuple(p for p in c.points if p.x <= max_tokens)) if c.kind == "cpu_moe" else c
            for c in profile.curves
        ),
    )


def calls() -> list[tuple[Path, str, HardwareProfile]]:
    """Every H100 call whose results hold the quick layer timed to LONG tokens warm and cold: its
    folder, tag and warm profile."""
    out = []
    for f in sorted(RESULTS.glob("*-h100-*/quick-transfer-cold-warm-*.profile.json")):
        tag = f.name.removeprefix("quick-transfer-cold-warm-").removesuffix(".profile.json")
        warm = load_profile(f)
        if _bf16(warm) is not None:
            out.append((f.parent, tag, warm))
    return out


def _bf16(profile: HardwareProfile):
    """The profile's BF16 quick-layer curve at THREADS reaching LONG tokens, or None."""
    cs = [c for c in profile.curves_of("cpu_moe", method="BF16", threads=THREADS) if max(p.x for p in c.points) >= LONG]
    return cs[0] if cs else None


def margin_ratio(curve) -> float:
    """The curve's time per token between MARGINS[0] over the same between MARGINS[1] (one shape, so
    per token is per flop)."""
    at = {p.x: p.t_ms for p in curve.points}
    (a0, a1), (b0, b1) = MARGINS
    return ((at[a1] - at[a0]) / (a1 - a0)) / ((at[b1] - at[b0]) / (b1 - b0))


def judged(gen: str, tag: str, profs: dict, sweeps: list[Path]) -> list[dict]:
    """Per sweep: each variant's hybrid error (mean absolute and signed per forward) and whether each
    crossover agrees, predicted from that variant's profile."""
    out = []
    for s in sweeps:
        got = {v: predict(str(s), p) for v, p in profs.items()}
        out.append(
            {
                "generation": gen,
                "call": tag,
                "model": next(iter(got.values()))["model"],
                **{
                    v: {
                        "hybrid_mape": g["hybrid"]["mape"],
                        "hybrid_signed": g["hybrid"]["signed"],
                        "crossovers": [x["agrees"] for x in g["crossover"]],
                    }
                    for v, g in got.items()
                },
            }
        )
    return out


def rows() -> tuple[list[dict], list[dict]]:
    sweeps_out, curves_out = [], []
    for folder, tag, w in calls():
        quick, _, cold, sweeps = call_files(folder, tag)
        gen = generation(folder / f"quick-transfer-machine-{tag.removesuffix('-late')}.txt")
        q, c = load_profile(quick), load_profile(cold)
        profs = dict(
            zip(
                VARIANTS,
                (
                    replace(q, calibration=()),
                    with_cpu_moe(q, cut(w, SHORT)),
                    with_cpu_moe(q, w),
                    with_cpu_moe(q, cut(c, SHORT)),
                    with_cpu_moe(q, c),
                ),
            )
        )
        for timing, prof in (("warm", w), ("cold", c)):
            curves_out.append({"generation": gen, "call": tag, "timing": timing, "ratio": margin_ratio(_bf16(prof))})
        sweeps_out += judged(gen, tag, profs, sweeps)
    return sweeps_out, curves_out


PROBE_VARIANTS = (f"probe cut to {SHORT}", f"probe to {LONG}")


def probe_rows() -> tuple[list[dict], list[dict]]:
    """Every H100 quick probe whose own CPU MoE series reaches LONG tokens (`quick-transfer-TAG.profile.json`
    and its `-late` probe), whole and cut at SHORT, on its call's sweeps; and its BF16 margin ratio."""
    out, curves = [], []
    for f in sorted(RESULTS.glob("*-h100-*/quick-transfer-h100*.profile.json")):
        tag = f.name.removeprefix("quick-transfer-").removesuffix(".profile.json")
        call = tag.removesuffix("-late")
        sweeps = sorted(f.parent.glob(f"quick-transfer-crossover-*-{call}.json"))
        prof = load_profile(f)
        if not sweeps or _bf16(prof) is None:
            continue
        gen = generation(f.parent / f"quick-transfer-machine-{call}.txt")
        curves.append({"generation": gen, "call": tag, "timing": "probe", "ratio": margin_ratio(_bf16(prof))})
        profs = dict(zip(PROBE_VARIANTS, (replace(cut(prof, SHORT), calibration=()), replace(prof, calibration=()))))
        out += judged(gen, tag, profs, sweeps)
    return out, curves


def summary(sweeps: list[dict], variants: tuple[str, ...] = VARIANTS) -> dict:
    groups = sorted({r["generation"] for r in sweeps}) + ["all"]
    out = {}
    for g in groups:
        rs = [r for r in sweeps if g in ("all", r["generation"])]
        out[g] = {}
        for v in variants:
            e = [r[v]["hybrid_mape"] for r in rs if r[v]["hybrid_mape"] is not None]
            x = [a for r in rs for a in r[v]["crossovers"]]
            out[g][v] = {
                "sweeps": len(e),
                "calls": len({r["call"] for r in rs}),
                "hybrid_mean_abs": statistics.mean(e),
                "hybrid_within": sum(a <= TARGET for a in e),
                "hybrid_median_signed": statistics.median(r[v]["hybrid_signed"] for r in rs),
                "crossovers_agree": sum(x),
                "crossovers": len(x),
            }
    return out


def summary_lines(by_group: dict) -> list[str]:
    """A `summary` as table rows: CPU, calls, sweeps, variant, then the hybrid figures and crossovers."""
    return [
        f"| {g} | {s['calls']} | {s['sweeps']} | {v} | {s['hybrid_mean_abs']:.1%} | {s['hybrid_within']} of "
        f"{s['sweeps']} | {s['hybrid_median_signed']:+.0%} | {s['crossovers_agree']} of {s['crossovers']} |"
        for g, by_v in by_group.items()
        for v, s in by_v.items()
    ]


def markdown(doc: dict) -> str:
    lines = [
        "# The quick layer's series: 256 or 1,024 tokens, from the same timing",
        "",
        "Each H100 call's runner sweeps predicted by its quick probe with the CPU MoE curves replaced by the quick "
        f"layer timed again to {LONG} tokens (warm, and cold over copies to twice the L3), cut at {SHORT} tokens "
        "or kept whole (benchmarks/bench_quick_series.py; raw cost model, per decoder-layer forward, hybrid path; "
        "the layerwise path does not read these curves).",
        "",
        "| CPU | timings | sweeps | variant | hybrid mean absolute | within 15% | median signed | crossovers agree |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += summary_lines(doc["summary"])
    if doc["probes"]:
        lines += [
            "",
            f"The quick probes timed to {LONG} tokens themselves (since 2026-12-07), whole and cut at {SHORT}, on "
            "their calls' sweeps:",
            "",
            "| CPU | probes | sweeps | variant | hybrid mean absolute | within 15% | median signed | crossovers agree |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += summary_lines(doc["probe_summary"])
    lines += [
        "",
        f"The BF16 quick layer's time per flop at the margin, {MARGINS[0][0]}-{MARGINS[0][1]} tokens (16-64 rows an "
        f"expert) over {MARGINS[1][0]}-{MARGINS[1][1]} (64-256 rows), {THREADS} threads: above 1 the short series "
        "charges the rows the models run at more than they cost.",
        "",
        "| CPU | call | timing | ratio |",
        "|---|---|---|---|",
    ]
    for c in doc["curves"]:
        lines.append(f"| {c['generation']} | {c['call']} | {c['timing']} | {c['ratio']:.2f} |")
    lines += ["", "| CPU | call | model | " + " | ".join(VARIANTS) + " |", "|---|---|---|" + "---|" * len(VARIANTS)]
    for r in doc["sweeps"]:
        cells = " | ".join(f"{r[v]['hybrid_signed']:+.0%}" for v in VARIANTS)
        lines.append(f"| {r['generation']} | {r['call']} | {r['model']} | {cells} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    a = ap.parse_args()
    sweeps, curves = rows()
    probes, probe_curves = probe_rows()
    doc = {
        "short": SHORT,
        "long": LONG,
        "sweeps": sweeps,
        "curves": curves + probe_curves,
        "summary": summary(sweeps),
        "probes": probes,
        "probe_summary": summary(probes, PROBE_VARIANTS) if probes else {},
    }
    write_result(a.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
