"""Memory across configurations: one runner session (kttune.runner.session, in a worker
process as the measured search and `kttune tune` run it) measures N configurations one after the
other, drawn over GPU experts, chunk, threshold and kt-kernel threads; after each, the worker's
resident memory at rest (its configuration's resident experts and layerwise slot released, glibc's
free pages returned), torch's allocated and reserved device bytes and the device's used bytes are
recorded, with the run's own device peak. The claim (issue 21): every figure stays within 2 GiB of
the first configuration's, and has no per-configuration trend (Theil-Sen slope, kttune.protocol.trend).

    python benchmarks/bench_runner_memory.py --out benchmarks/results/<today>-<machine>/ \
        --models glm-4.5-air:BF16,kimi-k2-thinking:RAWINT4 --configs 50          # the GPU box
    python benchmarks/bench_runner_memory.py --small --configs 12 --out /tmp/mem  # anywhere (CPU variant)

Writes runner-memory.json and .md to --out.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GIB = 2**30
LIMIT_BYTES = 2 * GIB


def draw_configs(count: int, experts_max: int, chunks, thresholds, threads, seed: int = 0) -> list:
    """`count` configurations drawn over the four flags (seeded), each GPU-expert count in 0..max."""
    from kttune.runner.session import RunnerConfig

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        c = rng.choice(chunks)
        out.append(
            RunnerConfig(
                rng.randint(0, experts_max),
                c,
                rng.choice([t for t in thresholds if t <= c] or [0]),
                rng.choice(threads),
            )
        )
    return out


def memory_run(model: str, method: str, configs: list, prompt: int, threads, small: bool = False, say=print) -> dict:
    """Measure `configs` on one session in a worker and record its memory after each."""
    from kttune.runner.session import SessionSpec
    from kttune.runner.worker import SessionWorker, worker_memory
    from kttune.protocol import trend

    max_chunk = max(c.chunk for c in configs)
    spec = SessionSpec(
        model=model,
        method=method,
        layers=2,
        threads=tuple(sorted(set(threads))),
        max_tokens=min(max_chunk, prompt),
        cpu_max_tokens=min(max_chunk, prompt),
        small=small,
        device="cpu" if small else "",
        max_run_s=600,
    )
    t0 = time.perf_counter()
    rows = []
    with SessionWorker(spec) as w:
        start_s = time.perf_counter() - t0
        before = {**w.memory(), **worker_memory(w)}
        say(
            f"{model} {method}: worker up in {start_s:.1f} s, rss at rest {before.get('worker_rss_bytes', 0) / GIB:.2f} GiB"
        )
        for i, cfg in enumerate(configs):
            why = w.skip_reason(cfg, prompt)
            row = {"i": i, "config": cfg.label()}
            if why:
                row["skipped"] = why
            else:
                run = w.sample(cfg, prompt)
                row.update(
                    ms=run.measured_ms,
                    paths=list(run.paths),
                    run_peak_allocated_bytes=run.peak_allocated_bytes,
                    run_peak_reserved_bytes=run.peak_reserved_bytes,
                )
            row.update(w.memory())
            row.update(worker_memory(w))
            rows.append(row)
            say(
                f"  [{i + 1}/{len(configs)}] {cfg.label()}: rss {row.get('worker_rss_bytes', 0) / GIB:.2f} GiB"
                + (f", device used {row['device_used_bytes'] / GIB:.2f} GiB" if "device_used_bytes" in row else "")
                + (f" (skipped: {why})" if why else f", {row['ms']:.0f} ms")
            )
        stats = w.info()["stats"]
    measured = [r for r in rows if "skipped" not in r]
    out = {
        "model": model,
        "method": method,
        "small": small,
        "prompt_tokens": prompt,
        "threads": list(spec.threads),
        "configurations": len(configs),
        "measured": len(measured),
        "worker_start_s": round(start_s, 1),
        "wall_s": round(time.perf_counter() - t0, 1),
        "before_first": before,
        "rows": rows,
        "session_stats": stats,
    }
    for key in ("worker_rss_bytes", "rss_bytes", "cuda_allocated_bytes", "cuda_reserved_bytes", "device_used_bytes"):
        series = [r[key] for r in measured if key in r]
        if len(series) >= 2:
            t = trend(series)
            out[key] = {
                "first": series[0],
                "min": min(series),
                "max": max(series),
                "last": series[-1],
                "max_minus_first": max(series) - series[0],
                "first_minus_min": series[0] - min(series),
                "trend_per_config": t.to_dict(),
                "within_2gib_of_first": max(abs(x - series[0]) for x in series) <= LIMIT_BYTES,
            }
    return out


def markdown(results: list[dict], machine: str) -> str:
    lines = [
        f"# Runner memory across configurations ({machine})",
        "",
        "One runner session in a worker process; after each configuration its memory at rest. Claim: every "
        "figure within 2 GiB of the first configuration's, no per-configuration trend.",
        "",
        "| model | configs (measured) | figure | first GiB | min | max | max - first | trend MiB/config [interval] | within 2 GiB |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        for key in ("worker_rss_bytes", "cuda_reserved_bytes", "device_used_bytes"):
            f = r.get(key)
            if not f:
                continue
            t = f["trend_per_config"]
            lines.append(
                f"| {r['model']} {r['method']}{' (small)' if r['small'] else ''} | {r['configurations']} ({r['measured']}) | "
                f"{key.replace('_bytes', '')} | {f['first'] / GIB:.2f} | {f['min'] / GIB:.2f} | {f['max'] / GIB:.2f} | "
                f"{f['max_minus_first'] / GIB:+.2f} | {t['slope'] / 2**20:+.1f} [{t['low'] / 2**20:+.1f}, {t['high'] / 2**20:+.1f}] | "
                f"{'yes' if f['within_2gib_of_first'] else 'NO'} |"
            )
    for r in results:
        lines.append(
            f"\n{r['model']}: worker start (build) {r['worker_start_s']} s, {r['wall_s']} s in all; session "
            + ", ".join(f"{k} {v}" for k, v in r["session_stats"].items())
        )
    return "\n".join(lines) + "\n"


def default_grid(model: str, method: str, small: bool):
    """Flags to draw from: GPU experts up to a quarter of the model's (at most 32: each configuration
    re-copies its resident experts to the device, which is most of a configuration's time here)."""
    from kttune.spec.loader import load_model

    m = load_model(model, method)
    if small:
        return 8, (64, 128), (0, 64, 128), (1,)
    return min(m.num_experts // 4, 32), (1024, 2048), (0, 256, 512, 1024, 2048), (11, 13)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="glm-4.5-air:BF16,kimi-k2-thinking:RAWINT4")
    ap.add_argument("--configs", type=int, default=50)
    ap.add_argument("--prompt", type=int, default=None, help="prompt tokens per configuration (default 512; 128 small)")
    ap.add_argument("--small", action="store_true", help="the CPU variant (small shapes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    from kttune.probes.inventory import host_line

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for item in a.models.split(","):
        name, method = item.split(":")
        n_max, chunks, thresholds, threads = default_grid(name, method, a.small)
        configs = draw_configs(a.configs, n_max, chunks, thresholds, threads, a.seed)
        results.append(memory_run(name, method, configs, a.prompt or (128 if a.small else 512), threads, a.small))
        doc = {"machine": host_line(), "results": results}
        (out / "runner-memory.json").write_text(json.dumps(doc, indent=1))
        (out / "runner-memory.md").write_text(markdown(results, doc["machine"]))
    print((out / "runner-memory.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
