"""Wall time of `collect_inventory()` (target: under 2 s, so `kttune search` can fingerprint the machine
on every run), cold in a fresh interpreter (imports included) and warm in-process.

    python benchmarks/bench_inventory.py [--repeats 5]

Prints JSON: the machine, cold and warm seconds (median and max over the repeats).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time

COLD = (
    "import time; t0 = time.perf_counter(); from kttune.probes.inventory import collect_inventory; "
    "collect_inventory(); print(time.perf_counter() - t0)"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    from kttune.probes.inventory import collect_inventory, machine_name

    cold = [
        float(subprocess.run([sys.executable, "-c", COLD], capture_output=True, text=True, check=True).stdout)
        for _ in range(a.repeats)
    ]
    warm = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        inv = collect_inventory()
        warm.append(time.perf_counter() - t0)
    print(
        json.dumps(
            {
                "machine": machine_name(inv),
                "host": platform.node(),
                "repeats": a.repeats,
                "cold_s": {"median": round(statistics.median(cold), 3), "max": round(max(cold), 3)},
                "warm_s": {"median": round(statistics.median(warm), 3), "max": round(max(warm), 3)},
                "target_s": 2.0,
            }
        )
    )


if __name__ == "__main__":
    main()
