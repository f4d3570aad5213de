"""Layerwise pipeline variants on one full MoE layer (GPU box): which host slots, experts per step,
stage C batch, driver ("host": a Python loop; "stream": everything enqueued on CUDA streams, stage A
through kt-kernel's submit_with_cuda_stream) and stage A thread count bring the overlapped layer time
closest to its slowest stage.

Also measures the host's DRAM copy bandwidth (torch copy_ of 2 GiB, read + write bytes per second),
the resource stage A and the DMA share.

Prints one JSON line per variant and a table sorted by layer time with two ratios: against the
variant's own slowest stage alone (the issue's overlap efficiency) and against the best stage times
over all variants (how far the layer is from what the fastest stages allow). Nothing is asserted.

Usage: python benchmarks/bench_pipeline.py --shape Kimi-K2 --threads 15,13 \\
           --configs "2,1,1,host;2,1,4,stream" [--repeats 3] [--diagnose] [--membw] [--json out.json]
A config is slots,group,post_batch,driver.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from kttune.units import GIB


def host_copy_gbps(threads: int, nbytes: int = 2 * GIB, repeats: int = 3) -> float:
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a = torch.ones(nbytes, dtype=torch.uint8)
        b = torch.zeros_like(a)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            b.copy_(a)
            best = min(best, time.perf_counter() - t0)
        return 2 * nbytes / best / 1e9
    finally:
        torch.set_num_threads(old)


def parse_configs(text: str):
    from kttune.runner.pipeline import PipelineConfig

    out = []
    for item in filter(None, (x.strip() for x in text.split(";"))):
        slots, group, pb, driver = item.split(",")
        out.append(PipelineConfig(int(slots), int(group), int(pb), driver))
    return out


def delivered(pl, host, sample=(0, 1)) -> bool:
    """The GPU layer holds the host experts (checked on a few experts after a run)."""
    import torch

    experts = sorted({e for e in sample if e < pl.experts} | {pl.experts - 1})
    for e in experts:
        for name, want in host.expected(e).items():
            got = pl.gpu.dst[name][e].cpu()
            if pl.repack:
                got = got.t()
            if not torch.equal(got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)):
                return False
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="Kimi-K2", help="Qwen3-30B-A3B, DeepSeek-V3 or Kimi-K2")
    ap.add_argument("--threads", default="", help="stage A thread counts (default: cores-1)")
    ap.add_argument("--configs", default="2,1,1,host;2,4,1,host;2,1,4,host;2,1,1,stream;2,1,4,stream")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--diagnose", action="store_true", help="also time where the host loop spends its time")
    ap.add_argument("--membw", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to benchmark")
        return 1
    from kttune.kernels.expert_weights import HostExperts, make_writer
    from kttune.probes import gpu_common
    from kttune.runner.pipeline import LayerPipeline, default_threads

    shapes = {s.name: s for s in (gpu_common.QWEN3_30B_A3B, gpu_common.DEEPSEEK_V3, gpu_common.KIMI_K2)}
    shape = shapes[args.shape]
    threads = [int(t) for t in args.threads.split(",") if t] or [default_threads()]
    configs = parse_configs(args.configs)
    report = {"shape": shape.name, "method": shape.method, "rows": []}
    if args.membw:
        report["host_copy_gbps"] = {t: round(host_copy_gbps(t), 1) for t in sorted({1, 4, 8, max(threads)})}
        print(json.dumps({"host_copy_gbps": report["host_copy_gbps"]}), flush=True)
    numa = gpu_common.gpu_numa_node(0)
    with gpu_common.bound_to_node(numa):
        t0 = time.perf_counter()
        host = HostExperts.random(shape.method, shape.hidden, shape.inter, shape.experts)
        print(
            json.dumps({"host_layer_gib": round(host.nbytes / GIB, 2), "prep_s": round(time.perf_counter() - t0, 1)}),
            flush=True,
        )
        for t in threads:
            t0 = time.perf_counter()
            writer, notes = make_writer(host, t)
            print(
                json.dumps(
                    {
                        "threads": t,
                        "writer": writer.backend,
                        "load_s": round(time.perf_counter() - t0, 1),
                        "notes": notes,
                    }
                ),
                flush=True,
            )
            for cfg in configs:
                row = {"threads": t, "config": cfg.label()}
                try:
                    pl = LayerPipeline(host, writer, cfg, "cuda", diagnose=args.diagnose)
                    res = pl.measure(args.repeats)
                    row |= res.extra() | {"delivered": delivered(pl, host)}
                    del pl
                except Exception as e:  # one variant failing must not lose the others
                    row["error"] = f"{type(e).__name__}: {e}"
                torch.cuda.empty_cache()
                report["rows"].append(row)
                print(json.dumps(row), flush=True)
            writer.close()
    ok = [r for r in report["rows"] if "layer_ms" in r]
    if ok:
        best = {k: min(r[k] for r in ok) for k in ("stage_a_ms", "stage_b_ms", "stage_c_ms")}
        ideal = max(best.values())
        print(
            f"\n{shape.name} {shape.method}: best stages alone A {best['stage_a_ms']:.1f} / B {best['stage_b_ms']:.1f} / C {best['stage_c_ms']:.1f} ms"
        )
        print(f"{'threads':>7} {'config':<44} {'A':>7} {'B':>7} {'C':>6} {'layer':>7} {'/slowest':>8} {'/best':>6}")
        for r in sorted(ok, key=lambda r: r["layer_ms"]):
            print(
                f"{r['threads']:>7} {r['config']:<44} {r['stage_a_ms']:>7.1f} {r['stage_b_ms']:>7.1f} {r['stage_c_ms']:>6.1f} "
                f"{r['layer_ms']:>7.1f} {r['overlap']:>8.3f} {r['layer_ms'] / ideal:>6.3f}"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
