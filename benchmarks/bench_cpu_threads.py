"""How kt-kernel's MoE time scales with its thread count, on one machine, in one process, measured in
interleaved rounds: the law `profile derive` carries a profile's CPU curves to another core count with
(docs/derive.md, `cpu_threads`: a serial share fitted on the profile's thread sweep stays, the rest
scales with the threads).

The shipped H200 profile's serial shares (FP8 0.22, RAWINT4 0.14, AMXINT4 0.25, BF16 0.00) were fitted
on curves at 11, 13 and 15 threads of one 16-core box, taken in different device runs; a derived
32-core profile from them ran DeepSeek-V3's FP8 and Kimi-K2's RAWINT4 experts 1.5-2.5x slower than
the measured 32-core box did (`bench_derive.py --real-shapes`). Here every (shape, thread count)
layer is built once and all are timed in shuffled rounds, so the host's drift falls on every thread
count alike, over a wider sweep (a quarter of the cores up to cores - 1).

`--measure` writes cpu-threads.json to --out (on the GPU box); `--analyse FILE` writes
cpu-threads.md beside it: per shape and size, the median over rounds with its 10th-90th
percentiles at each thread count, the speedup over the fewest threads, and the serial share fitted
(as `kttune.hw.derive._fit_serial` fits it: least squares in log time against the largest count)
on the whole sweep, without the largest count, and on the three counts the shipped profile has.

    python benchmarks/bench_cpu_threads.py --measure --out DIR [--threads 4,7,11,13,15] [--rounds 5]
    python benchmarks/bench_cpu_threads.py --analyse DIR/cpu-threads.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

# (method, hidden, inter, experts, top_k, sizes): Qwen3-30B-A3B's layer, and DeepSeek-V3's / Kimi-K2's
# expert shape with 64 experts (the thread scaling of a call is the pool's over that call's work; 64
# experts keep five copies of each layer in RAM and a 4-thread call under 3 s)
SHAPES = (
    ("BF16", 2048, 768, 128, 8, (64, 256, 1024)),
    ("FP8", 7168, 2048, 64, 8, (32, 128, 512)),
    ("RAWINT4", 7168, 2048, 64, 8, (32, 128, 512)),
)


# a smoke run on a development machine (`--small`): the same code on shapes that build in seconds
SMALL_SHAPES = (("BF16", 512, 256, 16, 4, (16, 64)), ("FP8", 512, 256, 16, 4, (16, 64)))


def _key(s) -> str:
    return f"{s[0]} {s[1]}x{s[2]} E{s[3]} k{s[4]}"


def measure(out: Path, threads: list[int], rounds: int, shapes=SHAPES) -> None:
    import random

    from kttune.kernels.expert_weights import HostExperts
    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.kernels.kt_moe import KtMoeLayer
    from kttune.probes.cpu_moe import _inputs
    from kttune.probes.inventory import host_line
    from kttune.spec.moe_shape import MoeLayerShape

    t0 = time.perf_counter()
    layers, inputs = {}, {}
    for s in shapes:
        method, h, i, e, k, sizes = s
        host = HostExperts.random(method, h, i, e)
        shape = MoeLayerShape(h, i, e, k, method)
        inputs[_key(s)] = {n: _inputs(n, shape, 0) for n in sizes}
        for t in threads:
            with quiet_stdout(to_stderr=True):
                layers[(_key(s), t)] = KtMoeLayer(host, top_k=k, threads=t, max_tokens=max(sizes))
        print(f"[{time.perf_counter() - t0:6.1f}s] built {_key(s)} at {threads} threads", flush=True)
    sizes_of = {_key(s): s[5] for s in shapes}
    samples = {key: {n: [] for n in sizes_of[key[0]]} for key in layers}
    rng = random.Random(0)
    for r in range(rounds):
        order = list(layers)
        rng.shuffle(order)
        for key in order:
            lay = layers[key]
            for n in sizes_of[key[0]]:
                x, ids, w, o = inputs[key[0]][n]
                lay.forward(x, ids, w, o)  # warm-up: this pool and layer after another's
                a = time.perf_counter()
                lay.forward(x, ids, w, o)
                samples[key][n].append((time.perf_counter() - a) * 1e3)
        print(f"[{time.perf_counter() - t0:6.1f}s] round {r + 1}/{rounds}", flush=True)
    doc = {
        "host": host_line(),
        "threads": threads,
        "rounds": rounds,
        "protocol": f"interleaved: every (shape, threads) layer built once; {rounds} rounds, layers shuffled per "
        "round, each size one warm-up call then one timed call",
        "curves": [
            {
                "shape": key[0],
                "threads": key[1],
                "kernel": layers[key].kernel_class,
                "points": [{"x": n, "samples": xs} for n, xs in per.items()],
            }
            for key, per in samples.items()
        ],
    }
    for lay in layers.values():
        lay.close()
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu-threads.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out / 'cpu-threads.json'} ({time.perf_counter() - t0:.0f} s)")


def fit_serial(points: list[tuple[int, float]]) -> float:
    """The serial share of `points` ((threads, ms)) against their largest count, as `profile derive`
    fits a profile's sweep (`kttune.hw.derive.fit_serial_share`)."""
    from kttune.hw.derive import fit_serial_share

    ref_t, ref = max(points)
    return fit_serial_share([(th, t, ref) for th, t in points if th != ref_t], ref_t)


def summarise(doc: dict) -> list[dict]:
    """Per shape and size: the median and 10th-90th percentiles at each thread count, and serial
    shares fitted on subsets of the sweep."""
    from kttune.probes.common import quantiles

    by = {}
    for c in doc["curves"]:
        for p in c["points"]:
            by.setdefault((c["shape"], p["x"]), {})[c["threads"]] = quantiles(p["samples"])
    rows = []
    threads = sorted(doc["threads"])
    shipped = [t for t in (11, 13, 15) if t in threads]
    for (shape, n), per in sorted(by.items()):
        med = [(t, per[t][1]) for t in threads if t in per]
        rows.append(
            {
                "shape": shape,
                "tokens": n,
                "ms": {t: per[t] for t in threads if t in per},
                "speedup": {t: med[0][1] / m for t, m in med},
                "serial_all": fit_serial(med),
                "serial_below_top": fit_serial(med[:-1]) if len(med) > 2 else None,
                "serial_shipped_counts": fit_serial([(t, m) for t, m in med if t in shipped])
                if len(shipped) > 1
                else None,
            }
        )
    return rows


def analyse(path: Path) -> str:
    doc = json.loads(path.read_text())
    rows = summarise(doc)
    threads = sorted(doc["threads"])
    lines = [
        "# kt-kernel's MoE time against its thread count",
        "",
        f"Host: {doc['host']}; {doc['protocol']}. Each cell: the median over {doc['rounds']} rounds "
        "[10th-90th percentile], ms per call. Serial share: `t(n) = t(ref) (s + (1 - s) ref / n)` fitted "
        "in log time, ref = the largest count of the subset (as `kttune profile derive` fits a profile's sweep).",
        "",
        "| shape | tokens | " + " | ".join(f"{t} threads" for t in threads) + " | speedup "
        f"{threads[0]} -> {threads[-1]} (ideal {threads[-1] / threads[0]:.2f}) | serial share: all | "
        f"without {threads[-1]} | 11, 13, 15 only |",
        "|---|---|" + "---|" * len(threads) + "---|---|---|---|",
    ]
    for r in rows:
        cells = [
            f"{r['ms'][t][1]:.1f} [{r['ms'][t][0]:.1f}-{r['ms'][t][2]:.1f}]" if t in r["ms"] else "-" for t in threads
        ]
        sb = r["serial_below_top"]
        ss = r["serial_shipped_counts"]
        lines.append(
            f"| {r['shape']} | {r['tokens']} | "
            + " | ".join(cells)
            + f" | {r['speedup'][threads[-1]]:.2f} | {r['serial_all']:.2f} | "
            + (f"{sb:.2f}" if sb is not None else "-")
            + " | "
            + (f"{ss:.2f}" if ss is not None else "-")
            + " |"
        )
    md = "\n".join(lines) + "\n"
    path.with_suffix(".md").write_text(md)
    path.with_suffix(".summary.json").write_text(json.dumps(rows, indent=1) + "\n")
    return md


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--out", default=".")
    ap.add_argument("--threads", default="4,7,11,13,15")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--analyse", default=None)
    ap.add_argument("--small", action="store_true", help="small shapes: a smoke run on a development machine")
    a = ap.parse_args()
    if a.measure:
        measure(Path(a.out), [int(t) for t in a.threads.split(",")], a.rounds, SMALL_SHAPES if a.small else SHAPES)
    if a.analyse:
        print(analyse(Path(a.analyse)))


if __name__ == "__main__":
    main()
