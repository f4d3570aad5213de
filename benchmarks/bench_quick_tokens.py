"""How far up the quick layer must be timed: quick profiles whose CPU MoE series end at different token
counts (the default 256 before 2026-12-05, 64 rows an expert; 1,024 since, 256 rows), judged on what
they predict of the same instance.

Two kinds of evidence, each per profile and then per series (median over the series' profiles):

- `--sweeps`: the path runner's forced sweeps of one GPU instance (`bench_quick_tokens.sh`), each
  forward predicted by the raw cost model from the quick profile (what `bench_transfer.py` calls raw):
  per model and path the mean absolute and the mean signed error per decoder-layer forward, and each
  model's predicted crossover against the measured one (kttune.protocol.check_crossing).
- `--own`: `kttune probe --model X` curves of the same host, each point at `MIN_TOKENS` and more
  predicted from the quick profile's CPU MoE curves (`bench_shape_law_probe.errors`): a CPU and build
  the device never ran (the development VM's AVX-512 build).

    python3 benchmarks/bench_quick_tokens.py --quick 256=A.profile.json,B.profile.json \
        --quick 1024=C.profile.json,D.profile.json --sweeps S1.json ... --out DIR/quick-tokens-NAME
    python3 benchmarks/bench_quick_tokens.py --quick ... --own probe-MODEL-METHOD.profile.json ... --out ...

`--estimate` asks the question of instances whose quick probes stopped at 256 tokens: each
`--quick` profile of the series named is copied with a point added at the longer series' top (the
quick layer's curves only), its time that profile's 256-token point times the ratio the `--ratios-from`
profiles measured between the two lengths (their median, per method and thread count). An estimate,
labelled so: it assumes the small layer's ratio of one instance holds on another.

    python3 benchmarks/bench_quick_tokens.py --quick 256=P.profile.json --estimate 256 \
        --ratios-from L1.profile.json,L2.profile.json --sweeps S1.json ... --out ...
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from bench_shape_law_probe import MIN_TOKENS, _model_of, errors, quick_cpu_on
from bench_transfer import load_points, predicted_crossover
from results_layout import write_result

from kttune.calibration.transfer import TermCorrection
from kttune.hw.profile import load_profile
from kttune.hw.registry import load_shipped
from kttune.probes.cpu_moe import QUICK_SHAPE
from kttune.protocol import check_crossing


def sweep_rows(profile_path: Path, sweeps: list[str]) -> tuple[list[dict], list[dict]]:
    """Per (model, path): forwards, mean |error| and mean signed error of the raw prediction; per
    crossing: measured, predicted and the check."""
    profile = load_profile(profile_path)
    points, crossings, _ = load_points(sweeps, profile)  # raw: load_points leaves the calibration out
    rows = []
    for key in sorted({(p.model, p.path) for p in points}):
        errs = [p.raw_ms / p.measured_ms - 1 for p in points if (p.model, p.path) == key]
        rows.append(
            {
                "model": key[0],
                "path": key[1],
                "forwards": len(errs),
                "abs": statistics.fmean(abs(e) for e in errs),
                "signed": statistics.fmean(errs),
            }
        )
    cross = []
    for x in crossings:
        pred = predicted_crossover(x["comp"], x["run"], TermCorrection())
        check = check_crossing(pred, x["sizes"], x.get("interval"), x["measured"])
        cross.append(
            {
                "model": x["model"],
                "measured": None if check.measured is None else round(check.measured),
                "predicted": pred,
                "error": check.error,
                "agrees": check.agrees,
            }
        )
    return rows, cross


def own_rows(profile_path: Path, probes: list[Path], gpu_from: str) -> list[dict]:
    """Per model probe: its points at MIN_TOKENS and more predicted from the quick profile."""
    base = quick_cpu_on(load_profile(profile_path), load_shipped(gpu_from))
    rows = []
    for mp in probes:
        probe = load_profile(mp)
        name, method = _model_of(mp, probe)
        errs = errors(base, probe, name, method)
        if errs:
            rows.append(
                {
                    "model": name,
                    "method": method,
                    "points": len(errs),
                    "abs": statistics.fmean(abs(e) for e in errs),
                    "signed": statistics.fmean(errs),
                }
            )
    return rows


# the top of the quick probe's default series when these calls ran (1,024 since 2026-12-07)
BASE_TOKENS = 256


def _quick_layer(curve: dict) -> bool:
    p = curve.get("params", {})
    return curve["kind"] == "cpu_moe" and (p.get("hidden"), p.get("inter")) == (QUICK_SHAPE.hidden, QUICK_SHAPE.inter)


def length_ratios(paths: list[Path]) -> tuple[int, dict[tuple[str, int], float]]:
    """The longest length the profiles timed the quick layer at, and per (method, threads) the median
    over them of t(longest) / t(BASE_TOKENS)."""
    top, got = 0, {}
    for path in paths:
        for c in json.loads(path.read_text())["curves"]:
            if _quick_layer(c):
                pts = {p["x"]: p["t_ms"] for p in c["points"]}
                top = max(top, max(pts))
                if BASE_TOKENS in pts and max(pts) > BASE_TOKENS:
                    key = (c["params"]["method"], int(c["params"]["threads"]))
                    got.setdefault(key, []).append((max(pts), pts[max(pts)] / pts[BASE_TOKENS]))
    return top, {k: statistics.median(r for x, r in v if x == top) for k, v in got.items()}


def extended(src: Path, top: int, ratios: dict[tuple[str, int], float], dst: Path) -> Path:
    """`src` with a point at `top` tokens on each quick-layer curve that stops at BASE_TOKENS:
    t(BASE_TOKENS) x the ratio for its method and thread count (the curve left as it is without one)."""
    doc = json.loads(src.read_text())
    for c in doc["curves"]:
        if not _quick_layer(c):
            continue
        key = (c["params"]["method"], int(c["params"]["threads"]))
        base = next((p for p in c["points"] if p["x"] == BASE_TOKENS), None)
        if base is None or key not in ratios or max(p["x"] for p in c["points"]) > BASE_TOKENS:
            continue
        r = ratios[key]
        point = {k: v * r for k, v in base.items() if k in ("t_ms", "t_ms_p10", "t_ms_p90")}
        c["points"].append({**base, **point, "x": top, "extra": {"estimated_from": BASE_TOKENS, "ratio": r}})
    dst.write_text(json.dumps(doc))
    return dst


def run(series: dict[str, list[Path]], sweeps: list[str], own: list[Path], gpu_from: str) -> dict:
    out = {"min_tokens": MIN_TOKENS, "series": {}}
    for label, paths in series.items():
        per = []
        for p in paths:
            entry = {"profile": str(p)}
            if sweeps:
                entry["sweeps"], entry["crossover"] = sweep_rows(p, sweeps)
            if own:
                entry["own"] = own_rows(p, own, gpu_from)
            per.append(entry)
        out["series"][label] = per
    return out


def _median_by(entries: list[list[dict]], key: tuple[str, ...], field: str) -> dict[tuple, float]:
    vals: dict[tuple, list[float]] = {}
    for rows in entries:
        for r in rows:
            if r.get(field) is not None:
                vals.setdefault(tuple(r[k] for k in key), []).append(r[field])
    return {k: statistics.median(v) for k, v in vals.items()}


def _crossing(p: dict) -> str:
    err = "n/a" if p["error"] is None else f"{100 * p['error']:.0f}%"
    return f"{p['predicted']} ({err}{', agrees' if p['agrees'] else ''})"


def markdown(doc: dict) -> str:
    labels = list(doc["series"])
    lines = ["# The quick layer's series: how far up in tokens", ""]
    for label, per in doc["series"].items():
        lines.append(f"- series `{label}`: " + ", ".join(f"`{e['profile']}`" for e in per))
    if doc.get("estimate"):
        e = doc["estimate"]
        lines.append(
            f"- series `{e['series']} + estimated {e['tokens']}` is an estimate, not a measurement: each profile of "
            f"`{e['series']}` with its quick-layer curves given a point at {e['tokens']} tokens, its time at "
            f"{BASE_TOKENS} tokens times another instance's measured ratio between the two lengths: "
            + ", ".join(f"{k} threads {v:.2f}" for k, v in sorted(e["ratios"].items()))
        )
    lines.append("")
    lines.append("Per series, the median over its profiles of each figure (error = predicted / measured - 1).")
    for part, key, unit in (("sweeps", ("model", "path"), "forwards"), ("own", ("model", "method"), "points")):
        if not all(part in e for per in doc["series"].values() for e in per):
            continue
        head = (
            "the path runner's forwards, raw cost model"
            if part == "sweeps"
            else (f"the models' own kt-kernel MoE curves at {doc['min_tokens']} tokens and more")
        )
        lines += ["", f"## {head}", ""]
        lines.append(
            f"| {' | '.join(key)} | {unit} | "
            + " | ".join(f"{lab}: mean abs | {lab}: mean signed" for lab in labels)
            + " |"
        )
        lines.append("|" + "---|" * (len(key) + 1 + 2 * len(labels)))
        med = {
            lab: (_median_by([e[part] for e in per], key, "abs"), _median_by([e[part] for e in per], key, "signed"))
            for lab, per in doc["series"].items()
        }
        first = doc["series"][labels[0]][0][part]
        for r in first:
            k = tuple(r[x] for x in key)
            cells = []
            for lab in labels:
                a, s = med[lab][0].get(k), med[lab][1].get(k)
                cells += ["n/a" if a is None else f"{100 * a:.0f}%", "n/a" if s is None else f"{100 * s:+.0f}%"]
            lines.append(f"| {' | '.join(str(x) for x in k)} | {r[unit]} | " + " | ".join(cells) + " |")
    if all("crossover" in e for per in doc["series"].values() for e in per):
        lines += ["", "## Crossover (tokens), raw: predicted (error) per profile; agrees = inside or within 20%", ""]
        lines.append("| model | measured | " + " | ".join(labels) + " |")
        lines.append("|" + "---|" * (2 + len(labels)))
        for i, x in enumerate(doc["series"][labels[0]][0]["crossover"]):
            cells = []
            for lab in labels:
                ps = [e["crossover"][i] for e in doc["series"][lab]]
                cells.append(", ".join(_crossing(p) for p in ps))
            lines.append(f"| {x['model']} | {x['measured']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="append", required=True, metavar="LABEL=P1,P2", help="a series' profiles")
    ap.add_argument("--sweeps", nargs="*", default=[], help="the path runner's results of the same instance")
    ap.add_argument("--own", nargs="*", type=Path, default=[], help="kttune probe --model X profiles of the host")
    ap.add_argument("--gpu-from", default="h200-pcie5-xeon-amx-16c", help="shipped profile lending GPU curves (--own)")
    ap.add_argument("--estimate", default="", help="a series whose profiles get an estimated longer point")
    ap.add_argument("--ratios-from", default="", help="profiles timed to the longer length (comma-separated)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    if not a.sweeps and not a.own:
        ap.error("give --sweeps or --own")
    series = {}
    for q in a.quick:
        label, _, paths = q.partition("=")
        series[label] = [Path(p) for p in paths.split(",") if p]
    with tempfile.TemporaryDirectory() as tmp:
        estimate = {}
        if a.estimate:
            if a.estimate not in series or not a.ratios_from:
                ap.error("--estimate names a --quick series and needs --ratios-from")
            top, ratios = length_ratios([Path(p) for p in a.ratios_from.split(",") if p])
            estimate = {"series": a.estimate, "tokens": top, "ratios": {f"{m} {t}": r for (m, t), r in ratios.items()}}
            series[f"{a.estimate} + estimated {top}"] = [
                extended(p, top, ratios, Path(tmp) / f"{i}.profile.json") for i, p in enumerate(series[a.estimate])
            ]
        doc = run(series, a.sweeps, a.own, a.gpu_from)
    if estimate:
        doc["estimate"] = estimate
        for entry, src in zip(doc["series"][f"{a.estimate} + estimated {estimate['tokens']}"], series[a.estimate]):
            entry["profile"] = f"{src}, its point at {estimate['tokens']} tokens estimated"
    write_result(a.out, doc, markdown(doc))


if __name__ == "__main__":
    main()
