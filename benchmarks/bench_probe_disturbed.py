"""Does the probe see through a host that is busy part of the time?

`run`: pairs of CPU-only quick probes (`kttune probe --quick --cpu-only`), one on a quiet host, then
one beside neighbours that stream memory in bursts (`benchmarks/diag/diag_memory_hog.py`: `--hogs`
processes, `--on` seconds of copying then `--off` idle), written as `quiet-N.profile.json` and
`hog-N.profile.json` in `--out`, with each probe's wall time and the neighbours' figures in
`run.json`.

`analyse`: every kt-kernel MoE point of those profiles against the median of the same point over
every quiet profile given (all folders): how many points read more than `OFF` x that, the worst
ratio, and how many points the probe's notes say are disturbed (`kttune.probes.common.disturbed`).
Folders are labelled (LABEL=DIR/ or LABEL=DIR/PREFIX-, for files named PREFIX-quiet-N.profile.json),
e.g. the same runs under two versions of the probe.

    python benchmarks/bench_probe_disturbed.py run --out DIR [--pairs 3] [--methods BF16,RAWINT4] [--threads 1]
    python benchmarks/bench_probe_disturbed.py analyse before=DIR1 after=DIR2 --out FILE.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from results_layout import write_result

from kttune.hw.point_quality import disturbed
from kttune.hw.profile import load_profile

HOG = Path(__file__).resolve().parent / "diag" / "diag_memory_hog.py"
# a point this many times its quiet median was read disturbed by the neighbours
OFF = 1.3


def _probe(out: Path, methods: str, threads: str) -> float:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "kttune.cli", "probe", "--quick", "--cpu-only", "--skip-host-ram", "--fresh"]
    cmd += ["--methods", methods, "--threads", threads, "--out", str(out)]
    with open(out.with_suffix(".log"), "w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - t0


def run(a: argparse.Namespace) -> dict:
    a.out.mkdir(parents=True, exist_ok=True)
    doc: dict = {"methods": a.methods, "threads": a.threads, "hogs": a.hogs, "on_s": a.on, "off_s": a.off, "pairs": []}
    for i in range(1, a.pairs + 1):
        quiet_s = _probe(a.out / f"quiet-{i}.profile.json", a.methods, a.threads)
        hog_cmd = [sys.executable, str(HOG), "--mib", str(a.mib), "--on", str(a.on), "--off", str(a.off)]
        hogs = [
            subprocess.Popen(hog_cmd + ["--seconds", str(a.hog_seconds)], stdout=subprocess.PIPE, text=True)
            for _ in range(a.hogs)
        ]
        busy_s = _probe(a.out / f"hog-{i}.profile.json", a.methods, a.threads)
        stats = [json.loads(h.communicate()[0]) for h in hogs]
        doc["pairs"].append({"quiet_s": quiet_s, "busy_s": busy_s, "neighbours": stats})
        print(f"pair {i}: quiet probe {quiet_s:.1f} s, busy {busy_s:.1f} s", flush=True)
        time.sleep(a.rest)
    (a.out / "run.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def _points(path: Path) -> dict:
    prof = load_profile(path)
    return {(c.params["method"], int(c.params["threads"]), p.x): p for c in prof.curves_of("cpu_moe") for p in c.points}


def _files(prefix: str, pattern: str) -> list[Path]:
    """The files `prefix` + `pattern` (a folder with a trailing / or a file name's start)."""
    base = Path(prefix)
    if prefix.endswith("/") or base.is_dir():
        return sorted(base.glob(pattern))
    return sorted(base.parent.glob(base.name + pattern))


def analyse(folders: list[tuple[str, str]]) -> dict:
    per_folder = {label: [_points(f) for f in _files(d, "quiet-*.profile.json")] for label, d in folders}
    quiet = [q for qs in per_folder.values() for q in qs]
    keys = set.intersection(*(set(q) for q in quiet))
    ref = {k: statistics.median(q[k].t_ms for q in quiet) for k in keys}
    rows = []
    for label, d in folders:
        for f in _files(d, "*-*.profile.json"):
            pts = _points(f)
            ratio = {k: pts[k].t_ms / ref[k] for k in keys if k in pts}
            rows.append(
                {
                    "folder": label,
                    "profile": f.name,
                    "busy": "hog-" in f.name,
                    "points": len(ratio),
                    "off": sorted(
                        [f"{k[0]} {k[1]}t {k[2]:g}", round(r, 2), disturbed(pts[k])]
                        for k, r in ratio.items()
                        if r > OFF
                    ),
                    "worst": max(ratio.values()),
                    "noted": sum(1 for k in ratio if disturbed(pts[k])),
                    "timed_again": sum(1 for k in ratio if "timings" in pts[k].extra or "remeasured" in pts[k].extra),
                }
            )
    # does a rule read a quiet host differently? each folder's quiet medians against the first folder's
    first = folders[0][0]
    quiet_ratio = {}
    for label, qs in per_folder.items():
        if label == first or not qs or not per_folder[first]:
            continue
        ratios = [
            statistics.median(q[k].t_ms for q in qs) / statistics.median(q[k].t_ms for q in per_folder[first])
            for k in keys
        ]
        quiet_ratio[label] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    return {
        "reference": "median of every quiet profile's point",
        "off_limit": OFF,
        "rows": rows,
        "quiet_against_first_folder": quiet_ratio,
    }


def markdown(doc: dict, runs: dict[str, dict]) -> str:
    lines = [
        "# The probe beside a neighbour that is busy part of the time",
        "",
        f"Each kt-kernel MoE point against the median of the same point over every quiet profile; `off`: "
        f"points over {doc['off_limit']:g}x it; `noted`: points the probe itself calls disturbed "
        "(`kttune.probes.common.disturbed`); `timed again`: points with a repeat timing.",
        "",
        "| folder | profile | host | points | off | worst | noted | timed again |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        off = ", ".join(f"{k} {v:.2f}x" + (" (noted)" if noted else "") for k, v, noted in r["off"]) or "none"
        lines.append(
            f"| {r['folder']} | {r['profile']} | {'busy' if r['busy'] else 'quiet'} | {r['points']} | {off} | "
            f"{r['worst']:.2f}x | {r['noted']} | {r['timed_again']} |"
        )
    lines += ["", "| folder | host | probes | points off | of which no note names | wall time, s |"]
    lines += ["|---|---|---|---|---|---|"]
    for label, run_doc in runs.items():
        for busy in (False, True):
            rs = [r for r in doc["rows"] if r["folder"] == label and r["busy"] == busy]
            silent = sum(1 for r in rs for _, _, noted in r["off"] if not noted)
            walls = [p["busy_s" if busy else "quiet_s"] for p in run_doc.get("pairs", [])]
            wall = f"{min(walls):.1f}-{max(walls):.1f}" if walls else "n/a"
            lines.append(
                f"| {label} | {'busy' if busy else 'quiet'} | {len(rs)} | {sum(len(r['off']) for r in rs)} | "
                f"{silent} | {wall} |"
            )
    for label, r in doc.get("quiet_against_first_folder", {}).items():
        first = doc["rows"][0]["folder"] if doc["rows"] else "the first folder"
        lines.append(
            f"\nQuiet probes, {label} against {first} (per point, the median over each folder's quiet probes): "
            f"median ratio {r['median']:.3f}, range {r['min']:.3f}-{r['max']:.3f}."
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--pairs", type=int, default=3)
    r.add_argument("--methods", default="BF16,RAWINT4")
    r.add_argument("--threads", default="1")
    r.add_argument("--hogs", type=int, default=1)
    r.add_argument("--mib", type=int, default=512)
    r.add_argument("--on", type=float, default=0.2)
    r.add_argument("--off", type=float, default=0.4)
    r.add_argument(
        "--hog-seconds", type=float, default=14.0, help="how long the neighbours run (the busy probe's length)"
    )
    r.add_argument("--rest", type=float, default=10.0, help="seconds between pairs")
    an = sub.add_parser("analyse")
    an.add_argument("folders", nargs="+", metavar="LABEL=DIR")
    an.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    if a.cmd == "run":
        run(a)
        return
    folders = [(s.split("=", 1)[0], s.split("=", 1)[1]) for s in a.folders]
    doc = analyse(folders)
    runs = {label: json.loads(f[0].read_text()) if (f := _files(d, "run.json")) else {} for label, d in folders}
    doc["runs"] = runs
    md = markdown(doc, runs)
    write_result(a.out, doc, md)


if __name__ == "__main__":
    main()
