"""How much of the cost model's error on a model is the machine instance: the same path-runner
measurements predicted by the shipped profile and by a `kttune probe --model X` taken in the same
device call (the same machine) as the runs.

The device tool's machines of one kind are separate VMs: a run of a later call may land on another
host. The shipped profile is one instance's measurement; `kttune tune` probes the instance it advises.
For each (runs, same-call probe) pair given, the prediction profile is the shipped one with every
curve kind the probe measured replaced by the probe's curves (what the probe did not measure, the
shipped profile keeps). Reported per path: mean absolute and signed % error per decoder-layer
forward; per GPU-expert count: the measured crossover with its interval (repeats) and each
prediction; and the per-method calibration fitted on the model's other forwards, each forward held out
(what `kttune calibrate` and `kttune tune` fit on the machine that serves). Writes
same-machine-TAG.{json,md} to --out.

With `--leave-one-model-out` (every pair's probe from one machine instance), each model is also
predicted from the other pairs' probes alone, overlaid on the shipped profile the same way: the
instance fixed, the model's own expert shape, layer and attention block never measured. That
separates what carries from model to model from what moves between instances. `--others PROBE ...`
adds probes of the same instance that have no runs (models measured only to be left in). With
`--flops-alone`, every profile but the model's own probe is also read without the expert-shape law,
so the table shows what the law moved.

    python benchmarks/bench_same_machine.py RUNS.json:PROBE.profile.json [...] [--out DIR] [--tag TAG]
        [--leave-one-model-out [--others PROBE ...]] [--flops-alone]
"""

from __future__ import annotations

import argparse
import json
import statistics
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path

from bench_transfer import load_points, predicted_crossover

import kttune.spec.kt_classes as kt_classes
from kttune.calibration.transfer import TermCorrection, leave_one_point_out, per_method_predictor
from kttune.hw.profile import HardwareProfile, load_profile
from kttune.hw.registry import resolve_profile
from kttune.protocol import check_crossing
from results_layout import COMPUTED, results_dir


def overlaid(shipped: HardwareProfile, probe: HardwareProfile) -> HardwareProfile:
    """`shipped` with every curve kind `probe` measured taken from `probe` alone."""
    kinds = {c.kind for c in probe.curves}
    return replace(shipped, curves=tuple(c for c in shipped.curves if c.kind not in kinds) + probe.curves)


def errors(points, path: str) -> dict:
    xs = [p for p in points if p.path == path]
    if not xs:
        return {"forwards": 0, "mape": None, "signed": None}
    rel = [(p.raw_ms - p.measured_ms) / p.measured_ms for p in xs]
    return {"forwards": len(xs), "mape": statistics.mean(abs(r) for r in rel), "signed": statistics.mean(rel)}


def crossovers(crossings) -> list[dict]:
    """Each measured crossover with the raw model's prediction, judged by
    `kttune.protocol.check_crossing` (a crossing beyond the sweep is a bound: "at or below" its
    first size, "above" its last)."""
    out = []
    for x in crossings:
        iv = x.get("interval")
        pred = predicted_crossover(x["comp"], x["run"], TermCorrection())
        check = check_crossing(pred, x.get("sizes") or [], iv, x["measured"])
        out.append(
            {
                "gpu_experts": x["gpu_experts"],
                "measured": None if check.measured is None else round(check.measured),
                "interval": [iv.low, iv.high] if iv is not None and iv.x is not None else None,
                "below_sweep": check.edge == "below",
                "above_sweep": x["sizes"][-1] if check.edge == "above" else None,
                "predicted": pred,
                "error": check.error,
                "inside_interval": check.inside,
                "agrees": check.agrees,
            }
        )
    return out


OTHER_MODELS = "other models, same instance"


@contextmanager
def flops_alone():
    """The CPU fit without the expert-shape law's cost per output element
    (`kttune.spec.kt_classes.MATRIX_OUTPUT_FLOPS` emptied): the model as it was before the law."""
    saved = kt_classes.MATRIX_OUTPUT_FLOPS
    kt_classes.MATRIX_OUTPUT_FLOPS = {}
    try:
        yield
    finally:
        kt_classes.MATRIX_OUTPUT_FLOPS = saved


FLOPS_ALONE = ", flops alone"


def analyse(
    pairs: list[tuple[str, str]],
    shipped_name: str,
    leave_one_model_out: bool = False,
    others: tuple[str, ...] = (),
    compare_flops_alone: bool = False,
) -> list[dict]:
    shipped = replace(resolve_profile(shipped_name, None), calibration=())
    probes = {f: load_profile(f) for _, f in pairs}
    probes.update({f: load_profile(f) for f in others if f not in probes})
    rows = []
    for runs, probe_file in pairs:
        probe = probes[probe_file]
        profiles = [("shipped", shipped), ("same machine", overlaid(shipped, probe))]
        if leave_one_model_out:
            rest = [p for f, p in probes.items() if f != probe_file]
            union = replace(probe, curves=tuple(c for p in rest for c in p.curves))
            profiles.append((OTHER_MODELS, overlaid(shipped, union)))
        if compare_flops_alone:
            profiles += [(label + FLOPS_ALONE, prof) for label, prof in profiles if label != "same machine"]
        row = {"runs": runs, "probe": probe_file, "profiles": {}}
        for label, prof in profiles:
            # every fit is made lazily, so the whole row is computed under one law
            with flops_alone() if label.endswith(FLOPS_ALONE) else nullcontext():
                points, crossings, notes = load_points([runs], prof)
                row["model"] = points[0].model if points else None
                row["profiles"][label] = {
                    "borrowed": sorted({n for ns in notes.values() for n in ns}),
                    "hybrid": errors(points, "hybrid"),
                    "layerwise": errors(points, "layerwise"),
                    # what `kttune calibrate` / `kttune tune` fit on the serving machine: the per-method
                    # calibration on this model's other forwards, each forward held out
                    "calibrated_held_out": leave_one_point_out(points, per_method_predictor) if len(points) > 2 else {},
                    "crossover": crossovers(crossings),
                }
        rows.append(row)
    return rows


def pct(v) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def markdown(rows: list[dict], shipped: str) -> str:
    lines = [
        "# The same runs predicted by the shipped profile and by a probe of the same machine",
        "",
        f"Shipped profile: `{shipped}` (its calibration left out). Same machine: the shipped profile with every curve kind "
        "a `kttune probe --model X` taken in the runs' own device call measured replaced by that probe's curves. Error: "
        "per decoder-layer forward, mean absolute (signed: + = predicted slower than measured).",
        "",
        "| model | profile | hybrid | layerwise | calibrated, each forward held out: hybrid / layerwise | crossover: n, measured [interval] -> predicted (error, inside) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        for label, d in r["profiles"].items():
            cells = []
            for path in ("hybrid", "layerwise"):
                e = d[path]
                cells.append(
                    f"{pct(e['mape'])} ({e['signed']:+.0%}, {e['forwards']} forwards)"
                    if e["mape"] is not None
                    else "n/a"
                )
            cross = "; ".join(
                f"n={c['gpu_experts']}: "
                + (
                    f"at or below {c['measured']} (the sweep's first size)"
                    if c.get("below_sweep")
                    else f"above {c['above_sweep']} (the sweep's last size)"
                    if c.get("above_sweep")
                    else f"{c['measured']}"
                )
                + (f" [{c['interval'][0]:.0f}-{c['interval'][1]:.0f}]" if c["interval"] else "")
                + f" -> {c['predicted']} ({pct(c['error'])}, {'inside' if c['inside_interval'] else 'outside'})"
                for c in d["crossover"]
            )
            cal = d.get("calibrated_held_out", {})
            cal_cell = " / ".join(pct(cal.get(path)) for path in ("hybrid", "layerwise"))
            lines.append(f"| {r['model']} | {label} | {cells[0]} | {cells[1]} | {cal_cell} | {cross} |")
    if any(label.endswith(FLOPS_ALONE) for r in rows for label in r["profiles"]):
        lines += [
            "",
            f"`...{FLOPS_ALONE}`: the same profile with kt-kernel's MoE fitted by flops alone, without the expert-shape "
            "law's cost per output element (docs/cost-model.md#the-expert-shape-law).",
        ]
    lomo = [r for r in rows if OTHER_MODELS in r["profiles"]]
    if lomo:
        lines += [
            "",
            f"{OTHER_MODELS}: the shipped profile with every curve kind the other rows' probes measured replaced by "
            "those probes' curves (one machine instance; this model's own probe left out). What they did not "
            "measure for the model, and the cost model borrowed:",
            "",
        ]
        for r in lomo:
            borrowed = r["profiles"][OTHER_MODELS].get("borrowed") or ["nothing"]
            lines.append(f"- {r['model']}: " + "; ".join(borrowed))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", nargs="+", help="RUNS.json:PROBE.profile.json")
    ap.add_argument("--profile", default="h200-pcie5-xeon-amx-16c")
    ap.add_argument("--out", default=None, help=f"default: {COMPUTED} folder of today")
    ap.add_argument("--tag", default="h200")
    ap.add_argument("--leave-one-model-out", action="store_true", help="also predict each model from the other probes")
    ap.add_argument(
        "--others", nargs="*", default=(), help="probes of the same instance without runs, for --leave-one-model-out"
    )
    ap.add_argument(
        "--flops-alone",
        action="store_true",
        help="also predict without the expert-shape law (each profile but the model's own probe)",
    )
    a = ap.parse_args()
    pairs = [tuple(p.split(":", 1)) for p in a.pairs]
    rows = analyse(pairs, a.profile, a.leave_one_model_out, tuple(a.others), a.flops_alone)
    out = Path(a.out) if a.out else results_dir(COMPUTED)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"same-machine-{a.tag}.json").write_text(json.dumps({"profile": a.profile, "rows": rows}, indent=1) + "\n")
    md = markdown(rows, a.profile)
    (out / f"same-machine-{a.tag}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
