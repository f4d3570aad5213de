"""How well does a thread count between two measured ones read from them?

For every kt-kernel thread count a source measured between two others, its curves are left out and
made again from the nearest measured count on each side (`kttune.hw.thread_interp`: Amdahl's law
through both, point by point), and compared with what was measured there; beside it, the nearest
count below taken as it is (what a profile without the count gave before). Sources: profiles (their
CPU MoE and stage A curves) and `benchmarks/bench_cpu_threads.py` results (kt-kernel MoE at five
counts in interleaved rounds; each point the median of its rounds).

    python benchmarks/bench_thread_interp.py --profile P.json ... --threads-run cpu-threads.json ... --out FILE.md
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

from bench_transfer import load_points
from results_layout import write_result

from kttune.hw.profile import load_profile
from kttune.hw.registry import resolve_profile
from kttune.hw.thread_interp import amdahl_between, curve_group, interpolated_curves, with_thread_count

KINDS = ("cpu_moe", "stage_a_write")


def profile_rows(name: str, profile) -> list[dict]:
    """Per kind and held-out count: (interpolated, nearest below) / measured - 1 at each point."""
    rows = []
    counts = sorted({int(c.params["threads"]) for c in profile.curves if c.kind in KINDS and c.params.get("threads")})
    for held in counts[1:-1]:
        measured = {
            curve_group(c): c for c in profile.curves if c.kind in KINDS and int(c.params.get("threads") or 0) == held
        }
        without = replace(
            profile,
            curves=tuple(
                c for c in profile.curves if not (c.kind in KINDS and int(c.params.get("threads") or 0) == held)
            ),
        )
        for c in interpolated_curves(without, held):
            m = measured.get(curve_group(c))
            if m is None:
                continue
            truth = {p.x: p.t_ms for p in m.points}
            for p in c.points:
                if p.x in truth:
                    rows.append(
                        {
                            "source": name,
                            "kind": c.kind,
                            "held_out": held,
                            "from": c.params["interpolated_from"],
                            "method": c.params.get("method"),
                            "x": p.x,
                            "interpolated": p.t_ms / truth[p.x] - 1,
                            "nearest_below": p.extra["interpolated_ms"][0] / truth[p.x] - 1,
                        }
                    )
    return rows


def threads_run_rows(name: str, doc: dict) -> list[dict]:
    """The same for a `bench_cpu_threads.py` result (each point the median of its rounds)."""
    by: dict[str, dict[int, dict[float, float]]] = {}
    for c in doc["curves"]:
        by.setdefault(c["shape"], {})[int(c["threads"])] = {
            p["x"]: statistics.median(p["samples"]) for p in c["points"]
        }
    rows = []
    for shape, per in by.items():
        counts = sorted(per)
        for i in range(1, len(counts) - 1):
            lo, held, hi = counts[i - 1], counts[i], counts[i + 1]
            for x, t in per[held].items():
                if x in per[lo] and x in per[hi]:
                    rows.append(
                        {
                            "source": name,
                            "kind": "cpu_moe",
                            "held_out": held,
                            "from": [lo, hi],
                            "method": shape,
                            "x": x,
                            "interpolated": amdahl_between(held, per[lo][x], per[hi][x], lo, hi) / t - 1,
                            "nearest_below": per[lo][x] / t - 1,
                        }
                    )
    return rows


def runner_rows(profile, held: int, runs: list[Path]) -> list[dict]:
    """The path runner's forwards at `held` threads (`runs`: `kttune paths` results), each predicted
    by the raw cost model from `profile` and from `profile` without its `held`-thread curves, read
    again from the counts around it (per model and path: mean absolute error)."""
    kinds = KINDS + ("pipeline",)
    plain = replace(profile, calibration=())
    without = replace(
        plain,
        curves=tuple(c for c in plain.curves if not (c.kind in kinds and int(c.params.get("threads") or 0) == held)),
    )
    interp, note = with_thread_count(without, held)
    if note is None:
        raise SystemExit(f"the profile has no kt-kernel counts on both sides of {held} below its cores to read it from")
    out: dict[tuple, dict] = {}
    for label, prof in (("measured", plain), ("interpolated", interp)):
        points, _, _ = load_points([str(r) for r in runs], prof)
        for pt in points:
            if pt.threads != held:
                continue
            row = out.setdefault(
                (pt.model, pt.path), {"model": pt.model, "path": pt.path, "measured": [], "interpolated": []}
            )
            row[label].append(abs(pt.raw_ms / pt.measured_ms - 1))
    return [
        {
            **r,
            "forwards": len(r["measured"]),
            "measured": statistics.mean(r["measured"]),
            "interpolated": statistics.mean(r["interpolated"]),
        }
        for r in out.values()
    ]


def summary(rows: list[dict]) -> list[dict]:
    out = []
    keys = sorted({(r["source"], r["kind"], r["held_out"], tuple(r["from"])) for r in rows})
    for source, kind, held, frm in keys:
        rs = [r for r in rows if (r["source"], r["kind"], r["held_out"], tuple(r["from"])) == (source, kind, held, frm)]
        out.append(
            {
                "source": source,
                "kind": kind,
                "held_out": held,
                "from": list(frm),
                "points": len(rs),
                "interpolated_mean": statistics.mean(abs(r["interpolated"]) for r in rs),
                "interpolated_worst": max(abs(r["interpolated"]) for r in rs),
                "nearest_below_mean": statistics.mean(abs(r["nearest_below"]) for r in rs),
                "nearest_below_worst": max(abs(r["nearest_below"]) for r in rs),
            }
        )
    return out


def runner_markdown(held: int, rows: list[dict]) -> str:
    if not rows:
        return ""
    lines = [
        "",
        f"The path runner's forwards at {held} threads, predicted (raw cost model) with the profile's {held}-thread "
        f"curves as measured and with them left out and read from the counts around {held}: mean absolute error "
        "per decoder-layer forward.",
        "",
        "| model | path | forwards | measured curves | interpolated |",
        "|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["model"], r["path"])):
        lines.append(
            f"| {r['model']} | {r['path']} | {r['forwards']} | {r['measured']:.1%} | {r['interpolated']:.1%} |"
        )
    for path in ("hybrid", "layerwise"):
        rs = [r for r in rows if r["path"] == path]
        if rs:
            n = sum(r["forwards"] for r in rs)
            m = sum(r["measured"] * r["forwards"] for r in rs) / n
            i = sum(r["interpolated"] * r["forwards"] for r in rs) / n
            lines.append(f"| **all** | {path} | {n} | {m:.1%} | {i:.1%} |")
    return "\n".join(lines) + "\n"


def markdown(summ: list[dict]) -> str:
    lines = [
        "# A thread count between two measured ones",
        "",
        "Each count measured between two others, left out and read from its nearest neighbours (Amdahl's law "
        "through both, point by point: `kttune.hw.thread_interp`) or from the nearest count below as it is; "
        "error against what was measured there, mean (worst) over the points.",
        "",
        "| source | kind | held out | from | points | interpolated | nearest below |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in summ:
        lines.append(
            f"| {s['source']} | {s['kind']} | {s['held_out']} | {s['from'][0]} and {s['from'][1]} | {s['points']} | "
            f"{s['interpolated_mean']:.1%} ({s['interpolated_worst']:.0%}) | "
            f"{s['nearest_below_mean']:.1%} ({s['nearest_below_worst']:.0%}) |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", action="append", default=[], help="a profile file or shipped name")
    ap.add_argument("--threads-run", action="append", default=[], type=Path, help="a bench_cpu_threads.py JSON")
    ap.add_argument("--runs", nargs="*", type=Path, default=[], help="kttune paths results to predict at --hold")
    ap.add_argument("--hold", type=int, default=13, help="the thread count the runner check leaves out")
    ap.add_argument("--runs-profile", default="h200-pcie5-xeon-amx-16c", help="the profile the runner check reads")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    rows = []
    for p in a.profile:
        prof = load_profile(p) if Path(p).is_file() else resolve_profile(p, None)
        rows += profile_rows(Path(p).name, prof)
    for t in a.threads_run:
        rows += threads_run_rows(t.name, json.loads(t.read_text()))
    summ = summary(rows)
    runner = runner_rows(resolve_profile(a.runs_profile, None), a.hold, a.runs) if a.runs else []
    md = markdown(summ) + runner_markdown(a.hold, runner)
    doc = {"summary": summ, "points": rows, "runner": {"held": a.hold, "profile": a.runs_profile, "rows": runner}}
    write_result(a.out, doc, md)


if __name__ == "__main__":
    main()
