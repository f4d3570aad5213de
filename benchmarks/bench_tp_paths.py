"""Both prefill paths at tensor parallelism, on real GPUs, against the cost model at that TP size.

`measure` runs the path runner at each TP size in turn (`kttune.runner.tp`: one process per GPU over
NCCL; over gloo on CPU ranks where the box has fewer GPUs, the CPU variant), each size's job in its own
processes: K layers of the model at full shape, every sweep size forced onto each path as one forward
(chunk = size), one untimed warm-up of each, then `--rounds` interleaved rounds in a shuffled order.
Per (TP, size, path) the K-layer time's median and interval (kttune.protocol). Sizes alternate with TP
(`--tp 2,1,2,1`), so a drift of the box between processes shows as two runs of one TP size apart.
Writes one `kttune.paths/1` results file per job (request + runs with `timing`, the record nearest the
median): `bench_same_machine.py RUNS:PROBE` reads them like `kttune paths` output.

`analyse` predicts each job's forwards with the cost model (a profile: the same-instance probe, or
the shipped one) at the job's TP size, and sets the TP sizes side by side: per path and size, the
measured time at each TP size with its interval, the measured TP ratio (paired by size, unpaired
across processes) and the predicted one; the crossover per TP size, measured [interval] and predicted.

    python benchmarks/bench_tp_paths.py measure --model qwen3-30b-a3b --method BF16 --tp 2,1,2,1 \\
        --gpu-experts 16 --cpuinfer 28 --sizes 512,1024,2048,4096,8192 --rounds 5 --out DIR
    python benchmarks/bench_tp_paths.py analyse RUNS.json [...] --profile P [--profile Q] [--out DIR --tag TAG]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path


def _sizes(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


# ---- measure ------------------------------------------------------------------------------------------


def measure_job(
    model: str,
    method: str,
    tp: int,
    opts_kw: dict,
    sizes: list[int],
    rounds: int,
    seed: int,
    backend: str = "",
    small: bool = False,
    timeout_s: float = 900.0,
) -> dict:
    """One TP size's job (kttune.runner.tp.sweep_tp) as a `kttune.paths/1` results dict."""
    from kttune.runner.stack import StackOptions
    from kttune.runner.tp import TpJob, sweep_tp

    opts = StackOptions(max_tokens=max(sizes), cpu_max_tokens=max(sizes), **opts_kw)
    t0 = time.perf_counter()
    runs = sweep_tp(
        TpJob(model, method, tp, opts, (), small=small, backend=backend), tuple(sizes), rounds, seed, timeout_s
    )
    wall = time.perf_counter() - t0
    request = {
        "model": model,
        "method": method,
        "tp": tp,
        "layers": opts.layers,
        "gpu_experts": [opts.gpu_experts],
        "chunks": list(sizes),
        "prompts": list(sizes),
        "sweep": list(sizes),
        "cpuinfer": opts.cpuinfer,
        "small": small,
        "repeats": rounds,
        "seed": seed,
        "backend": backend or "nccl where the box has the GPUs, else gloo",
    }
    return {
        "schema": "kttune.paths/1",
        "request": request,
        "runs": [r.to_dict() for r in runs],
        "wall_s": round(wall, 1),
    }


def cmd_measure(a) -> None:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    seen: dict[int, int] = {}
    kw = dict(layers=a.layers, gpu_experts=a.gpu_experts, cpuinfer=a.cpuinfer)
    for tp in _sizes(a.tp):
        seen[tp] = seen.get(tp, 0) + 1
        name = out / f"{a.tag or a.model}-tp{tp}-{seen[tp]}.json"
        print(f"TP {tp} (job {seen[tp]}): {a.model} {a.method} sizes {a.sizes}, {a.rounds} rounds", flush=True)
        try:
            res = measure_job(
                a.model, a.method, tp, kw, _sizes(a.sizes), a.rounds, a.seed + seen[tp], a.backend, a.small, a.timeout
            )
        except RuntimeError as e:  # a rank failed: say so, keep the other jobs
            print(f"  TP {tp} failed: {e}", flush=True)
            continue
        name.write_text(json.dumps(res, indent=1))
        for r in res["runs"]:
            e = r["timing"]["measured_ms"]
            print(
                f"  {r['forced_path']:9s} {r['prompt_tokens']:6d}: {e['median']:8.2f} ms [{e['low']:.2f}-{e['high']:.2f}]",
                flush=True,
            )
        print(f"  wrote {name} ({res['wall_s']} s)", flush=True)


# ---- analyse ------------------------------------------------------------------------------------------


def predict_runs(runs, profile):
    """{(path, size): predicted ms per decoder layer}, the predicted crossover and the cost model's
    notes, for one job's runs under `profile` (its calibration left out) at the job's TP size."""
    from kttune.calibration.runner import forward_points, predicted_crossover
    from kttune.cost.components import FASTEST_PIPELINE, Components
    from kttune.spec.loader import load_model

    raw = replace(profile, calibration=())
    spec = load_model(runs[0].model, runs[0].method)
    c = Components(raw, spec, runs[0].method, runs[0].tp, pipeline_driver=runs[0].pipeline_driver or FASTEST_PIPELINE)
    pred = {}
    for r in runs:
        for p in forward_points(r, c):
            pred[(r.forced_path, r.prompt_tokens)] = p.predicted_ms
    return pred, predicted_crossover(c, runs[0]), list(c.notes)


def analyse(files: list[str], profiles: dict) -> dict:
    from kttune.errors import UserError
    from kttune.protocol import Estimate, compare
    from kttune.runner.api import crossover_interval
    from kttune.runner.result import runs_in_results

    jobs = []
    for f in files:
        d = json.loads(Path(f).read_text())
        for req, runs in runs_in_results(d):
            jobs.append({"file": f, "req": req, "runs": runs, "tp": runs[0].tp})
    out = {"jobs": [], "ratios": []}
    by_tp: dict[int, list] = {}
    for j in jobs:
        runs = j["runs"]
        k = runs[0].layers_run
        meas = {(r.forced_path, r.prompt_tokens): Estimate.from_dict(r.timing["measured_ms"]) for r in runs}
        cross = crossover_interval(runs)
        row = {
            "file": j["file"],
            "model": runs[0].model,
            "method": runs[0].method,
            "tp": j["tp"],
            "gpu_experts": runs[0].gpu_experts,
            "cpuinfer": runs[0].cpuinfer,
            "backends": runs[0].backends,
            # per decoder layer: the runner's K-layer time / K
            "measured": {f"{p} {m}": [e.median / k, e.low / k, e.high / k] for (p, m), e in sorted(meas.items())},
            "crossover": None if cross is None else cross.to_dict(),
            "predicted": {},
        }
        for label, prof in profiles.items():
            try:
                pred, px, notes = predict_runs(runs, prof)
            except UserError as e:  # the profile lacks what this job needs (a thread count): say so
                pred, px, notes = {}, None, [f"not predicted: {e}"]
            errs = {
                path: [
                    abs(pred[(p, m)] - e.median / k) / (e.median / k)
                    for (p, m), e in meas.items()
                    if p == path and (p, m) in pred
                ]
                for path in ("hybrid", "layerwise")
            }
            row["predicted"][label] = {
                "per_layer": {f"{p} {m}": v for (p, m), v in sorted(pred.items())},
                "mape": {p: (statistics.mean(v) if v else None) for p, v in errs.items()},
                "crossover": px,
                "notes": [n for n in notes if "not measured" in n or "borrow" in n or "not predicted" in n],
            }
        out["jobs"].append(row)
        by_tp.setdefault(j["tp"], []).append((row, meas, k))
    # TP ratios: every job of the larger TP size against every job of TP 1 (processes apart: unpaired)
    if 1 in by_tp:
        for tp, rows in sorted(by_tp.items()):
            if tp == 1:
                continue
            for row, meas, k in rows:
                for base, bmeas, _ in by_tp[1]:
                    for key in sorted(set(meas) & set(bmeas)):
                        cmp = compare(bmeas[key], meas[key])
                        name = f"{key[0]} {key[1]}"
                        pred = {
                            label: row["predicted"][label]["per_layer"][name]
                            / base["predicted"][label]["per_layer"][name]
                            for label in row["predicted"]
                            if name in row["predicted"][label]["per_layer"]
                            and name in base["predicted"][label]["per_layer"]
                        }
                        out["ratios"].append(
                            {
                                "tp": tp,
                                "path": key[0],
                                "size": key[1],
                                "tp_file": row["file"],
                                "tp1_file": base["file"],
                                "measured": [cmp.ratio, cmp.low, cmp.high],
                                "predicted": pred,
                            }
                        )
    return out


def markdown(a: dict, labels: list[str]) -> str:
    lines = [
        "# Both prefill paths at TP 1 and TP 2 on real GPUs, against the cost model",
        "",
        "Per decoder layer (the runner's K-layer time / K), median [interval] over interleaved rounds in one process "
        "per job; each prediction from a profile with its calibration left out.",
        "",
    ]
    for j in a["jobs"]:
        lines += [
            f"## {j['model']} {j['method']} TP {j['tp']} ({Path(j['file']).name}), {j['gpu_experts']} GPU experts, "
            f"{j['cpuinfer']} kt-kernel threads",
            "",
            "| path, tokens | measured ms | " + " | ".join(f"predicted ({lab})" for lab in labels) + " |",
            "|---|---|" + "---|" * len(labels),
        ]
        for key, (m, lo, hi) in j["measured"].items():
            cells = []
            for lab in labels:
                p = j["predicted"][lab]["per_layer"].get(key)
                cells.append("n/a" if p is None else f"{p:.2f} ({(p - m) / m:+.0%})")
            lines.append(f"| {key} | {m:.2f} [{lo:.2f}-{hi:.2f}] | " + " | ".join(cells) + " |")
        c = j["crossover"]
        sizes = sorted({int(k.split()[1]) for k in j["measured"]})
        if not c:
            meas = "not measured"
        elif c["x"] is not None:
            meas = f"{c['x']:.0f} [{c['low']:.0f}-{c['high']:.0f}]"
        elif c["side"] == "below":
            meas = f"below {sizes[0]} (layerwise faster at every size)"
        else:
            meas = f"above {sizes[-1]} (hybrid faster at every size)"
        lines += [
            "",
            "Mean error: "
            + "; ".join(
                f"{lab}: hybrid {_pct(j['predicted'][lab]['mape']['hybrid'])}, layerwise {_pct(j['predicted'][lab]['mape']['layerwise'])}"
                for lab in labels
            ),
            f"Crossover: measured {meas}; predicted "
            + ", ".join(f"{lab} {j['predicted'][lab]['crossover']}" for lab in labels),
            "",
        ]
    if a["ratios"]:
        lines += [
            "## TP 2 / TP 1, per path and size",
            "",
            "Measured: the ratio of the two jobs' medians with its interval (unpaired: separate processes). "
            "Predicted: the ratio of the two predictions.",
            "",
            "| path, tokens | TP 2 job / TP 1 job | measured | "
            + " | ".join(f"predicted ({lab})" for lab in labels)
            + " |",
            "|---|---|---|" + "---|" * len(labels),
        ]
        for r in a["ratios"]:
            m = r["measured"]
            lines.append(
                f"| {r['path']} {r['size']} | {Path(r['tp_file']).stem} / {Path(r['tp1_file']).stem} | "
                f"{m[0]:.2f} [{m[1]:.2f}-{m[2]:.2f}] | "
                + " | ".join(f"{r['predicted'].get(lab, float('nan')):.2f}" for lab in labels)
                + " |"
            )
    return "\n".join(lines) + "\n"


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def cmd_analyse(a) -> None:
    from kttune.hw.profile import load_profile
    from kttune.hw.registry import resolve_profile

    profiles = {}
    for p in a.profile:
        label, _, path = p.rpartition("=")
        prof = load_profile(path) if Path(path).exists() else resolve_profile(path, None)
        profiles[label or Path(path).stem] = prof
    res = analyse(a.files, profiles)
    md = markdown(res, list(profiles))
    print(md)
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        tag = a.tag or "tp-paths"
        (out / f"{tag}.json").write_text(json.dumps(res, indent=1))
        (out / f"{tag}.md").write_text(md)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--model", required=True)
    m.add_argument("--method", required=True)
    m.add_argument("--tp", default="2,1,2,1", help="TP sizes, one job each, in this order")
    m.add_argument("--gpu-experts", type=int, default=0)
    m.add_argument("--cpuinfer", type=int, default=0)
    m.add_argument("--layers", type=int, default=2)
    m.add_argument("--sizes", default="512,1024,2048,4096")
    m.add_argument("--rounds", type=int, default=5)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--backend", default="", help="nccl or gloo (default: nccl where the box has the GPUs)")
    m.add_argument("--small", action="store_true", help="the model at small shapes (the CPU variant)")
    m.add_argument("--timeout", type=float, default=900.0)
    m.add_argument("--tag", default="")
    m.add_argument("--out", required=True)
    an = sub.add_parser("analyse")
    an.add_argument("files", nargs="+")
    an.add_argument("--profile", action="append", required=True, help="LABEL=FILE or a shipped profile name")
    an.add_argument("--out", default="")
    an.add_argument("--tag", default="")
    a = ap.parse_args(argv)
    {"measure": cmd_measure, "analyse": cmd_analyse}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
