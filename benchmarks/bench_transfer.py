"""Errors that mean transfer: how far the cost model, raw and corrected, is from path-runner
measurements of a model (or a thread count) its corrections were not fitted on.

Reads path-runner results files (`kttune paths` / benchmarks/bench_paths.py / bench_transfer_runs.py
output), predicts every forward with the raw cost model of `--profile` (its calibration left out)
and reports, per model and path (mean absolute % error per decoder-layer forward):

- raw: the cost model as it is;
- per-method, leave one model out: the profile's calibration form (a factor per method and path)
  fitted on the other models (a method no other model runs keeps the raw prediction);
- terms, leave one model out: one correction per path shared by all methods, on the layer's
  physical parts (kttune.calibration.transfer), its shrinkage chosen on the other models only;
- the same, leave one thread count out (when the files hold more than one `--kt-cpuinfer`);
- leave one point out for both corrections (what the calibration reported so far);
- the shrinkage curve: every model's held-out error at each shrinkage;
- the crossover per model and GPU-expert count: measured, raw, and with the terms correction fitted
  on the other models.

The correction to ship is the one `choose_shrinkage` picks on all models: none when every shrinkage
makes some held-out model worse than the raw model. Writes transfer-<tag>.json and .md to --out.
`--without KIND:METHOD` predicts from the profile less those curves: what a measured curve adds, on the
same runs.

    python benchmarks/bench_transfer.py [RESULTS.json ...] [--profile NAME] [--out DIR] [--tag TAG] [--without KIND:METHOD]
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path

from kttune.cost.components import FASTEST_PIPELINE, Components
from kttune.calibration.transfer import (
    SHRINKAGES,
    VARIANTS,
    TermCorrection,
    TransferPoint,
    by_model,
    by_threads,
    choose_shrinkage,
    fit_terms,
    held_out,
    leave_one_point_out,
    mean_held_out,
    nested_held_out,
    per_method_predictor,
    terms_predictor,
)
from kttune.hw.registry import resolve_profile
from kttune.hw.profile import HardwareProfile
from kttune.calibration.runner import (
    disturbed,
    launch_config,
    layer_terms,
    measured_crossover,
    smallest_forward_where,
    transfer_points,
)
from kttune.protocol import check_crossing
from kttune.runner.api import crossover_interval
from kttune.runner.result import runs_in_results
from kttune.spec.loader import load_model
from results_layout import COMPUTED, results_dir

DEFAULT_RESULTS = (
    "benchmarks/results/2026-12-01-h200-pcie5-xeon-amx-16c/paths.json",
    "benchmarks/results/2026-12-01-h200-pcie5-xeon-amx-16c/paths-earlier.json",
)


def load_points(paths: list[str], profile) -> tuple[list[TransferPoint], list[dict], dict[str, list[str]]]:
    """Transfer points of every full-shape run, the data the crossovers need, per model, and per
    model the cost model's notes on what it borrowed (a method, a stage or a shape the profile did
    not measure, `Components.notes`)."""
    raw = replace(profile, calibration=())
    points, crossings, borrowed = [], [], {}
    for path in paths:
        d = json.loads(Path(path).read_text())
        for req, runs in runs_in_results(d):
            if not runs or req.get("small"):
                continue
            spec = load_model(req["model"], req.get("method"))
            # the load predicted for the pipeline driver the runs used (Components.pipeline_driver)
            c = Components(
                raw, spec, runs[0].method, runs[0].tp, pipeline_driver=runs[0].pipeline_driver or FASTEST_PIPELINE
            )
            for r in runs:
                points += transfer_points(r, c)
            seen = borrowed.setdefault(spec.name, [])
            seen += [n for n in c.notes if "not measured" in n and n not in seen]
            for n in sorted({r.gpu_experts for r in runs}):
                forced = [
                    r
                    for r in runs
                    if r.gpu_experts == n and r.forced_path and len(r.forwards) == 1 and not disturbed(r.forwards[0])
                ]
                pairs = []
                for m in sorted({r.prompt_tokens for r in forced}):
                    hy = [
                        r.forwards[0].mean_moe_ms for r in forced if r.prompt_tokens == m and r.forced_path == "hybrid"
                    ]
                    lw = [
                        r.forwards[0].mean_moe_ms
                        for r in forced
                        if r.prompt_tokens == m and r.forced_path == "layerwise"
                    ]
                    if hy and lw:
                        pairs.append((m, hy[0], lw[0]))
                if pairs:
                    ref = next(r for r in runs if r.gpu_experts == n)
                    crossings.append(
                        {
                            "file": path,
                            "model": spec.name,
                            "gpu_experts": n,
                            "threads": ref.cpuinfer,
                            "measured": measured_crossover(pairs),
                            "sizes": [m for m, _, _ in pairs],
                            "interval": crossover_interval(forced),
                            "comp": c,
                            "run": ref,
                        }
                    )
    return points, crossings, borrowed


def predicted_crossover(c: Components, run, correction: TermCorrection, hi: int = 65536) -> int | None:
    """The smallest forward (1-token resolution) at which the corrected layerwise MoE layer is no
    slower than the corrected hybrid one."""
    cfg = launch_config(run)

    def moe(m: int, path: str) -> float:
        p = TransferPoint(
            run.model, run.method, path, m, 0, run.gpu_experts, run.cpuinfer, 1.0, 0.0, layer_terms(c, cfg, m, path)
        )
        return correction.predict(p)

    if not c.method.layerwise:
        return None
    return smallest_forward_where(lambda m: moe(m, "layerwise") <= moe(m, "hybrid"), hi)


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def analyse(points: list[TransferPoint], crossings: list[dict]) -> dict:
    models = sorted({p.model for p in points})
    threads = sorted({p.threads for p in points})
    lomo_method = held_out(points, by_model, per_method_predictor)
    lomo = {v: nested_held_out(points, by_model, variant=v) for v in VARIANTS}
    loto = {v: nested_held_out(points, by_threads, variant=v) for v in VARIANTS} if len(threads) > 1 else {}
    curves = {v: {s: held_out(points, by_model, terms_predictor(s, v)) for s in SHRINKAGES} for v in VARIANTS}
    chosen = {v: choose_shrinkage(points, by_model, variant=v)[0] for v in VARIANTS}
    passing = [v for v in VARIANTS if not math.isinf(chosen[v])]
    ship_v = min(passing, key=lambda v: mean_held_out(curves[v][chosen[v]])) if passing else None
    shipped = fit_terms(points, chosen[ship_v], ship_v) if ship_v else TermCorrection()
    lopo = {"per_method": leave_one_point_out(points, per_method_predictor)}
    lopo.update({f"terms:{v}": leave_one_point_out(points, terms_predictor(0.0, v)) for v in VARIANTS})
    # calibrated on the model's own runs, each forward held out: what `kttune calibrate` (and tune's
    # calibration) gives on the box that will serve the model
    own = {m: leave_one_point_out([p for p in points if p.model == m], per_method_predictor) for m in models}
    rows = []
    for (m, path), r in sorted(lomo_method.items()):
        rows.append(
            {
                "model": m,
                "method": next(p.method for p in points if p.model == m),
                "path": path,
                "points": r["points"],
                "raw": r["raw"],
                "per_method_lomo": r["held_out"],
                "calibrated_own_lopo": own[m].get(path),
                **{f"terms_{v}_lomo": lomo[v][(m, path)]["held_out"] for v in VARIANTS},
                **{f"terms_{v}_shrinkage": lomo[v][(m, path)]["shrinkage"] for v in VARIANTS},
            }
        )
    # the crossover with the variant whose nested held-out error is least over every model
    cross_v = min(VARIANTS, key=lambda v: mean_held_out(lomo[v]))
    cross = []
    for x in crossings:
        train = [p for p in points if p.model != x["model"]]
        s, _ = choose_shrinkage(train, by_model, variant=cross_v)
        corr = fit_terms(train, s, cross_v)
        raw = predicted_crossover(x["comp"], x["run"], TermCorrection())
        held = predicted_crossover(x["comp"], x["run"], corr)
        iv = x.get("interval")
        raw_check = check_crossing(raw, x["sizes"], iv, x["measured"])
        held_check = check_crossing(held, x["sizes"], iv, x["measured"])
        meas = None if raw_check.measured is None else round(raw_check.measured)
        cross.append(
            {
                "file": x["file"],
                "model": x["model"],
                "gpu_experts": x["gpu_experts"],
                "threads": x["threads"],
                "measured": meas,
                "measured_edge": raw_check.edge,
                "sweep": [x["sizes"][0], x["sizes"][-1]],
                "measured_interval": iv.to_dict() if iv is not None else None,
                "raw": raw,
                "raw_error": raw_check.error,
                "raw_inside_or_within_20pct": raw_check.agrees,
                "terms_lomo": held,
                "terms_lomo_error": held_check.error,
                "shrinkage": None if math.isinf(s) else s,
            }
        )
    return {
        "models": models,
        "threads": threads,
        "points": len(points),
        "variants": {v: VARIANTS[v] for v in VARIANTS},
        "rows": rows,
        "loto": [
            {"variant": v, "threads": t, "path": path, **r}
            for v, tab in loto.items()
            for (t, path), r in sorted(tab.items())
        ],
        "shrinkage_curves": {
            v: {
                ("inf" if math.isinf(s) else str(s)): {f"{m}/{path}": r["held_out"] for (m, path), r in t.items()}
                for s, t in c.items()
            }
            for v, c in curves.items()
        },
        "chosen_shrinkage": {v: (None if math.isinf(s) else s) for v, s in chosen.items()},
        "leave_one_point_out": lopo,
        "shipped": shipped.to_dict() | {"variant": ship_v},
        "crossover_variant": cross_v,
        "crossover": cross,
    }


def markdown(a: dict, files: list[str], profile_name: str) -> str:
    ship = a["shipped"]
    vs = list(a["variants"])
    lines = [
        "# Errors that mean transfer: leave one model out, leave one thread count out",
        "",
        f"Results: {', '.join(files)}. Predictions: `{profile_name}` without its calibration. {a['points']} forwards "
        f"of {len(a['models'])} models at --kt-cpuinfer {', '.join(map(str, a['threads']))}; error = mean absolute "
        "% error per decoder-layer forward. Corrections: per-method (the profile's calibration form, fitted on the "
        "other models) and shared physical terms in three feature sets ("
        + "; ".join(f"{v}: {', '.join(f'{p} {list(n)}' for p, n in a['variants'][v].items())}" for v in vs)
        + "), each held-out model predicted at the shrinkage chosen on the other models (in brackets; none = no correction). "
        "Calibrated, own runs: the per-method calibration fitted on the model's other forwards, each forward held out "
        "(what `kttune calibrate` and `kttune tune` fit on the box that serves the model).",
        "",
        "| model | method | path | forwards | raw | calibrated, own runs | per-method | "
        + " | ".join(f"terms: {v}" for v in vs)
        + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(vs),
    ]
    for r in a["rows"]:
        cells = []
        for v in vs:
            sh = r[f"terms_{v}_shrinkage"]
            cells.append(f"{pct(r[f'terms_{v}_lomo'])} ({'none' if sh is None else f'{sh:g}'})")
        lines.append(
            f"| {r['model']} | {r['method']} | {r['path']} | {r['points']} | {pct(r['raw'])} | "
            f"{pct(r.get('calibrated_own_lopo'))} | {pct(r['per_method_lomo'])} | " + " | ".join(cells) + " |"
        )
    lines += [
        "",
        "What the profile did not measure for a model, and the cost model borrowed (its notes): "
        + (
            "; ".join(f"{m}: {' / '.join(ns)}" for m, ns in a.get("borrowed", {}).items())
            if a.get("borrowed")
            else "nothing."
        ),
        "",
        "Leave one thread count out: "
        + (
            "; ".join(
                f"{r['variant']} {r['threads']} threads {r['path']}: raw {pct(r['raw'])}, held out {pct(r['held_out'])}"
                for r in a["loto"]
            )
            if a["loto"]
            else "n/a (one thread count in these files)."
        ),
        "",
        "Leave one point out (a correction fitted on every model, each forward held out): "
        + ", ".join(f"{k} {path} {pct(v)}" for k, d in a["leave_one_point_out"].items() for path, v in d.items()),
        "",
    ]
    for v in vs:
        curve = a["shrinkage_curves"][v]
        cols = list(next(iter(curve.values())).keys())
        lines += [
            f"## Shrinkage curve, terms: {v} (each model held out; chosen on all: "
            f"{'none' if a['chosen_shrinkage'][v] is None else a['chosen_shrinkage'][v]})",
            "",
            "| shrinkage | " + " | ".join(cols) + " |",
            "|---|" + "---|" * len(cols),
        ]
        for s, row in curve.items():
            lines.append(f"| {'none' if s == 'inf' else s} | " + " | ".join(pct(row[c]) for c in cols) + " |")
        lines.append("")
    lines += [
        "Shipped: "
        + (
            "no correction (every shrinkage of every feature set makes a held-out model worse than raw)"
            if ship["variant"] is None
            else f"terms: {ship['variant']} at shrinkage {ship['shrinkage']:g}, deltas {json.dumps(ship['deltas'])}"
        ),
        "",
        f"## Crossover (tokens) per model and GPU-expert count (terms: {a['crossover_variant']}, held-out model)",
        "",
        "Measured: where the paired layerwise / hybrid ratio of forced single forwards crosses 1, with the interval "
        "from the ratios' bounds when the sweep has repeats (`kttune paths --sweep ... --repeats N`); without repeats, "
        "the crossing of single samples and no interval. Judged (kttune.protocol.check_crossing): inside the interval "
        "or within 20%; a crossover beyond the sweep is a bound, judged by the side the prediction falls on.",
        "",
        "| file | model | n | measured [interval] | raw (error) | raw inside or within 20% | corrected, held-out model (error) |",
        "|---|---|---|---|---|---|---|",
    ]
    for x in a["crossover"]:
        iv = x.get("measured_interval") or {}
        edge, sweep = x.get("measured_edge"), x.get("sweep") or [None, None]
        if edge == "below":
            meas = f"at or below {sweep[0]}"
        elif edge == "above":
            meas = f"above {sweep[1]}"
        else:
            meas = f"{x['measured']}" + (f" [{iv['low']:.0f}-{iv['high']:.0f}]" if iv.get("x") is not None else "")
        judged = {True: "yes", False: "no", None: "n/a"}[x.get("raw_inside_or_within_20pct")]
        lines.append(
            f"| {Path(x['file']).stem} | {x['model']} | {x['gpu_experts']} | {meas} | {x['raw']} ({pct(x['raw_error'])}) | "
            f"{judged} | {x['terms_lomo']} ({pct(x['terms_lomo_error'])}) |"
        )
    return "\n".join(lines) + "\n"


def without_curves(prof: HardwareProfile, drop: list[str]) -> HardwareProfile:
    """`prof` less its curves of each "KIND:METHOD" in `drop` (an unknown pair is an error, not a no-op)."""
    for pair in drop:
        kind, _, method = pair.partition(":")
        if not prof.curves_of(kind, method=method):
            raise SystemExit(f"--without {pair}: the profile has no {kind} curve of {method}")
        prof = replace(prof, curves=tuple(c for c in prof.curves if c.kind != kind or not c.matches(method=method)))
    return prof


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="*", default=list(DEFAULT_RESULTS))
    ap.add_argument("--profile", default="h200-pcie5-xeon-amx-16c")
    ap.add_argument(
        "--out",
        help="folder for the results (default: benchmarks/results/<today>-computed/, benchmarks/results_layout.py)",
    )
    ap.add_argument("--tag", default="h200-pcie5-xeon-amx-16c")
    ap.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="KIND:METHOD",
        help="leave the profile's curves of this kind and method out (what a measured curve adds: the same runs "
        "predicted with and without it), e.g. pipeline:MXFP4; repeatable",
    )
    a = ap.parse_args()
    prof = without_curves(resolve_profile(a.profile, None), a.without)
    label = a.profile + "".join(f" without its {w} curves" for w in a.without)
    points, crossings, borrowed = load_points(a.results, prof)
    res = analyse(points, crossings)
    res["borrowed"] = {m: n for m, n in sorted(borrowed.items()) if n}
    out = Path(a.out) if a.out else results_dir(COMPUTED)
    out.mkdir(parents=True, exist_ok=True)
    md = markdown(res, a.results, label)
    (out / f"transfer-{a.tag}.md").write_text(md)
    (out / f"transfer-{a.tag}.json").write_text(
        json.dumps(
            {"results": a.results, "profile": a.profile, **({"without": a.without} if a.without else {}), **res},
            indent=1,
        )
        + "\n"
    )
    print(md)
    print(f"wrote {out / f'transfer-{a.tag}.md'} and .json")


if __name__ == "__main__":
    main()
