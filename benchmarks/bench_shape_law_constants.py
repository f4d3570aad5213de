"""How much do the expert-shape law's constants matter where the CPU error is?

Each constant of `kttune.spec.kt_classes.MATRIX_OUTPUT_FLOPS` is the median of its runs
(`MATRIX_OUTPUT_FLOPS_RUNS`: the benchmark's interleaved runs and the probe's own shape sets). This
reads every run's r again (`kttune.hw.shape_law.run_slopes`, `output_flops`), checks that the table
holds their medians, and predicts models' own kt-kernel MoE curves (256 tokens and more) from a
quick profile of the same instance (`bench_shape_law_probe.errors`) with the constants taken four
ways: the median of the benchmark's runs alone (the table before the probe's sets counted), the
median of all runs (the table), and every class at its runs' smallest and at their largest r; with
`--more-runs`, a fifth: the median of all runs and those profiles' shape-law sets (probes of the
same CPU that the table's runs do not count: whether counting them would move the predictions).
Inputs per instance: a quick profile (`--base`) and the model probes of that instance (`--models`);
the first `--base` pairs with the first `--models` group, and so on.

    python benchmarks/bench_shape_law_constants.py --results benchmarks/results \
        --instance NAME BASE.profile.json M1.profile.json ... [--instance ...] \
        [--more-runs P1.profile.json ...] --out FILE.md
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from bench_shape_law_probe import _model_of, errors, quick_cpu_on

from results_layout import write_result

import kttune.spec.kt_classes as kt_classes
from kttune.hw.profile import load_profile
from kttune.hw.registry import load_shipped
from kttune.hw.shape_law import output_flops, run_slopes


def runs_r(results: Path) -> dict[tuple[str, str], list[tuple[str, float]]]:
    """Per (build, class): each run's path and r."""
    return {
        key: [(p, output_flops(run_slopes(results / p, key))) for p in paths]
        for key, paths in kt_classes.MATRIX_OUTPUT_FLOPS_RUNS.items()
    }


def more_runs_r(paths: list[Path], keys) -> dict[tuple[str, str], list[tuple[str, float]]]:
    """Per (build, class) of `keys`: the r of each profile in `paths` whose shape-law set holds that
    class (five shapes, as a table run must)."""
    out: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for key in keys:
        for p in paths:
            slopes = run_slopes(p, key)
            if len(slopes) >= 5:
                out.setdefault(key, []).append((p.name, output_flops(slopes)))
    return out


def tables(
    runs: dict[tuple[str, str], list[tuple[str, float]]], more: dict[tuple[str, str], list[tuple[str, float]]]
) -> dict[str, dict[tuple[str, str], float]]:
    """The constants four ways, and a fifth with `more` (see the module's docstring)."""
    bench = {k: statistics.median(r for p, r in v if not p.endswith(".profile.json")) for k, v in runs.items()}
    ways = {
        "benchmark's runs": bench,
        "all runs (the table)": {k: statistics.median(r for _, r in v) for k, v in runs.items()},
        "smallest r": {k: min(r for _, r in v) for k, v in runs.items()},
        "largest r": {k: max(r for _, r in v) for k, v in runs.items()},
    }
    if more:
        ways["all runs and --more-runs"] = {
            k: statistics.median([r for _, r in v] + [r for _, r in more.get(k, [])]) for k, v in runs.items()
        }
    return ways


def run(
    results: Path, instances: list[tuple[str, Path, list[Path]]], gpu_from: str, more_paths: list[Path] = ()
) -> dict:
    shipped = load_shipped(gpu_from)
    runs = runs_r(results)
    more = more_runs_r(list(more_paths), runs)
    ways = tables(runs, more)
    table = dict(kt_classes.MATRIX_OUTPUT_FLOPS)
    holds = all(abs(table[k] - v) <= max(1.0, 0.005 * v) for k, v in ways["all runs (the table)"].items())
    rows = []
    try:
        for name, base_path, model_paths in instances:
            plain = quick_cpu_on(load_profile(base_path), shipped)
            for mp in model_paths:
                probe = load_profile(mp)
                model, method = _model_of(mp, probe)
                row = {"instance": name, "model": model, "method": method, "mae": {}, "signed": {}}
                for way, constants in ways.items():
                    kt_classes.MATRIX_OUTPUT_FLOPS = constants
                    e = errors(plain, probe, model, method)
                    row["mae"][way] = statistics.mean(abs(x) for x in e) if e else None
                    row["signed"][way] = statistics.mean(e) if e else None
                rows.append(row)
    finally:
        kt_classes.MATRIX_OUTPUT_FLOPS = table
    return {
        "runs": {f"{k[0]} {k[1]}": [{"run": p, "r": r} for p, r in v] for k, v in runs.items()},
        "more_runs": {f"{k[0]} {k[1]}": [{"run": p, "r": r} for p, r in v] for k, v in more.items()},
        "constants": {way: {f"{k[0]} {k[1]}": v for k, v in c.items()} for way, c in ways.items()},
        "table_holds_the_medians": holds,
        "gpu_from": gpu_from,
        "rows": rows,
    }


def markdown(doc: dict) -> str:
    ways = list(doc["constants"])
    lines = [
        "# The expert-shape law's constants: their runs, and what their spread moves",
        "",
        "Each constant is the median of its runs (`kttune.spec.kt_classes.MATRIX_OUTPUT_FLOPS_RUNS`); "
        f"the table holds the medians of all runs: {'yes' if doc['table_holds_the_medians'] else 'NO'}.",
        "",
        "| build, class | runs: r | " + " | ".join(ways) + " |",
        "|---|---|" + "---|" * len(ways),
    ]
    for key, rs in doc["runs"].items():
        cells = ", ".join(f"{x['r']:,.0f}" for x in rs)
        if doc.get("more_runs", {}).get(key):
            cells += "; --more-runs: " + ", ".join(f"{x['r']:,.0f}" for x in doc["more_runs"][key])
        lines.append(f"| {key} | {cells} | " + " | ".join(f"{doc['constants'][w][key]:,.0f}" for w in ways) + " |")
    lines += [
        "",
        "Each model's kt-kernel MoE at 256 tokens and more, predicted from the quick profile of its instance "
        "with the constants each way: mean absolute error (signed mean in brackets; + = predicted slower).",
        "",
        "| instance | model | method | " + " | ".join(ways) + " |",
        "|---|---|---|" + "---|" * len(ways),
    ]
    by_instance: dict[str, dict[str, list[float]]] = {}
    for r in doc["rows"]:
        cells = []
        for w in ways:
            e, signed = r["mae"][w], r["signed"][w]
            cells.append("n/a" if e is None else f"{e:.0%} ({signed:+.0%})")
            if e is not None:
                by_instance.setdefault(r["instance"], {}).setdefault(w, []).append(e)
        lines.append(f"| {r['instance']} | {r['model']} | {r['method']} | " + " | ".join(cells) + " |")
    for inst, per_way in by_instance.items():
        lines.append(
            f"| **{inst}, mean** | | | " + " | ".join(f"{statistics.mean(per_way[w]):.1%}" for w in ways) + " |"
        )
    if len(by_instance) > 1:
        lines.append(
            "| **every instance, mean of the means** | | | "
            + " | ".join(f"{statistics.mean(statistics.mean(v[w]) for v in by_instance.values()):.1%}" for w in ways)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "results")
    ap.add_argument("--instance", nargs="+", action="append", required=True, metavar="NAME BASE MODELS")
    ap.add_argument("--gpu-from", default="h200-pcie5-xeon-amx-16c", help="shipped profile lending the GPU curves")
    ap.add_argument(
        "--more-runs",
        nargs="+",
        type=Path,
        default=[],
        metavar="PROFILE",
        help="profiles with shape-law sets the table's runs do not count (a fifth way: all runs and these)",
    )
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    instances = []
    for group in a.instance:
        if len(group) < 3:
            ap.error("--instance takes a name, a quick profile and at least one model probe")
        instances.append((group[0], Path(group[1]), [Path(p) for p in group[2:]]))
    doc = run(a.results, instances, a.gpu_from, a.more_runs)
    md = markdown(doc)
    write_result(a.out, doc, md)


if __name__ == "__main__":
    main()
