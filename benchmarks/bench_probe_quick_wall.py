"""Wall time of `kttune probe --quick` as a user runs it: a fresh process (Python start, imports,
the probe, its tables), a fresh cache, repeated. Prints each run and writes them, with the machine
and the load it ran under, to a JSON file that docs/probe.md's wall-time figure is generated from
(scripts/readme_figures.py).

    python benchmarks/bench_probe_quick_wall.py --repeats 3 --out benchmarks/results/<today>-<machine>/probe-quick-wall.json

`--note` records the conditions (e.g. "shared 2-core VM, other sessions running tests").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path


def one_run(extra: list[str]) -> tuple[float, dict]:
    """One `kttune probe --quick --fresh` in a fresh process and cache; (wall s, its profile)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, KTTUNE_CACHE_DIR=str(Path(tmp) / "cache"))
        out = Path(tmp) / "profile.json"
        cmd = [sys.executable, "-m", "kttune.cli", "probe", "--quick", "--fresh", "--out", str(out), *extra]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            raise SystemExit(f"probe failed (exit {p.returncode}): {p.stderr.strip().splitlines()[-1:]}")
        return wall, json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, help="write the runs here (JSON)")
    ap.add_argument("--note", default="", help="the conditions of the runs, recorded as given")
    ap.add_argument("extra", nargs="*", help="more probe options, after --")
    args = ap.parse_args()
    runs, loads, profile = [], [], None
    for i in range(args.repeats):
        loads.append(os.getloadavg()[0])
        wall, profile = one_run(args.extra)
        runs.append(round(wall, 2))
        print(f"run {i + 1}: {wall:.1f} s (1-min load average before: {loads[-1]:.1f})", flush=True)
    cpu = profile["inventory"]["cpu"]
    doc = {
        "command": "kttune probe --quick --fresh" + "".join(f" {e}" for e in args.extra),
        "runs_s": runs,
        "median_s": statistics.median(runs),
        "min_s": min(runs),
        "max_s": max(runs),
        "machine": profile["provenance"]["machine"],
        "physical_cores": cpu.get("physical_cores"),
        "logical_cpus": cpu.get("logical_cpus"),
        "gpus": len(profile["inventory"].get("gpus") or ()),
        "load_avg_1min_before_each_run": [round(x, 2) for x in loads],
        "logical_cpus_visible": os.cpu_count(),
        "note": args.note,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
    }
    print(
        f"kttune probe --quick: median {doc['median_s']:.1f} s, {doc['min_s']:.1f}-{doc['max_s']:.1f} s over "
        f"{len(runs)} runs on {doc['machine']}"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
