"""How well a derived profile predicts a measured one: the measured 16-core H200 box
(profiles/h200-pcie5-xeon-amx-16c.json) scaled to 32 cores by `kttune.hw.derive`, against the measured
32-core two-GPU box (profiles/h200x2-pcie5-xeon-amx-32c.json), at every CPU MoE and stage A point
both hold. Prints predicted / measured per point and writes
benchmarks/results/<today>-computed/derive-16c-to-32c.json. No timing: both profiles were measured on the GPU boxes.

`--real-shapes PROBE... --runs RUNS...`: the same derived profile (32 cores, 2 GPUs) against what the
32-core box measured at six models' own expert shapes, which neither profile's grid holds: each
`kttune probe --model X` of that box (`probe-X-x2.profile.json`: its kt-kernel MoE curve, its stage A
writes of the model's expert, sglang-kt's layerwise loop over the model's layer) and the path runner's
forced TP 1 and TP 2 forwards of the same device call (`benchmarks/bench_tp_paths.py`). The box ran
28 kt-kernel threads; the derived profile holds 27 and 29 (the measured box's 11 and 13 plus its 16
spare cores), so each prediction is the mean of the two, and both are reported. Writes
derive-16c-to-32c-real-shapes.{json,md} there.

    python benchmarks/bench_derive.py
    python benchmarks/bench_derive.py --real-shapes DIR/probe-*-x2.profile.json --runs DIR/*-tp[12]-*.json
"""

from __future__ import annotations

import json
from pathlib import Path

from kttune.hw.derive import Change, CpuTarget, derive_profile, serial_fractions
from kttune.hw.registry import load_shipped
from results_layout import COMPUTED, results_dir

SRC, DST = "h200-pcie5-xeon-amx-16c", "h200x2-pcie5-xeon-amx-32c"


def main(folder: Path | None = None) -> None:
    """The 16-core profile derived to the 32-core box's CPU against that box's measured curves, into
    `folder` (default: today's computed folder)."""
    src, dst = load_shipped(SRC), load_shipped(DST)
    cpu = dst.inventory.cpu
    derived = derive_profile(src, Change(cpu=CpuTarget(cores=cpu.physical_cores, isa=cpu.isa))).profile
    rows = []
    for kind in ("cpu_moe", "stage_a_write"):
        for c in dst.curves_of(kind):
            p = c.params
            if p["threads"] >= cpu.physical_cores:
                continue
            keys = (
                ("method", "threads", "hidden", "inter", "experts", "top_k")
                if kind == "cpu_moe"
                else ("method", "threads")
            )
            pred = {}
            for d in derived.curves_of(kind, **{k: p[k] for k in keys}):
                for q in d.points:
                    pred[(q.x, q.extra.get("hidden"), q.extra.get("inter"), q.extra.get("layer_experts"))] = q.t_ms
            for q in c.points:
                key = (q.x, q.extra.get("hidden"), q.extra.get("inter"), q.extra.get("layer_experts"))
                if key in pred:
                    rows.append(
                        {
                            "kind": kind,
                            "method": p["method"],
                            "threads": p["threads"],
                            "x": q.x,
                            "predicted_ms": pred[key],
                            "measured_ms": q.t_ms,
                            "ratio": pred[key] / q.t_ms,
                        }
                    )
    for r in rows:
        print(
            f"{r['kind']:13s} {r['method']:8s} {r['threads']:3d} threads  x {r['x']:>10g}: predicted {r['predicted_ms']:8.3f} ms, "
            f"measured {r['measured_ms']:8.3f} ms, ratio {r['ratio']:.2f}"
        )
    worst = max(max(r["ratio"], 1 / r["ratio"]) for r in rows)
    print(
        f"{len(rows)} points, worst {worst:.2f}x; serial share fitted on {SRC}, per method: cpu_moe "
        f"{serial_fractions(src)}, stage A {serial_fractions(src, 'stage_a_write')}"
    )
    out = (folder or results_dir(COMPUTED)) / "derive-16c-to-32c.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"source": SRC, "target": DST, "worst_factor": worst, "points": rows}, indent=1) + "\n")
    print(f"wrote {out}")


def _model_of(path: str) -> str:
    """The model of a `probe-MODEL-x2.profile.json` (bench_tp_paths.sh names them so)."""
    name = Path(path).name
    return name[len("probe-") : name.index("-x2.profile.json")]


def _bracket(c, threads: int) -> tuple[int, int]:
    """The derived profile's thread counts nearest below and above `threads` (one of them if it holds it)."""
    opts = c.cpu_thread_options()
    below = max((t for t in opts if t <= threads), default=min(opts))
    above = min((t for t in opts if t >= threads), default=max(opts))
    return below, above


def real_shapes(probes: list[str], runs: list[str]) -> dict:
    from dataclasses import replace

    from bench_tp_paths import predict_runs

    from kttune.config import LaunchConfig
    from kttune.cost.components import SGLANG_KT_PIPELINE, Components
    from kttune.cost.prefill import layerwise_load_ms
    from kttune.hw.profile import load_profile
    from kttune.runner.result import runs_in_results
    from kttune.spec.loader import load_model

    src = load_shipped(SRC)
    box = load_profile(probes[0])
    cpu = box.inventory.cpu
    change = Change(
        n_gpus=len(box.inventory.gpus) or None,
        cpu=CpuTarget(cores=cpu.physical_cores, isa=tuple(cpu.isa), ram_bytes=cpu.ram_total_bytes),
    )
    derived = replace(derive_profile(src, change).profile, calibration=())
    out = {"source": SRC, "target": box.provenance.machine, "cores": cpu.physical_cores, "models": [], "runs": []}
    for path in probes:
        prof = load_profile(path)
        name = _model_of(path)
        for curve in prof.curves_of("cpu_moe"):
            method, threads = curve.params["method"], int(curve.params["threads"])
            spec = load_model(name, method)
            c = Components(derived, spec, method)
            lo, hi = _bracket(c, threads)
            row = {"model": name, "method": method, "threads": threads, "derived_threads": [lo, hi], "cpu_moe": []}
            for p in curve.points:
                if p.x < 16:
                    continue  # calls of a few tokens are the fixed cost, which derive keeps as measured
                pred = [c.cpu_moe_ms(p.x, spec.num_experts, t) for t in (lo, hi)]
                row["cpu_moe"].append({"tokens": p.x, "measured_ms": p.t_ms, "derived_ms": pred})
            stage_a = [sa for sa in prof.curves_of("stage_a_write", method=method)]
            if stage_a:
                pt = max(stage_a[0].points, key=lambda q: q.x)  # the model's whole expert
                row["stage_a"] = {
                    "bytes": pt.x,
                    "measured_ms": pt.t_ms,
                    "derived_ms": [c.stage_a_ms(pt.x, t) for t in (lo, hi)],
                }
            for pipe in prof.curves_of("pipeline", method=method):
                full = [q for q in pipe.points if q.extra.get("configs")]
                if not full:
                    continue
                q = full[-1]
                sgl = q.extra["configs"].get(SGLANG_KT_PIPELINE, {})
                cfgs = [  # every expert streamed, TP 1
                    LaunchConfig(
                        method=method,
                        tp=1,
                        num_gpu_experts=0,
                        chunked_prefill_size=8192,
                        gpu_prefill_token_threshold=1,
                        max_total_tokens=8192,
                        cpuinfer_threads=t,
                    )
                    for t in (lo, hi)
                ]
                row["pipeline"] = {
                    "experts": q.extra.get("experts_streamed"),
                    "measured_ms": sgl.get("layer_ms") or q.t_ms,
                    "derived_ms": [layerwise_load_ms(c, cfg)[0] for cfg in cfgs],
                }
            out["models"].append(row)
    for f in runs:
        doc = json.loads(Path(f).read_text())
        for _, rs in runs_in_results(doc):
            k = rs[0].layers_run
            meas = {(r.forced_path, r.prompt_tokens): r.timing["measured_ms"]["median"] / k for r in rs}
            c = Components(derived, load_model(rs[0].model, rs[0].method), rs[0].method, rs[0].tp)
            lo, hi = _bracket(c, rs[0].cpuinfer)
            preds = [predict_runs([replace(r, cpuinfer=t) for r in rs], derived)[0] for t in (lo, hi)]
            errs = {}
            for (path, size), m in meas.items():
                if all((path, size) in p for p in preds):
                    mean = sum(p[(path, size)] for p in preds) / 2
                    errs.setdefault(path, []).append(mean / m - 1)
            out["runs"].append(
                {
                    "file": f,
                    "model": rs[0].model,
                    "method": rs[0].method,
                    "tp": rs[0].tp,
                    "threads": rs[0].cpuinfer,
                    "derived_threads": [lo, hi],
                    "signed_error": {p: sum(v) / len(v) for p, v in errs.items()},
                    "abs_error": {p: sum(abs(e) for e in v) / len(v) for p, v in errs.items()},
                }
            )
    return out


def _ratio_range(rows: list[dict], key: str = "derived_ms") -> str:
    rs = [sum(r[key]) / 2 / r["measured_ms"] for r in rows]
    return f"{min(rs):.2f}-{max(rs):.2f}" if rs else "-"


def real_shapes_markdown(a: dict) -> str:
    lines = [
        f"# `profile derive` at real expert shapes: {a['source']} derived to {a['cores']} cores and 2 GPUs, "
        f"against the measured {a['target']}",
        "",
        "Each cell: derived / measured, the derived time the mean of the two derived thread counts that "
        "bracket the box's (in brackets); kt-kernel MoE over every size from 16 tokens. Stage A: one "
        "write of the model's whole expert. Layerwise loop: sglang-kt's (2 slots, one expert a step), "
        "every expert of the layer streamed, TP 1, measured by the probe's pipeline on the box and "
        "composed from the derived stages (the derived profile drops the measured loop when the CPU "
        "changes and carries its overlap ratio).",
        "",
        "| model | method | threads (derived) | kt-kernel MoE | stage A | layerwise loop |",
        "|---|---|---|---|---|---|",
    ]
    for m in a["models"]:
        one = [m.get("stage_a"), m.get("pipeline")]
        cells = [f"{sum(r['derived_ms']) / 2 / r['measured_ms']:.2f}" if r else "-" for r in one]
        lines.append(
            f"| {m['model']} | {m['method']} | {m['threads']} ({m['derived_threads'][0]}, {m['derived_threads'][1]}) "
            f"| {_ratio_range(m['cpu_moe'])} | {cells[0]} | {cells[1]} |"
        )
    lines += [
        "",
        "The path runner's forced forwards on the same box, per decoder layer, from the derived profile: mean "
        "absolute error (signed mean, + = predicted slower).",
        "",
        "| run | model | TP | hybrid | layerwise |",
        "|---|---|---|---|---|",
    ]
    for r in a["runs"]:
        cells = [
            f"{r['abs_error'][p]:.0%} ({r['signed_error'][p]:+.0%})" if p in r["abs_error"] else "-"
            for p in ("hybrid", "layerwise")
        ]
        lines.append(f"| {Path(r['file']).name} | {r['model']} | {r['tp']} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--real-shapes", nargs="*", default=None, metavar="PROBE")
    ap.add_argument("--runs", nargs="*", default=[])
    ap.add_argument("--out", type=Path, default=None, help="folder for the results (default: today's computed folder)")
    args = ap.parse_args()
    if args.real_shapes:
        result = real_shapes(args.real_shapes, args.runs)
        md = real_shapes_markdown(result)
        base = (args.out or results_dir(COMPUTED)) / "derive-16c-to-32c-real-shapes"
        base.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
        base.with_suffix(".md").write_text(md)
        print(md)
        print(f"wrote {base}.json and .md")
    else:
        main(args.out)
