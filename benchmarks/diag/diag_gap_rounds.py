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
- memory copy: a 1 GiB torch copy (GB/s), the host's memory bandwidth at that moment;
- with `--gpu-experts N`: the runner's hybrid forward with N experts on the GPU (the sweeps' split,
  experts 0..N-1, sent to kt-kernel as id -1), and the runner's and the probe's layers with those N
  masked on the built layer (`KtMoeLayer.gpu_mask`; on the GPU box before kttune's `moe_config` fix
  the mask was left null and these ran the whole layer, instance z:
  docs/path-runner.md#kt-kernels-gpu-expert-mask);
- with `--quick-every K`: the quick probe's CPU MoE step (`kttune probe --quick`'s options at this
  method and thread count: its small layer, 1-256 tokens) every K rounds, its curve kept per round.

`--read FILE --profile P` reads a written file against the cost model: per round that ran the quick
probe, P's CPU MoE curves replaced by that round's quick curve (P: the instance's quick profile, for
its GPU and pipeline curves), `Components.cpu_moe_ms` of the model with all its experts on the CPU and
with N fewer; each candidate over that term, paired by round. The quick curve and the candidates of a
round share the moment, so a ratio away from 1 is the shape law's reach (the probe's layer over the
8-expert term) or the runner's (the runner with N GPU experts over the term with N fewer), not the
machine's drift. Writes gap-read-<tag>.md and .json next to FILE (or to --out).

Each candidate call: one warm-up and `--calls` timed calls per size and round, their median the
round's sample. Writes gap-rounds-<tag>.json (rows per round, the per-candidate estimates and the
paired ratios against the probe layer) to --out and prints one line per candidate and size.

    python benchmarks/diag/diag_gap_rounds.py --out DIR --model mixtral-8x7b:BF16 --sizes 256,768
        [--rounds 12] [--threads 11] [--gpu-experts 2] [--quick-every 1] [--small]
    python benchmarks/diag/diag_gap_rounds.py --read DIR/gap-rounds-TAG.json --profile QUICK.profile.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import asdict
from pathlib import Path

from diag_common import masked, timed_calls

RUNNER = "runner"
RUNNER_LAYER = "runner layer"
RUNNER_GAPS = "runner layer, gaps"
PROBE_LAYER = "probe layer"
PROBE_GAPS = "probe layer, gaps"
PROBE = "the probe"
COPY = "memory copy (GB/s)"
RUNNER_GPU = "runner, GPU experts"
RUNNER_MASKED = "runner layer, masked"
PROBE_MASKED = "probe layer, masked"
QUICK = "quick probe"
GAP_S = 0.003


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
        if cand not in (reference, COPY, QUICK) and ref:
            c = compare(estimate([r["value"] for r in ref], rounds=[r["round"] for r in ref]), e)
            item["vs_probe_layer"] = c.to_dict()
        out.append(item)
    return out


def diagnose(
    name,
    method,
    threads,
    sizes,
    rounds,
    calls,
    probe_every,
    small,
    seed,
    say,
    gpu_experts=0,
    quick_every=0,
    on_round=None,
) -> tuple[list[dict], list[dict]]:
    """The rows (one per round, candidate and size) and the quick probe's curves (one per round that
    ran it: {"round", "curve"}); `on_round(rows, quick_curves, rounds_done)` after each round."""
    import torch

    from diag_common import four_inputs, probe_built_layer, probe_options, runner_stack
    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.probes.cpu_moe import probe_cpu_moe
    from kttune.probes.inventory import collect_cpu, usable_cores
    from kttune.probes.run import ProbeOptions, cpu_moe_options
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

    def runner_moe(m: int) -> float:
        return statistics.median(r.run_prompt(m, m, m, "hybrid").forwards[0].mean_moe_ms for _ in range(calls + 1))

    def runner_gpu(m: int) -> float:
        st.set_gpu_experts(gpu_experts)
        try:
            return runner_moe(m)
        finally:
            st.set_gpu_experts(0)

    def on_runner_layer(m: int, gap_s: float = 0.0) -> float:
        return timed_calls(forward(st.cpu, m, "router", True), calls, gap_s)

    def on_probe_layer(m: int, gap_s: float = 0.0) -> float:
        return timed_calls(forward(probe_layer, m, "uniform", False), calls, gap_s)

    def candidates(m: int) -> dict:
        out = {
            RUNNER: lambda: runner_moe(m),
            RUNNER_LAYER: lambda: on_runner_layer(m),
            RUNNER_GAPS: lambda: on_runner_layer(m, GAP_S),
            PROBE_LAYER: lambda: on_probe_layer(m),
            PROBE_GAPS: lambda: on_probe_layer(m, GAP_S),
        }
        if gpu_experts:
            out[RUNNER_GPU] = lambda: runner_gpu(m)
            out[RUNNER_MASKED] = lambda: masked(st.cpu, gpu_experts, lambda: on_runner_layer(m))
            out[PROBE_MASKED] = lambda: masked(probe_layer, gpu_experts, lambda: on_probe_layer(m))
        return out

    popts = probe_options(run_spec, method, sizes, threads)
    qopts = cpu_moe_options(ProbeOptions(quick=True, methods=(method,), threads=(threads,)))
    rows: list[dict] = []
    quick_curves: list[dict] = []
    t_start = time.perf_counter()
    r.run_prompt(min(sizes), min(sizes), min(sizes), "hybrid")  # the runner's first forward, untimed
    rng = random.Random(seed)
    for k in range(rounds):
        jobs = [(c, m) for m in sizes for c in candidates(m)] + [(COPY, 0)]
        if probe_every and k % probe_every == 0:
            jobs.append((PROBE, 0))
        if quick_every and k % quick_every == 0:
            jobs.append((QUICK, 0))
        rng.shuffle(jobs)
        for cand, m in jobs:
            t = time.perf_counter() - t_start
            if cand == COPY:
                dst.copy_(src)
                s = timed_calls(lambda: dst.copy_(src), 3)
                rows.append({"round": k, "t_s": t, "candidate": COPY, "tokens": 0, "value": copy_bytes * 2 / s / 1e6})
            elif cand in (PROBE, QUICK):
                with quiet_stdout(to_stderr=True):
                    curves = probe_cpu_moe(popts if cand == PROBE else qopts, cpu, cores=cores, numa_ids=[0])
                for c in curves:
                    for p in c.points:
                        rows.append({"round": k, "t_s": t, "candidate": cand, "tokens": int(p.x), "value": p.t_ms})
                    if cand == QUICK:
                        quick_curves.append({"round": k, "curve": asdict(c)})
            else:
                rows.append({"round": k, "t_s": t, "candidate": cand, "tokens": m, "value": candidates(m)[cand]()})
        say(f"{name} round {k + 1}/{rounds} done at {time.perf_counter() - t_start:.0f} s")
        if on_round:
            on_round(rows, quick_curves, k + 1)
    probe_layer.close()
    st.close()
    for row in rows:
        row.update(model=name, method=method, threads=threads)
    return rows, quick_curves


# Which term of the cost model each candidate is read against: the model's CPU MoE with all its experts
# on the CPU, or with the GPU's N left out.
ALL_EXPERTS = (RUNNER, RUNNER_LAYER, RUNNER_GAPS, PROBE_LAYER, PROBE_GAPS, PROBE)
FEWER_EXPERTS = (RUNNER_GPU, RUNNER_MASKED, PROBE_MASKED)


def read_against_model(doc: dict, profile_path: str) -> dict:
    """Each candidate of a written file over the cost model's CPU MoE term, per round from that round's
    quick curve (paired by round) and from the profile's own curves (one number): see the module doc."""
    from dataclasses import replace

    from kttune.cost.components import Components
    from kttune.hw.profile import curve_from_dict, load_profile
    from kttune.protocol.stats import compare, estimate
    from kttune.spec.loader import load_model

    own = load_profile(profile_path)
    own = replace(own, curves=tuple(c for c in own.curves if c.kind != "cpu_moe_shape"))
    base = replace(own, curves=tuple(c for c in own.curves if c.kind != "cpu_moe"))
    spec = load_model(doc["model"], doc["method"])
    n_gpu, experts, threads = int(doc.get("gpu_experts", 0)), spec.num_experts, doc["threads"]
    counts = sorted({experts, experts - n_gpu})
    own_c = Components(own, spec, doc["method"])
    own_term = {(m, e): own_c.cpu_moe_ms(m, e, threads) for m in doc["sizes"] for e in counts}
    per_round: dict[tuple[int, int], list[tuple[int, float]]] = {}
    for q in doc.get("quick_curves", []):
        c = Components(replace(base, curves=base.curves + (curve_from_dict(q["curve"]),)), spec, doc["method"])
        for m in doc["sizes"]:
            for e in counts:
                per_round.setdefault((m, e), []).append((q["round"], c.cpu_moe_ms(m, e, threads)))
    out = []
    for cand in ALL_EXPERTS + FEWER_EXPERTS:
        e = experts if cand in ALL_EXPERTS else experts - n_gpu
        for m in doc["sizes"]:
            mine = [r for r in doc["rows"] if r["candidate"] == cand and r["tokens"] == m]
            if not mine:
                continue
            got = estimate([r["value"] for r in mine], rounds=[r["round"] for r in mine])
            item = {
                "candidate": cand,
                "tokens": m,
                "cpu_experts": e,
                "measured_ms": got.median,
                "own_term_ms": own_term[(m, e)],
                "over_own_term": got.median / own_term[(m, e)],
            }
            if per_round.get((m, e)):
                rs, vs = zip(*per_round[(m, e)])
                term = estimate(list(vs), rounds=list(rs))
                item["round_term_ms"] = term.median
                item["over_round_term"] = compare(term, got).to_dict()
            out.append(item)
    return {
        "profile": str(profile_path),
        **{k: doc[k] for k in ("model", "method", "threads", "sizes", "rounds")},
        "gpu_experts": n_gpu,
        "experts": experts,
        "rows": out,
    }


def read_markdown(doc: dict, read: dict) -> str:
    lines = [
        f"# {doc['model']} {doc['method']}, {doc['threads']} threads, {doc['rounds']} rounds: the candidates over "
        "the cost model's CPU MoE term",
        "",
        f"Host: {doc['host']}. Profile: `{Path(read['profile']).name}` (its GPU and pipeline curves; its CPU MoE "
        f"curves for the \"own term\" column). The round's term: its CPU MoE curves replaced by each round's quick "
        f"curve, paired by round (median ratio and 95% interval). {read['gpu_experts']} of {read['experts']} experts "
        "on the GPU for the candidates read against the term with fewer.",
        "",
        "| candidate | tokens | CPU experts | measured ms | own term ms | over own term | round's term ms "
        "| over round's term |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in read["rows"]:
        c = r.get("over_round_term")
        rt = f"{r['round_term_ms']:.1f}" if "round_term_ms" in r else "-"
        ratio = f"{c['ratio']:.3f} [{c['low']:.3f}-{c['high']:.3f}]" if c else "-"
        lines.append(
            f"| {r['candidate']} | {r['tokens']} | {r['cpu_experts']} | {r['measured_ms']:.1f} | "
            f"{r['own_term_ms']:.1f} | {r['over_own_term']:.3f} | {rt} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="where the rounds' file goes (required unless --read)")
    ap.add_argument("--model", default="mixtral-8x7b:BF16", help="NAME:METHOD")
    ap.add_argument("--threads", type=int, default=11)
    ap.add_argument("--sizes", default="256,768")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--calls", type=int, default=4, help="timed calls per candidate, size and round")
    ap.add_argument("--probe-every", type=int, default=4, help="run probe_cpu_moe in every Nth round (0: never)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--small", action="store_true", help="the CPU variant: small shapes on this host's CPU")
    ap.add_argument(
        "--gpu-experts", type=int, default=0, help="also time the runner with N GPU experts, layers N masked"
    )
    ap.add_argument("--quick-every", type=int, default=0, help="run the quick probe's CPU MoE step every Nth round")
    ap.add_argument("--tag", default="")
    ap.add_argument("--read", help="read a written gap-rounds file against the cost model (with --profile)")
    ap.add_argument("--profile", help="the instance's quick profile, for --read")
    a = ap.parse_args()
    if a.read:
        if not a.profile:
            ap.error("--read needs --profile")
        doc = json.loads(Path(a.read).read_text())
        read = read_against_model(doc, a.profile)
        out = Path(a.out) if a.out else Path(a.read).parent
        stem = Path(a.read).stem.replace("gap-rounds-", "gap-read-")
        (out / f"{stem}.json").write_text(json.dumps(read, indent=1) + "\n")
        (out / f"{stem}.md").write_text(md := read_markdown(doc, read))
        print(md)
        return
    from kttune.probes.inventory import host_line

    if not a.out:
        ap.error("--out is required")
    name, method = a.model.split(":")
    sizes = [int(x) for x in a.sizes.split(",")]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = a.tag or ("small" if a.small else name)
    path = out / f"gap-rounds-{tag}.json"
    doc = {
        "host": host_line(),
        "model": name,
        "method": method,
        "threads": a.threads,
        "sizes": sizes,
        "rounds": 0,
        "calls": a.calls,
        "seed": a.seed,
        "gpu_experts": a.gpu_experts,
        "quick_every": a.quick_every,
    }

    def save(rows: list[dict], quick_curves: list[dict], rounds: int) -> None:
        """The file as it stands after `rounds` rounds (a call cut off at its limit keeps them)."""
        doc.update(rounds=rounds, rows=rows, quick_curves=quick_curves)
        path.write_text(json.dumps(doc, indent=1) + "\n")

    t0 = time.perf_counter()
    rows, quick_curves = diagnose(
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
        gpu_experts=a.gpu_experts,
        quick_every=a.quick_every,
        on_round=save,
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
    doc["summary"] = summary
    save(rows, quick_curves, a.rounds)
    print(f"done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
