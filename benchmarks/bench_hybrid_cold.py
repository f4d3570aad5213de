"""Would a cold quick CPU MoE layer carry the hybrid path? Every H100 quick probe reads the runner's
hybrid forwards fast (`bench_hybrid_bias.py`: median -10%, RAWINT4 the one read slow); the quick
probe's CPU MoE layer (1,024 x 512, 32 experts, 25-100 MB) stays in the last-level cache between
timed calls, where a server's forward reads each layer's experts from DRAM
(docs/probe.md#the-quick-layer-in-the-cache). That was judged on one H200 instance against models'
own probe curves, not the runner; this judges it against the runner's sweeps of the same call.

The GPU call: `COLD=1 ... bash benchmarks/bench_quick_transfer.sh ...` times the quick layer warm and
cold straight after the quick probe (`bench_cpu_moe_cold.py`, one round each, the runner's methods at
its thread count). Here, per call: the sweeps' hybrid forwards predicted from the quick probe as it
is, with its CPU MoE curves replaced by the warm ones (a control: the same layer timed again, the
same minute as the cold), by the cold ones for every method, and by the cold ones for BF16 alone
(the method whose cold layer read 1.2-1.8x slower on the H200 box; FP8 read the same).

Each call says how many bytes its cold timing cycled over (`kttune.hw.dram_stream.cycled_bytes`: the
largest of its points' `source_bytes`) against the layer's own. The calls of 2026-12-06 and 2026-12-07 (m, n, o, p, ae, af,
ag) cycled over none: `bench_cpu_moe_cold.py`'s cold variant took the probe's options, whose cold
bytes were 0, so their "cold" is a second warm timing, and the tables say so.

One more variant, "quick probe + own stream": the quick probe as it is, each hybrid forward plus the
cost of reading the run's CPU experts from DRAM at the call's own rate (`kttune.hw.dram_stream`: its
warm and cold timings of the sweep's method at the runner's thread count, ms per GB, times the GB of
the experts the run left on the CPU). The lead of docs/probe.md#the-quick-layer-in-the-cache, read
with the serving instance's own rate; "n/a" where the call has no real cold timing of that method.

    python3 benchmarks/bench_hybrid_cold.py --call FOLDER:TAG [--call ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace
from pathlib import Path

from bench_hybrid_bias import signed_cell
from bench_quick_transfer import predict
from bench_transfer import load_points
from results_layout import write_result

from kttune.hw.dram_stream import cycled_bytes, stream_rate
from kttune.hw.profile import HardwareProfile, load_profile
from kttune.spec.loader import load_model
from kttune.spec.methods import METHODS, bytes_per_expert

VARIANTS = ("quick probe", "warm (control)", "cold", "cold BF16 only")
OWN_STREAM = "quick probe + own stream"


def stream_rates(warm: HardwareProfile, cold: HardwareProfile) -> dict[tuple[str, int], float]:
    """Per (method, threads) the call timed warm and really cold: its DRAM stream rate, ms per GB
    (`kttune.hw.dram_stream.stream_rate`); a pair that cycled over no copies gives none."""
    out = {}
    for w in warm.curves_of("cpu_moe"):
        c = next((c for c in cold.curves_of("cpu_moe") if c.params == w.params), None)
        try:
            out[(str(w.params["method"]), int(w.params["threads"]))] = stream_rate(w, c) if c else None
        except ValueError:
            continue
    return {k: v for k, v in out.items() if v is not None}


def with_own_stream(sweep: Path, quick: HardwareProfile, rates: dict[tuple[str, int], float]) -> float | None:
    """The sweep's hybrid signed error (predicted / measured - 1 per forward, the mean) from the quick
    probe plus its CPU experts read from DRAM at the call's own rate; None without a rate for the
    sweep's method and threads."""
    points, _, _ = load_points([str(sweep)], replace(quick, calibration=()))
    hy = [p for p in points if p.path == "hybrid"]
    if not hy or (hy[0].method, hy[0].threads) not in rates:
        return None
    rate = rates[(hy[0].method, hy[0].threads)]
    spec = load_model(hy[0].model, hy[0].method)
    expert_gb = bytes_per_expert(METHODS[hy[0].method].cpu_format, spec.hidden_size, spec.moe_intermediate_size) / 1e9
    return sum(
        (p.raw_ms + rate * (spec.num_experts - p.gpu_experts) * expert_gb) / p.measured_ms - 1 for p in hy
    ) / len(hy)


def with_cpu_moe(base: HardwareProfile, other: HardwareProfile, methods: set[str] | None = None) -> HardwareProfile:
    """`base` with its `cpu_moe` curves of `methods` (every method `other` measured where None)
    replaced by `other`'s curves of those methods (calibration left out)."""
    measured = {c.params.get("method") for c in other.curves if c.kind == "cpu_moe"}
    swap = measured if methods is None else measured & methods
    keep = tuple(c for c in base.curves if not (c.kind == "cpu_moe" and c.params.get("method") in swap))
    new = tuple(c for c in other.curves if c.kind == "cpu_moe" and c.params.get("method") in swap)
    return replace(base, curves=keep + new, calibration=())


def variants(quick: HardwareProfile, warm: HardwareProfile, cold: HardwareProfile) -> dict[str, HardwareProfile]:
    return dict(
        zip(
            VARIANTS,
            (
                replace(quick, calibration=()),
                with_cpu_moe(quick, warm),
                with_cpu_moe(quick, cold),
                with_cpu_moe(quick, cold, {"BF16"}),
            ),
        )
    )


def call_files(folder: Path, tag: str) -> tuple[Path, Path, Path, list[Path]]:
    """A COLD=1 call's quick profile, warm and cold CPU MoE profiles, and sweeps (the names
    `bench_quick_transfer.sh`'s files take in a results folder). TAG-late: a second quick probe and
    warm / cold timing taken after the call's sweeps on the same instance (`quick-transfer-TAG-late`,
    `quick-transfer-cold{,-warm}-TAG-late`), judged on the call's sweeps."""
    quick = folder / f"quick-transfer-{tag}.profile.json"
    warm = folder / f"quick-transfer-cold-warm-{tag}.profile.json"
    cold = folder / f"quick-transfer-cold-{tag}.profile.json"
    sweeps = sorted(folder.glob(f"quick-transfer-crossover-*-{tag.removesuffix('-late')}.json"))
    missing = [p.name for p in (quick, warm, cold) if not p.is_file()]
    if missing or not sweeps:
        raise SystemExit(f"{folder}:{tag}: missing {', '.join(missing) or 'sweeps'} (a COLD=1 call's files)")
    return quick, warm, cold, sweeps


def profile_cycled_bytes(profile: HardwareProfile) -> int:
    """The most bytes any CPU MoE curve of `profile` cycled over (`kttune.hw.dram_stream.cycled_bytes`)."""
    return int(max((cycled_bytes(c) for c in profile.curves_of("cpu_moe")), default=0))


def evaluate(calls: list[str]) -> tuple[dict, str]:
    rows, cycled = [], {}
    for call in calls:
        folder, _, tag = call.rpartition(":")
        quick, warm, cold, sweeps = call_files(Path(folder), tag)
        loaded = [load_profile(p) for p in (quick, warm, cold)]
        cycled[tag] = {"warm": profile_cycled_bytes(loaded[1]), "cold": profile_cycled_bytes(loaded[2])}
        profs = variants(*loaded)
        rates = stream_rates(loaded[1], loaded[2])
        for s in sweeps:
            got = {v: predict(str(s), p) for v, p in profs.items()}
            rows.append(
                {
                    "call": tag,
                    "model": got[VARIANTS[0]]["model"],
                    **{v: got[v]["hybrid"]["signed"] for v in VARIANTS},
                    OWN_STREAM: with_own_stream(s, loaded[0], rates),
                }
            )
    summary = {}
    for v in (*VARIANTS, OWN_STREAM):
        xs = [r[v] for r in rows if r[v] is not None]
        if not xs:
            summary[v] = None  # no call of these had a real cold timing
            continue
        summary[v] = {
            "mean_abs": statistics.mean(abs(x) for x in xs),
            "median_signed": statistics.median(xs),
            "worst": max(abs(x) for x in xs),
            "over_15": sum(abs(x) > 0.15 for x in xs),
            "n": len(xs),
        }
    lines = [
        "# The quick CPU MoE layer warm or cold, against the runner's hybrid forwards",
        "",
        "Per sweep, the hybrid path's signed error (predicted / measured - 1 per decoder-layer forward, the "
        "sweep's mean; raw cost model) from the call's quick probe as it is and with its CPU MoE curves replaced.",
        "",
        "| variant | mean absolute | median signed | worst | over 15% |",
        "|---|---|---|---|---|",
    ]
    for v, m in summary.items():
        lines.append(
            f"| {v} | n/a (no real cold timing) | | | |"
            if m is None
            else f"| {v} | {m['mean_abs']:.0%} | {m['median_signed']:+.0%} | {m['worst']:.0%} | {m['over_15']} of {m['n']} |"
        )
    cols = (*VARIANTS, OWN_STREAM)
    lines += ["", "| call | model | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for r in rows:
        cells = [signed_cell(r[v], "n/a") for v in cols]
        lines.append(f"| {r['call']} | {r['model']} | " + " | ".join(cells) + " |")
    lines += ["", "Bytes each call's timings cycled over (the largest `source_bytes` of its CPU MoE points):", ""]
    for tag, b in cycled.items():
        same = b["cold"] <= b["warm"]
        lines.append(
            f"- {tag}: warm {b['warm'] / 2**20:.0f} MiB, cold {b['cold'] / 2**20:.0f} MiB"
            + (": the cold timing cycled over no copies, a second warm timing, not a cold one" if same else "")
        )
    doc = {"calls": calls, "rows": rows, "summary": summary, "cycled_bytes": cycled}
    return doc, "\n".join(lines + [""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--call", action="append", required=True, metavar="FOLDER:TAG", help="a COLD=1 call's results")
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    doc, text = evaluate(args.call)
    write_result(args.out, doc, text)


if __name__ == "__main__":
    main()
