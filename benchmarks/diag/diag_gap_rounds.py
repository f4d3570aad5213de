"""The probe-runner gap with time taken out: the candidates of diag_probe_runner_gap.py timed in
interleaved rounds, so that a drift of the machine hits every candidate of a round alike.

diag_probe_runner_gap.py times its candidates one after the other. On two Emerald Rapids H100
instances (2026-12-06, u and v) it timed one kt-kernel call at Mixtral-8x7B's shape at 46-81 ms
(256 tokens, the runner's own layer) depending on the moment, and the vCPUs of this machine kind
change speed within seconds (docs/tune.md, "The VM's vCPUs move"), so a candidate's effect and the
machine's drift cannot be told apart there. Here each round runs every candidate once at every size,
in an order shuffled per round (seeded), and each candidate's time is compared with the probe's way
round by round (`kttune.protocol.compare`, paired by round):

- runner: the path runner's forced hybrid forward, its MoE part (as the sweeps report);
- runner layer: a synchronous forward on the runner's kt-kernel layer, the model's router, four
  hidden states in turn, back to back;
- runner layer, gaps: the same with a 3 ms gap after each call (the runner's attention);
- probe layer: a layer built as the probe builds it (its max_len, one pool on node 0, the host's
  ISA), uniform routing, one input, back to back (the probe's way);
- probe layer, gaps: the same with a 3 ms gap after each call;
- the probe: `probe_cpu_moe` itself at this shape (it builds its own layer), every `--probe-every`
  rounds;
- memory copy: a 1 GiB torch copy (GB/s), the host's memory bandwidth at that moment.

Each candidate call: one warm-up and `--calls` timed calls per size and round, their median the
round's sample. Writes gap-rounds-<tag>.json (rows per round, the per-candidate estimates and the
paired ratios against the probe layer) to --out and prints one line per candidate and size.

    python benchmarks/diag/diag_gap_rounds.py --out DIR --model mixtral-8x7b:BF16 --sizes 256,768
        [--rounds 12] [--threads 11] [--small]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

RUNNER = "runner"
RUNNER_LAYER = "runner layer"
RUNNER_GAPS = "runner layer, gaps"
PROBE_LAYER = "probe layer"
PROBE_GAPS = "probe layer, gaps"
PROBE = "the probe"
COPY = "memory copy (GB/s)"
GAP_S = 0.003


def timed_calls(fn, calls: int, gap_s: float = 0.0) -> float:
    """One warm-up call, then `calls` timed ones (a `gap_s` sleep after each); their median, ms."""
    fn()
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
        if gap_s:
            time.sleep(gap_s)
    return statistics.median(out)


def summarise(rows: list[dict], reference: str = PROBE_LAYER) -> list[dict]:
    """Per (candidate, size): the estimate over rounds and the ratio to `reference`, paired by round."""
    from kttune.protocol.stats import compare, estimate

    out = []
    keys = sorted({(r["candidate"], r["tokens"]) for r in rows}, key=lambda k: (k[1], k[0]))
    for cand, m in keys:
        mine = [r for r in rows if r["candidate"] == cand and r["tokens"] == m]
        e = estimate([r["value"] for r in mine], rounds=[r["round"] for r in mine])
        item = {"candidate": cand, "tokens": m, "estimate": e.to_dict()}
        ref = [r for r in rows if r["candidate"] == reference and r["tokens"] == m]
        if cand not in (reference, COPY) and ref:
            c = compare(estimate([r["value"] for r in ref], rounds=[r["round"] for r in ref]), e)
            item["vs_probe_layer"] = c.to_dict()
        out.append(item)
    return out


def diagnose(name, method, threads, sizes, rounds, calls, probe_every, small, seed, say) -> list[dict]:
    import torch

    from diag_common import four_inputs, probe_built_layer, probe_options, runner_stack
    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.probes.cpu_moe import probe_cpu_moe
    from kttune.probes.inventory import collect_cpu, usable_cores
    from kttune.runner.path_runner import PathRunner
    from kttune.runner.stack import small_spec
    from kttune.spec.loader import load_model

    spec = load_model(name, method)
    run_spec = small_spec(spec) if small else spec
    dev = "cuda" if torch.cuda.is_available() and not small else "cpu"
    cpu = collect_cpu()
    cores = usable_cores(cpu)
    st = runner_stack(run_spec, spec, method, threads, sizes, dev)
    r = PathRunner(st)
    layer = st.layers[0]
    probe_layer = probe_built_layer(st, run_spec, threads, cpu.isa, 8192 if not small else 512)
    inputs = {m: four_inputs(st, layer, run_spec, m, dev) for m in sizes}

    def forward(lay, m, routing, turn):
        d, state = inputs[m], {"i": 0}
        ids, w = d[routing][0], d[routing][1]

        def fn():
            h = d["h_cpu"][state["i"] % 4] if turn else d["h_cpu"][0]
            state["i"] += 1
            lay.forward(h, ids, w, d["out"])

        return fn

    copy_bytes = (1 << 30) if not small else (64 << 20)
    src = torch.ones(copy_bytes // 2, dtype=torch.bfloat16)
    dst = torch.empty_like(src)

    def candidates(m: int) -> dict:
        return {
            RUNNER: lambda: statistics.median(
                r.run_prompt(m, m, m, "hybrid").forwards[0].mean_moe_ms for _ in range(calls + 1)
            ),
            RUNNER_LAYER: lambda: timed_calls(forward(st.cpu, m, "router", True), calls),
            RUNNER_GAPS: lambda: timed_calls(forward(st.cpu, m, "router", True), calls, GAP_S),
            PROBE_LAYER: lambda: timed_calls(forward(probe_layer, m, "uniform", False), calls),
            PROBE_GAPS: lambda: timed_calls(forward(probe_layer, m, "uniform", False), calls, GAP_S),
        }

    popts = probe_options(run_spec, method, sizes, threads)
    rows: list[dict] = []
    t_start = time.perf_counter()
    r.run_prompt(min(sizes), min(sizes), min(sizes), "hybrid")  # the runner's first forward, untimed
    rng = random.Random(seed)
    for k in range(rounds):
        jobs = [(c, m) for m in sizes for c in candidates(m)] + [(COPY, 0)]
        if probe_every and k % probe_every == 0:
            jobs.append((PROBE, 0))
        rng.shuffle(jobs)
        for cand, m in jobs:
            t = time.perf_counter() - t_start
            if cand == COPY:
                dst.copy_(src)
                s = timed_calls(lambda: dst.copy_(src), 3)
                rows.append({"round": k, "t_s": t, "candidate": COPY, "tokens": 0, "value": copy_bytes * 2 / s / 1e6})
            elif cand == PROBE:
                with quiet_stdout(to_stderr=True):
                    curves = probe_cpu_moe(popts, cpu, cores=cores, numa_ids=[0])
                for c in curves:
                    for p in c.points:
                        rows.append({"round": k, "t_s": t, "candidate": PROBE, "tokens": int(p.x), "value": p.t_ms})
            else:
                rows.append({"round": k, "t_s": t, "candidate": cand, "tokens": m, "value": candidates(m)[cand]()})
        say(f"{name} round {k + 1}/{rounds} done at {time.perf_counter() - t_start:.0f} s")
    probe_layer.close()
    st.close()
    for row in rows:
        row.update(model=name, method=method, threads=threads)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="mixtral-8x7b:BF16", help="NAME:METHOD")
    ap.add_argument("--threads", type=int, default=11)
    ap.add_argument("--sizes", default="256,768")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--calls", type=int, default=4, help="timed calls per candidate, size and round")
    ap.add_argument("--probe-every", type=int, default=4, help="run probe_cpu_moe in every Nth round (0: never)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--small", action="store_true", help="the CPU variant: small shapes on this host's CPU")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    from kttune.probes.inventory import host_line

    name, method = a.model.split(":")
    sizes = [int(x) for x in a.sizes.split(",")]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = a.tag or ("small" if a.small else name)
    t0 = time.perf_counter()
    rows = diagnose(
        name,
        method,
        a.threads,
        sizes,
        a.rounds,
        a.calls,
        a.probe_every,
        a.small,
        a.seed,
        lambda s: print(f"[{time.perf_counter() - t0:6.1f}s] {s}", flush=True),
    )
    summary = summarise(rows)
    for s in summary:
        e = s["estimate"]
        ratio = s.get("vs_probe_layer")
        tail = f"  /probe layer {ratio['ratio']:.3f} [{ratio['low']:.3f}-{ratio['high']:.3f}]" if ratio else ""
        unit = "GB/s" if s["candidate"] == COPY else "ms"
        print(
            f"M={s['tokens']:5d} {s['candidate']:20s} median {e['median']:9.2f} {unit} "
            f"[{e['low']:.2f}-{e['high']:.2f}] cv {e['cv']:.1%}{tail}"
        )
    doc = {
        "host": host_line(),
        "model": name,
        "method": method,
        "threads": a.threads,
        "sizes": sizes,
        "rounds": a.rounds,
        "calls": a.calls,
        "seed": a.seed,
        "rows": rows,
        "summary": summary,
    }
    (out / f"gap-rounds-{tag}.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
