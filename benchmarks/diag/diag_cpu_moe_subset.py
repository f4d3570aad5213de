"""Is kt-kernel's MoE time proportional to the experts it serves? (issue 22: qwen3-30b-a3b's measured
hybrid MoE slope at 35 GPU experts is 0.53 of the slope at 2, where the pairs the CPU serves fall
to 0.74.) One kt-kernel layer, the runner's way of masking GPU experts (the `gpu_experts_mask` set and
their slots passed as -1), timed synchronously as the CPU probe does, for several GPU-expert counts and
prompt lengths, under uniform routing (the probe's) and under the runner's router; beside each time,
the (token, expert) pairs the CPU served and the distinct experts it touched.

    python benchmarks/diag/diag_cpu_moe_subset.py --out $OUT/cpu-moe-subset.json     # the GPU box
    python benchmarks/diag/diag_cpu_moe_subset.py --small --out /tmp/subset.json      # anywhere
    python benchmarks/diag/diag_cpu_moe_subset.py --report a.json b.json > subset.md  # the table
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def report(paths: list[str]) -> str:
    """A Markdown table of diag results: per file, routing and GPU-expert count, the share of
    (token, expert) pairs the CPU served, the fitted slope and intercept of kt-kernel's time over the
    prompt lengths, and the slope's ratio to the smallest count's beside the pairs' ratio."""
    lines = [
        "| model | kernel, threads | routing | GPU experts | CPU pair share | slope ms/1k tok | "
        "intercept ms | slope ratio | pair ratio |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for path in paths:
        d = json.loads(Path(path).read_text())
        for key, v in d.get("summary", {}).items():
            tag, n = key.split("/")
            lines.append(
                f"| {d['model']} {d['method']} | {d['kernel']}, {d['threads']} | {tag} | {n} | "
                f"{v['pair_share']:.3f} | {v['slope_ms_per_1k']:.2f} | {v['intercept_ms']:.2f} | "
                f"{v.get('slope_ratio', float('nan')):.3f} | {v.get('pair_ratio', float('nan')):.3f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    if sys.argv[1:2] == ["--report"]:
        print(report(sys.argv[2:]), end="")
        return
    import torch

    from kttune.probes.common import measure
    from diag_common import diag_stack, layer_inputs
    from kttune.spec.loader import load_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="qwen3-30b-a3b")
    ap.add_argument("--method", default="BF16")
    ap.add_argument("--threads", type=int, default=11)
    ap.add_argument("--gpu-experts", default="0,2,35,64,93,126")
    ap.add_argument("--tokens", default="512,1024,2048,3072")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--small", action="store_true")
    ap.add_argument(
        "--runner",
        action="store_true",
        help="also time, in the same process and on the same inputs, the runner's hybrid MoE (kt-kernel "
        "on its side stream plus the resident experts) and its CPU half alone",
    )
    a = ap.parse_args()

    spec = load_model(a.model, a.method)
    sizes = [int(x) for x in a.tokens.split(",")]
    counts = [int(x) for x in a.gpu_experts.split(",")]
    if a.small:
        from kttune.runner.stack import small_spec

        spec = small_spec(spec)
        sizes, counts = [64, 128], [0, 2, 4]
    counts = [n for n in counts if n < spec.num_experts]
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    st = diag_stack(spec, a.method, layers=1, threads=a.threads, max_tokens=max(sizes), device=dev)
    layer = st.layers[0]
    sync = torch.cuda.synchronize if dev == "cuda" else None
    out = {
        "model": spec.name,
        "method": a.method,
        "threads": a.threads,
        "experts": spec.num_experts,
        "top_k": spec.top_k,
        "kernel": st.cpu.kernel_class if st.cpu is not None else "none",
        "rows": [],
    }
    print(f"# {spec.name} {a.method}: {out['kernel']}, {a.threads} threads", flush=True)
    for m in sizes:
        h, h_cpu, (ids_r, w_r), (ids_u, w_u) = layer_inputs(st, layer, m, dev)
        y = torch.empty(m, spec.hidden_size, dtype=torch.bfloat16)
        for tag, ids0, w0 in (("uniform", ids_u, w_u), ("router", ids_r.cpu(), w_r.cpu())):
            for n in counts:
                st.cpu.set_gpu_experts(n)
                ids = ids0.masked_fill(ids0 < n, -1).contiguous()
                w = w0.contiguous()
                r = measure(
                    lambda ids=ids, w=w: st.cpu.forward(h_cpu, ids, w, y),
                    x=m,
                    warmup=2,
                    repeats=a.repeats,
                    sync=sync,
                )
                row = _row(m, tag, n, ids, r.t_ms, r.t_ms_p10, r.t_ms_p90)
                out["rows"].append(row)
                print(
                    f"M={m:5d} {tag:7s} gpu={n:3d} pairs={row['cpu_pairs']:6d} ({row['cpu_pair_share']:.3f}) "
                    f"touched={row['cpu_experts_touched']:3d} {row['median_ms']:9.3f} ms",
                    flush=True,
                )
        if a.runner:
            _runner_rows(st, layer, h, ids_u, w_u, counts, m, a.repeats, sync, out["rows"])
        Path(a.out).write_text(json.dumps(out, indent=1))
    # the slope per token at each count (least squares over the lengths), uniform routing, and its
    # ratio to the slope at the smallest count beside the ratio of the pairs served
    summary = {}
    tags = ("uniform", "router") + (("runner_sync", "runner_cpu", "runner_hybrid") if a.runner else ())
    for tag in tags:
        for n in counts:
            rows = [r for r in out["rows"] if r["routing"] == tag and r["gpu_experts"] == n]
            if len(rows) < 2:
                continue
            xs, ts = [r["tokens"] for r in rows], [r["median_ms"] for r in rows]
            mx, mt = statistics.mean(xs), statistics.mean(ts)
            slope = sum((a_ - mx) * (b - mt) for a_, b in zip(xs, ts)) / sum((a_ - mx) ** 2 for a_ in xs)
            summary[f"{tag}/{n}"] = {
                "slope_ms_per_1k": round(1e3 * slope, 3),
                "intercept_ms": round(mt - slope * mx, 3),
                "pair_share": round(statistics.mean(r["cpu_pair_share"] for r in rows), 4),
            }
    for tag in tags:
        base = summary.get(f"{tag}/{counts[0]}")
        for n in counts:
            s = summary.get(f"{tag}/{n}")
            if base and s:
                s["slope_ratio"] = round(s["slope_ms_per_1k"] / base["slope_ms_per_1k"], 3)
                s["pair_ratio"] = round(s["pair_share"] / base["pair_share"], 3)
    out["summary"] = summary
    Path(a.out).write_text(json.dumps(out, indent=1))
    for k, v in summary.items():
        print(k, v, flush=True)
    st.close()


def _row(tokens: int, routing: str, gpu_experts: int, ids, median: float, p10: float, p90: float) -> dict:
    """One timed call: the (token, expert) pairs the CPU served (ids >= 0), their share of the
    slots, the distinct experts they touched, and the time's median and 10th/90th percentiles."""
    import torch

    kept = ids[ids >= 0]
    return {
        "tokens": tokens,
        "routing": routing,
        "gpu_experts": gpu_experts,
        "cpu_pairs": int(kept.numel()),
        "cpu_pair_share": round(kept.numel() / ids.numel(), 4),
        "cpu_experts_touched": int(torch.unique(kept).numel()),
        "median_ms": round(median, 3),
        "p10_ms": round(p10, 3),
        "p90_ms": round(p90, 3),
    }


def _runner_rows(st, layer, h, ids_u, w_u, counts, m, repeats, sync, rows) -> None:
    """At each count, after the runner's own `set_gpu_experts` (resident experts built, kt-kernel's
    mask set): kt-kernel called synchronously as above (runner_sync), the runner's CPU half alone
    (runner_cpu: copies to the pinned buffers and kt-kernel on the side stream, then waited) and the
    runner's whole hybrid MoE (runner_hybrid: the CPU half overlapped with the resident experts' fused
    MoE), each timed to a device sync, interleaved so that drift hits the three alike."""
    import torch

    from kttune.probes.common import measure
    from kttune.runner.path_runner import PathRunner

    pr = PathRunner(st)
    dev_ids, dev_w = ids_u.to(h.device), w_u.to(h.device)
    h_cpu = h.cpu().contiguous()
    y = torch.empty(m, h.shape[1], dtype=torch.bfloat16)
    for n in counts:
        st.set_gpu_experts(n)
        masked = ids_u.masked_fill(ids_u < n, -1).contiguous()
        calls = {
            "runner_sync": lambda: st.cpu.forward(h_cpu, masked, w_u.contiguous(), y),
            "runner_cpu": lambda: pr._cpu_submit(h, dev_ids, dev_w)(),
            "runner_hybrid": lambda: pr._hybrid(layer, h, dev_ids, dev_w),
        }
        got: dict[str, list[float]] = {k: [] for k in calls}
        for _ in range(2):  # warm-up of each call at this count
            for f in calls.values():
                f()
                if sync:
                    sync()
        for _ in range(repeats):
            for k, f in calls.items():
                got[k].append(measure(f, x=m, warmup=0, repeats=1, sync=sync).t_ms)
        for k, ts in got.items():
            q = statistics.quantiles(ts, n=10) if len(ts) > 1 else [ts[0]] * 9
            row = _row(m, k, n, masked, statistics.median(ts), q[0], q[-1])
            rows.append(row)
            print(
                f"M={m:5d} {k:13s} gpu={n:3d} share={row['cpu_pair_share']:.3f} {row['median_ms']:9.3f} ms", flush=True
            )
    st.set_gpu_experts(0)


if __name__ == "__main__":
    main()
