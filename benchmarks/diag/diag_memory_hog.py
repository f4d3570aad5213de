"""A neighbour that disturbs the probe on purpose: streams a large array through memory (numpy copies,
which take the memory bandwidth and last-level cache kt-kernel's MoE reads its experts through) in
bursts, `--on` seconds of copying then `--off` seconds idle, until `--seconds` have passed. Run a few
of these beside `kttune probe --quick` (benchmarks/bench_quick_transfer.sh, `HOG=N`) to see what the
probe's re-timing of scattered points (docs/probe.md#disturbed-points) and its notes do on a host that
is busy part of the time, as instance d of 2026-12-04 was. Prints one JSON line: bursts, bytes
copied, GB/s while copying.

    python benchmarks/diag/diag_memory_hog.py --mib 1024 --on 0.5 --off 1.5 --seconds 120
"""

from __future__ import annotations

import argparse
import json
import signal
import time

import numpy as np


def hog(mib: int, on_s: float, off_s: float, seconds: float) -> dict:
    """Copy in bursts until `seconds` have passed or SIGTERM arrives (then report what was done)."""
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    src = np.ones(mib * 2**20 // 8)
    dst = np.empty_like(src)
    end = time.monotonic() + seconds
    bursts, copied, busy = 0, 0, 0.0
    while time.monotonic() < end and not stop["now"]:
        t0 = time.monotonic()
        while time.monotonic() - t0 < on_s:
            np.copyto(dst, src)
            copied += 2 * src.nbytes  # read and write
        busy += time.monotonic() - t0
        bursts += 1
        time.sleep(max(0.0, min(off_s, end - time.monotonic())))
    return {"bursts": bursts, "bytes": copied, "gbps_while_copying": copied / busy / 1e9 if busy else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024, help="array size (each of source and copy)")
    ap.add_argument("--on", type=float, default=0.5, help="seconds of copying per burst")
    ap.add_argument("--off", type=float, default=1.5, help="seconds idle between bursts")
    ap.add_argument("--seconds", type=float, default=120.0)
    a = ap.parse_args()
    print(json.dumps(hog(a.mib, a.on, a.off, a.seconds)))


if __name__ == "__main__":
    main()
