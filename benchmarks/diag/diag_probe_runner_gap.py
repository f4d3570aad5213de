"""Why the `--model` CPU MoE probe and the path runner disagree about the same kt-kernel call: at
GLM-4.5-Air's shape (BF16, 11 threads) the runner's hybrid MoE took 71-74 ms at 384 tokens and ~178
at 3,072 on the H200 box, the probe's curve ~91 and 244 ms. benchmarks/diag/diag_cpu_moe_modes.py found
no gap at the qwen3 shape for routing, stream submission and the layer's build; this one takes the
candidates one at a time, in one process, on one model's layer, from the runner's way to the probe's:

- the runner end to end: forced hybrid single forwards (the MoE part of the K layers, as it reports);
- the probe's way (base): a synchronous `forward` on the runner's kt-kernel layer, uniform routing,
  the same input every call, calls back to back;
- routing: the model's router (random weights) instead of uniform top-k;
- max_len: a layer built as the probe builds it (its `max_tokens`, 8192 in a full probe, one pool
  on node 0, the host's ISA) instead of the runner's (`cpu_max_tokens`, 4096);
- submission: on the CUDA stream as the runner submits (GPU only);
- inputs: four different hidden states in turn instead of one;
- call order: the two sizes alternating, with a 3 ms gap after each call (the runner's attention);
- other pools alive: after worker pools of the probe's other thread counts (cores-3, cores-1) ran a
  task each, as in a probe process that measured those counts first;
- retained layers: after two more layers of the shape were built and closed (kt-kernel 0.7.2 keeps
  a closed layer's memory, as a probe process that measured other methods holds);
- settling: on a fresh layer built the probe's way, each size's first calls against its later ones
  (the probe takes 2 warm-up and 3-5 timed calls per size; the runner's sweep is in its steady state);
- the probe itself: `probe_cpu_moe` at this shape, thread count and sizes, in this process, last.

Each timing: 2 warm-up calls, `--repeats` timed ones; median and 10th percentile. Prints one line per
(candidate, size) and writes diag-probe-runner-gap-<tag>.json to --out.

    python benchmarks/diag/diag_probe_runner_gap.py --out DIR [--models glm-4.5-air:BF16,qwen3-30b-a3b:BF16]
        [--threads 11] [--sizes 384,3072] [--small]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def stats(samples: list[float]) -> dict:
    from kttune.probes.common import quantiles

    p10, med, p90 = quantiles(samples)
    return {"median_ms": med, "p10_ms": p10, "p90_ms": p90, "n": len(samples)}


def timed(fn, repeats: int, sync=None) -> dict:
    """2 warm-up calls, then `repeats` timed ones (`probes.common.measure`)."""
    from kttune.probes.common import measure

    p = measure(fn, x=0, warmup=2, repeats=repeats, sync=sync, max_repeats=repeats)
    return {"median_ms": p.t_ms, "p10_ms": p.t_ms_p10, "p90_ms": p.t_ms_p90, "n": p.n}


def diagnose(name: str, method: str, threads: int, sizes: list[int], repeats: int, small: bool, say) -> list[dict]:
    import torch

    from kttune.kernels.expert_weights import HostExperts
    from kttune.kernels.kt_ext import load_kt_kernel, quiet_stdout
    from kttune.kernels.kt_moe import KtMoeLayer
    from kttune.kernels.kt_pool import cpu_infer
    from kttune.kernels.routing import random_routing
    from kttune.probes.common import kt_thread_counts
    from kttune.probes.cpu_moe import probe_cpu_moe
    from kttune.probes.inventory import collect_cpu, usable_cores
    from kttune.runner.path_runner import PathRunner
    from diag_common import four_inputs, probe_built_layer, probe_options, runner_stack
    from kttune.runner.stack import small_spec
    from kttune.spec.loader import load_model

    spec = load_model(name, method)
    run_spec = small_spec(spec) if small else spec
    dev = "cuda" if torch.cuda.is_available() and not small else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else None
    cpu = collect_cpu()
    rows: list[dict] = []

    def rec(candidate: str, m: int, d: dict) -> None:
        rows.append({"model": name, "method": method, "threads": threads, "tokens": m, "candidate": candidate, **d})
        say(f"{name} M={m:5d} {candidate:58s} median {d['median_ms']:9.3f} ms  p10 {d['p10_ms']:9.3f}")

    st = runner_stack(run_spec, spec, method, threads, sizes, dev)
    r = PathRunner(st)
    layer = st.layers[0]
    # 1. the runner end to end: forced hybrid single forwards, its MoE part
    r.run_prompt(min(sizes), min(sizes), min(sizes), "hybrid")
    for m in sizes:
        ms = [r.run_prompt(m, m, m, "hybrid").forwards[0].mean_moe_ms for _ in range(max(3, repeats // 2))]
        rec("runner end to end (forced hybrid, MoE part)", m, stats(ms))
    inputs = {m: four_inputs(st, layer, run_spec, m, dev) for m in sizes}

    def sync_forward(lay, m, routing="uniform", fresh=False):
        d = inputs[m]
        ic, wc = d[routing][0], d[routing][1]
        state = {"i": 0}

        def fn():
            h = d["h_cpu"][state["i"] % 4] if fresh else d["h_cpu"][0]
            state["i"] += 1
            lay.forward(h, ic, wc, d["out"])

        return fn

    for m in sizes:
        rec("base: probe's way on the runner's layer (sync, uniform)", m, timed(sync_forward(st.cpu, m), repeats))
        rec("routing: the model's router", m, timed(sync_forward(st.cpu, m, "router"), repeats))
        rec("inputs: four hidden states in turn", m, timed(sync_forward(st.cpu, m, fresh=True), repeats))
        if dev == "cuda":
            d = inputs[m]
            rec(
                "submission: on the CUDA stream (runner), router",
                m,
                timed(lambda: r._cpu_submit(d["h"][0], d["router"][2], d["router"][3])(), repeats, sync),
            )
    # call order: sizes alternating, a gap after each call
    alt = {m: [] for m in sizes}
    fns = {m: sync_forward(st.cpu, m, "router", fresh=True) for m in sizes}
    for _ in range(2):
        for m in sizes:
            fns[m]()
    for _ in range(repeats):
        for m in sizes:
            t0 = time.perf_counter()
            fns[m]()
            alt[m].append((time.perf_counter() - t0) * 1e3)
            time.sleep(0.003)
    for m in sizes:
        rec("call order: sizes alternating, 3 ms gaps (router, 4 inputs)", m, stats(alt[m]))
    # max_len and the probe's build of the layer
    probe_max = 8192 if not small else 512
    probe_layer = probe_built_layer(st, run_spec, threads, cpu.isa, probe_max)
    settle_calls = 30
    for m in sizes:
        fn = sync_forward(probe_layer, m)
        per_call = []
        for _ in range(settle_calls):
            t0 = time.perf_counter()
            fn()
            per_call.append((time.perf_counter() - t0) * 1e3)
        rec("settling: fresh layer, calls 3-7 at this size", m, stats(per_call[2:7]))
        rec(f"settling: fresh layer, calls {settle_calls - 9}-{settle_calls} at this size", m, stats(per_call[-10:]))
    for m in sizes:
        rec(
            f"max_len: layer built as the probe builds it (max_len {probe_max})",
            m,
            timed(sync_forward(probe_layer, m), repeats),
        )
    # other pools alive: the probe's other thread counts each ran a task
    kt = load_kt_kernel()
    cores = usable_cores(cpu)
    others = [t for t in kt_thread_counts(cores, False) if t != threads]
    for t in others:
        with quiet_stdout(to_stderr=True):
            tmp = KtMoeLayer(
                HostExperts.random(
                    method, run_spec.hidden_size, run_spec.moe_intermediate_size, 2 * run_spec.top_k, seed=t
                ),
                top_k=run_spec.top_k,
                threads=t,
                max_tokens=64,
                isa=cpu.isa,
            )
        x = torch.zeros(1, run_spec.hidden_size, dtype=torch.bfloat16)
        ids, w = random_routing(1, 2 * run_spec.top_k, run_spec.top_k, seed=0)
        tmp.forward(x, ids, w, torch.empty_like(x))
        tmp.close()
        cpu_infer(kt.ext, t)  # the pool stays for the process (kttune.kernels.kt_pool)
    for m in sizes:
        rec(
            f"other pools alive ({', '.join(map(str, others))} threads ran a task)",
            m,
            timed(sync_forward(st.cpu, m), repeats),
        )
    # retained layers
    for k in range(2):
        with quiet_stdout(to_stderr=True):
            extra = KtMoeLayer(
                st.host, top_k=run_spec.top_k, threads=threads, max_tokens=min(probe_max, 1024), isa=cpu.isa
            )
        extra.close()
    for m in sizes:
        rec("retained: after two more layers were built and closed", m, timed(sync_forward(st.cpu, m), repeats))
    probe_layer.close()
    # the probe itself, last (it builds its own layer)
    opts = probe_options(run_spec, method, sizes, threads)
    curves = probe_cpu_moe(opts, cpu, cores=cores, numa_ids=[0])
    for c in curves:
        for p in c.points:
            rec(
                "the probe (probe_cpu_moe, full mode, this process)",
                int(p.x),
                {"median_ms": p.t_ms, "p10_ms": p.t_ms_p10 or p.t_ms, "p90_ms": p.t_ms_p90 or p.t_ms, "n": p.n},
            )
    st.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="glm-4.5-air:BF16,qwen3-30b-a3b:BF16")
    ap.add_argument("--threads", type=int, default=11)
    ap.add_argument("--sizes", default="384,3072")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--small", action="store_true", help="the CPU variant: small shapes on this host's CPU")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    from kttune.probes.inventory import host_line

    sizes = [int(x) for x in a.sizes.split(",")]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = a.tag or ("small" if a.small else "h200")
    t0 = time.perf_counter()
    doc = {"host": host_line(), "threads": a.threads, "sizes": sizes, "repeats": a.repeats, "rows": []}
    for item in a.models.split(","):
        name, method = item.split(":")
        try:
            doc["rows"] += diagnose(
                name,
                method,
                a.threads,
                sizes,
                a.repeats,
                a.small,
                lambda s: print(f"[{time.perf_counter() - t0:6.1f}s] {s}", flush=True),
            )
        except Exception as e:  # noqa: BLE001 - the other models stand
            import traceback

            traceback.print_exc()
            doc.setdefault("errors", []).append(f"{name}: {type(e).__name__}: {e}")
        (out / f"diag-probe-runner-gap-{tag}.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
