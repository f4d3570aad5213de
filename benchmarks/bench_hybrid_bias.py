"""Which way the quick probe reads the hybrid path: every H100 quick probe taken in the call of its
instance's runner sweeps predicting those sweeps, the signed error per model and path, gathered over
probes and instances.

A per-probe mean absolute error (`bench_probe_median.py`, `bench_transfer.py`) mixes two things: the
host's reading moving between probes (which repeating the probe averages out) and a bias of the cost
model that every probe shares (which it does not). This separates them: per model, the median of
the signed errors over every probe with its range and how many probes read it fast, so a model read
fast by 12 of 13 probes is told apart from one read fast by half of them.

Calls: on the H100 box, those run with AGAIN=1 or LATE=1 (`bench_probe_median.LATER_CALLS`, each with
two or three probes); on the H200 box, for contrast, the quick-transfer calls a-d of 2026-12-04 (one
probe each). Raw cost model (calibration left out); signed error = predicted / measured - 1 per
decoder-layer forward, the mean over a sweep's forwards.

Second table: the same signed error from `kttune probe --model M` (the model's own layer, GBs of
experts read from DRAM at every size, as the server reads them) against the sweeps of M run in the
same device call (`OWN_LAYER_PAIRS`): whether the hybrid path read fast follows the quick probe's small
layer (which stays in the last-level cache) or the box.

    python3 benchmarks/bench_hybrid_bias.py --out benchmarks/results/2026-12-05-computed/hybrid-bias
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from bench_probe_median import H100, H200, LATER_CALLS, instance_of_call
from bench_quick_transfer import PATHS, predict
from results_layout import write_result

from kttune.hw.profile import load_profile


# box -> (results folder, calls)
BOXES = {"H100": (H100, LATER_CALLS), "H200": (H200, ("a", "b", "c", "d"))}
RESULTS = H100.parent


def own_layer_pairs() -> list[tuple[str, Path, Path]]:
    """(box, `kttune probe --model M` profile, the same call's path-runner sweeps of M): the H100
    box's thread-interp call (13-thread sweeps, 2026-12-05) and the H200 box's one-instance calls
    (11 threads, 2026-12-03 and 2026-12-04), whose probe files sit beside their sweeps."""
    out = [
        ("H100", H100 / f"thread-interp-runner-probe-{m}.profile.json", H100 / f"thread-interp-runner-sweep-{m}.json")
        for m in ("glm-4.5-air", "qwen3-30b-a3b", "minimax-m2.1")
    ]
    for day, suffix in (
        ("2026-12-03", "one-instance"),
        ("2026-12-04", "bf16-instance"),
        ("2026-12-04", "fp8-instance"),
        ("2026-12-04", "one-instance"),
    ):
        folder = RESULTS / f"{day}-h200-pcie5-xeon-amx-16c"
        for sweep in sorted(folder.glob(f"crossover-*-{suffix}.json")):
            model = sweep.name.removeprefix("crossover-").removesuffix(f"-{suffix}.json")
            probe = folder / f"probe-{model}-{suffix}.profile.json"
            if probe.exists():
                out.append(("H200", probe, sweep))
    return out


def own_layer_errors() -> list[dict]:
    """Per `own_layer_pairs` entry: the model and each path's signed error."""
    rows = []
    for box, probe, sweep in own_layer_pairs():
        r = predict(str(sweep), load_profile(probe))
        rows.append(
            {"box": box, "probe": probe.name, "sweep": sweep.name, "model": r["model"]}
            | {p: r[p]["signed"] for p in PATHS}
        )
    return rows


def signed_errors(calls: tuple[str, ...] = LATER_CALLS, folder: Path = H100) -> list[dict]:
    """Per probe of each call and per sweep of the call: the model and each path's signed error."""
    rows = []
    for call in calls:
        probes, sweeps = instance_of_call(folder, call)
        for i, probe in enumerate(probes):
            prof = load_profile(probe)
            for s in sweeps:
                r = predict(str(s), prof)
                rows.append(
                    {
                        "call": call,
                        "probe": i + 1,
                        "host_uptime_s": prof.provenance.host_uptime_s,
                        "model": r["model"],
                        **{p: r[p]["signed"] for p in PATHS},
                    }
                )
    return rows


def signed_stats(xs: list[float]) -> dict:
    """Signed errors' median, range, how many read fast (below -2%) or slow (above +2%), and count."""
    return {
        "median": statistics.median(xs),
        "min": min(xs),
        "max": max(xs),
        "fast": sum(x < -0.02 for x in xs),
        "slow": sum(x > 0.02 for x in xs),
        "n": len(xs),
    }


def signed_cell(x: float | None, missing: str = "-") -> str:
    """A signed error as a table cell ("+12%"), `missing` where there is none."""
    return f"{x:+.0%}" if x is not None else missing


def summary(rows: list[dict]) -> dict:
    """Per model and path, over every (probe, sweep): the median signed error, its range, how many
    read fast (below -2%), slow (above +2%), and the count; and the same over every model."""
    out: dict = {}
    models = sorted({r["model"] for r in rows})
    for path in PATHS:
        per = {}
        for m in [*models, "all"]:
            xs = [r[path] for r in rows if r[path] is not None and m in ("all", r["model"])]
            if xs:
                per[m] = signed_stats(xs)
        out[path] = per
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    doc: dict = {"boxes": {}}
    lines = [
        "# Which way the quick probe reads each path",
        "",
        "Each quick probe predicting its call's runner sweeps (3 interleaved repeats, 11 threads). Signed error = "
        "predicted / measured - 1 per decoder-layer forward, a sweep's mean; per model the median over (probe, "
        "sweep) pairs, its range, and how many read fast (< -2%) or slow (> +2%). Raw cost model.",
        "",
    ]
    for box, (folder, calls) in BOXES.items():
        rows = signed_errors(calls, folder)
        s = summary(rows)
        doc["boxes"][box] = {"calls": list(calls), "rows": rows, "summary": s}
        probes = {(r["call"], r["probe"]) for r in rows}
        lines += [f"## {box} box: {len(probes)} quick probes of {len(calls)} calls ({', '.join(calls)})", ""]
        for path in PATHS:
            lines += [
                f"### {path}",
                "",
                "| model | median signed | range | read fast | read slow | pairs |",
                "|---|---|---|---|---|---|",
            ]
            for m, v in s[path].items():
                name = "**every model**" if m == "all" else m
                lines.append(
                    f"| {name} | {v['median']:+.0%} | {v['min']:+.0%} to {v['max']:+.0%} | {v['fast']} | {v['slow']} | "
                    f"{v['n']} |"
                )
            lines.append("")
    own = own_layer_errors()
    doc["own_layer"] = own
    lines += [
        "## The model's own layer probed (`kttune probe --model M`), the same call's sweeps of M",
        "",
        "The layer the server streams (GBs of experts, read from DRAM at every size), probed in the device call that "
        "ran the sweeps: if the quick probe's small layer (in the last-level cache) were what reads the hybrid path "
        "fast, this would not. H100: one instance, 13-thread sweeps; H200: the one-instance calls of 2026-12-03 and 2026-12-04, 11 threads.",
        "",
        "| box | model | hybrid signed | layerwise signed | sweep |",
        "|---|---|---|---|---|",
    ]
    for r in own:
        cells = [signed_cell(r[p]) for p in PATHS]
        lines.append(f"| {r['box']} | {r['model']} | {cells[0]} | {cells[1]} | {r['sweep']} |")
    lines.append("")
    write_result(args.out, doc, "\n".join(lines))


if __name__ == "__main__":
    main()
