"""How fast each CPU of this (virtual) machine runs one thread, and how that moves, on an idle guest.

A VM's vCPUs may be hyperthreads of host cores that other guests share; the guest then sees one thread
per core and no steal time, yet a thread's speed depends on which vCPU it is on and when. Two
measurements, both a pure-Python loop pinned to one CPU at a time (the work of a host-driven loop):

- `--series SECONDS`: every CPU in turn, sweep after sweep: the share of CPUs running slow at each
  moment, how long a CPU stays slow, and the machine's mean speed per 5 s window;
- `--pairs ROUNDS`: the loop on CPU i while one other process spins on CPU j, for every pair, against
  the loop on i alone: a fixed sibling pair slows down the same way in every round.

    python benchmarks/diag/diag_vcpu_speed.py --series 75 --out series.json
    python benchmarks/diag/diag_vcpu_speed.py --pairs 3 --out pairs.json
    python benchmarks/diag/diag_vcpu_speed.py --report series.json [pairs.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path

SLOW = 1.3  # a CPU is slow in a sweep when its loop takes this many times the sweep-median fastest


def loop(n: int = 100_000) -> None:
    x = 0
    for i in range(n):
        x += i


def timed_ms(n: int = 100_000, repeats: int = 1) -> float:
    loop(2000)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        loop(n)
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def series(seconds: float) -> dict:
    cpus = sorted(os.sched_getaffinity(0))
    t0 = time.perf_counter()
    rows = []
    try:
        while time.perf_counter() - t0 < seconds:
            row = {"t": round(time.perf_counter() - t0, 3), "ms": []}
            for c in cpus:
                os.sched_setaffinity(0, {c})
                row["ms"].append(round(timed_ms(), 3))
            rows.append(row)
    finally:
        os.sched_setaffinity(0, set(cpus))
    return {"kind": "series", "cpus": cpus, "loop_iterations": 100_000, "rows": rows}


def _spinner(cpu: int, go, stop) -> None:
    os.sched_setaffinity(0, {cpu})
    while not stop.is_set():
        if go.is_set():
            loop(20_000)
        else:
            go.wait(0.05)


def pairs(rounds: int) -> dict:
    cpus = sorted(os.sched_getaffinity(0))
    stop = mp.Event()
    gos = {c: mp.Event() for c in cpus}
    procs = [mp.Process(target=_spinner, args=(c, gos[c], stop), daemon=True) for c in cpus]
    for p in procs:
        p.start()
    time.sleep(0.5)
    out = {"kind": "pairs", "cpus": cpus, "rounds": []}
    try:
        for _ in range(rounds):
            alone, slow = {}, {}
            for i in cpus:
                os.sched_setaffinity(0, {i})
                alone[i] = timed_ms(200_000, 5)
                for j in (j for j in cpus if j != i):
                    gos[j].set()
                    time.sleep(0.01)
                    slow[f"{i},{j}"] = timed_ms(200_000, 3) / alone[i]
                    gos[j].clear()
            out["rounds"].append({"alone_ms": alone, "slowdown": slow})
    finally:
        stop.set()
        for g in gos.values():
            g.set()
        for p in procs:
            p.join(1)
        os.sched_setaffinity(0, set(cpus))
    return out


def summarize_series(d: dict) -> dict:
    from kttune.probes.common import quantiles

    rows = d["rows"]
    fast = statistics.median(min(r["ms"]) for r in rows)
    slow = [[m > SLOW * fast for m in r["ms"]] for r in rows]
    share = [sum(s) / len(s) for s in slow]
    step_s = rows[-1]["t"] / max(1, len(rows) - 1)
    stay = {}
    for lag in (1, 5, 25):
        n = k = 0
        for i in range(len(rows) - lag):
            for c, was in enumerate(slow[i]):
                if was:
                    n += 1
                    k += slow[i + lag][c]
        stay[f"{lag * step_s:.2f} s"] = round(k / n, 2) if n else None
    win: dict[int, list[float]] = {}
    for r in rows:
        win.setdefault(int(r["t"] // 5), []).extend(r["ms"])
    means = [statistics.mean(v) for _, v in sorted(win.items())]
    return {
        "sweeps": len(rows),
        "seconds": rows[-1]["t"],
        "fastest_ms": round(fast, 3),
        "slow_share_p10_median_p90": [round(q, 2) for q in quantiles(share)],
        "slowest_over_fastest_median": round(statistics.median(max(r["ms"]) / min(r["ms"]) for r in rows), 2),
        "p_still_slow_after": stay,
        "base_rate": round(statistics.mean(share), 2),
        "window_5s_mean_ms": [round(m, 2) for m in means],
        "window_max_over_min": round(max(means) / min(means), 2),
        "window_cv": round(statistics.pstdev(means) / statistics.mean(means), 3),
    }


def summarize_pairs(d: dict) -> dict:
    cpus = d["cpus"]
    partners = {}
    for i in cpus:
        partners[i] = [
            max((j for j in cpus if j != i), key=lambda j, r=r, i=i: r["slowdown"][f"{i},{j}"]) for r in d["rounds"]
        ]
    stable = [i for i, ps in partners.items() if len(set(ps)) == 1]
    alone = [[float(r["alone_ms"][str(c)]) for c in cpus] for r in d["rounds"]]  # keys: JSON strings
    return {
        "rounds": len(d["rounds"]),
        "cpus_with_the_same_worst_partner_every_round": stable,
        "alone_ms_per_round_min_max": [[round(min(a), 2), round(max(a), 2)] for a in alone],
    }


def report(paths: list[str]) -> str:
    """Markdown summaries of measurement files (read back from JSON)."""
    lines = []
    for p in paths:
        d = json.loads(Path(p).read_text())
        if "rounds" in d:  # a --pairs file
            s = summarize_pairs(d)
            lines += [
                f"## {Path(p).name}: one other CPU spinning, every pair, {s['rounds']} rounds",
                "",
                "- the loop alone, per round, fastest and slowest CPU: "
                + "; ".join(f"{a:.1f}-{b:.1f} ms" for a, b in s["alone_ms_per_round_min_max"]),
                f"- CPUs whose most-slowing partner is the same in every round: "
                f"{s['cpus_with_the_same_worst_partner_every_round'] or 'none'}",
                "",
            ]
        else:
            s = summarize_series(d)
            lines += [
                f"## {Path(p).name}: every CPU in turn, {s['sweeps']} sweeps over {s['seconds']:.0f} s",
                "",
                f"- share of CPUs running the loop over {SLOW}x the fastest, per sweep (p10 / median / p90): "
                + " / ".join(f"{x:.0%}" for x in s["slow_share_p10_median_p90"]),
                f"- slowest CPU over the fastest in a sweep, median: {s['slowest_over_fastest_median']}x",
                "- a slow CPU still slow after "
                + ", ".join(f"{k}: {v:.0%}" for k, v in s["p_still_slow_after"].items())
                + f" (any CPU is slow {s['base_rate']:.0%} of the time)",
                f"- the machine's mean loop time per 5 s window: {', '.join(map(str, s['window_5s_mean_ms']))} ms "
                f"(max / min {s['window_max_over_min']}x, CV {s['window_cv']:.1%})",
                "",
            ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", type=float, help="seconds of sweeps over every CPU")
    ap.add_argument("--pairs", type=int, help="rounds over every (loop CPU, spinning CPU) pair")
    ap.add_argument("--out", help="write the measurement here (JSON)")
    ap.add_argument("--report", nargs="+", help="summarize these measurement files (Markdown on stdout)")
    a = ap.parse_args()
    if a.report:
        print(report(a.report))
        return
    d = series(a.series) if a.series else pairs(a.pairs or 2)
    text = json.dumps(d)
    if a.out:
        Path(a.out).write_text(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
