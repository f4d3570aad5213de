"""Where kt-kernel switches GEMM kernels: its MoE calls timed on each side of 4E/k tokens.

kt-kernel 0.7.2's AMX-family MoE classes run a forward of `qlen` tokens with a vector-matrix kernel
while `qlen <= 4 * E / k` and with the tiled matrix-matrix kernel above (E the layer's routed experts,
k its top-k; docs/cost-model.md#kt-kernels-two-gemm-kernels). The cost model splits a call's flops
by that rule (`kttune.spec.kt_classes.kt_matmul_above`). This benchmark checks the rule on the machine
it runs on: for each case (a method and a layer shape) it times the real kt-kernel call at lengths
around the switch the rule names, in interleaved rounds (every length once per round, so a drift of
the host falls on all alike), and reports per length the median with its interval
(`kttune.protocol.stats.estimate`), and the paired ratio of each length to the one before it
(`compare`): at the switch, 4E/k -> 4E/k + 1, the ratio leaves the trend of its neighbours; for a
class with one kernel (FP8) it does not. The same class at two E/k shows the switch move with E/k.

    python benchmarks/bench_kt_dispatch.py [--cases box|small] [--threads 11] [--rounds 5]
        [--repeats 3] [--out DIR] [--tag TAG]

Writes kt-dispatch[-TAG].json (every sample) and .md to --out (default: the results folder of
today and this machine, benchmarks/results_layout.py).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from results_layout import results_dir

# (method, hidden, inter, experts, top_k): the GPU box's cases are real models' layers; the small
# ones run in seconds on a 2-core development machine.
CASES = {
    "box": (
        ("RAWINT4", 7168, 2048, 384, 8),  # Kimi-K2: switch at 192
        ("BF16", 2048, 768, 128, 8),  # Qwen3-30B-A3B: switch at 64
        ("BF16", 2048, 768, 64, 8),  # the same experts, half as many: switch at 32
        ("AMXINT8", 2048, 768, 128, 8),  # online-quantised int8 (moe.hpp): switch at 64
        ("AMXINT4", 2048, 768, 128, 8),  # online-quantised int4 (moe.hpp): switch at 64
        ("FP8", 2048, 768, 128, 8),  # one kernel at every length: no switch
        ("FP8_PERCHANNEL", 2048, 768, 128, 8),  # one kernel at every length: no switch
    ),
    "small": (
        ("RAWINT4", 2048, 768, 64, 8),  # switch at 32
        ("BF16", 2048, 768, 64, 8),  # switch at 32
        ("BF16", 2048, 768, 32, 8),  # switch at 16
        ("AMXINT8", 2048, 768, 64, 8),  # switch at 32
        ("AMXINT4", 2048, 768, 64, 8),  # switch at 32
        ("FP8", 2048, 768, 64, 8),  # no switch
        ("FP8_PERCHANNEL", 2048, 768, 64, 8),  # no switch
    ),
}


def lengths_around(above: int) -> list[int]:
    """Lengths on each side of a switch at `above` (the last on the vector kernel) and past it."""
    return sorted({max(2, above // 2), max(2, above * 3 // 4), above, above + 1, above + max(1, above // 4), 2 * above})


def measure_case(case: tuple, threads: int, rounds: int, repeats: int) -> dict:
    """One case's kt-kernel layer timed at the lengths around its switch, interleaved by round."""
    from kttune.spec.kt_classes import kt_matmul_above
    from kttune.kernels.expert_weights import HostExperts
    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.kernels.kt_moe import KtMoeLayer
    from kttune.probes.cpu_moe import _inputs
    from kttune.probes.inventory import collect_cpu
    from kttune.protocol.stats import compare, estimate
    from kttune.spec.moe_shape import MoeLayerShape

    method, h, i, e, k = case
    shape = MoeLayerShape(hidden=h, inter=i, experts=e, top_k=k)
    out: dict = {"method": method, "hidden": h, "inter": i, "experts": e, "top_k": k, "rule_switch_above": 4 * e // k}
    with quiet_stdout(to_stderr=True):
        layer = KtMoeLayer(
            HostExperts.random(method, h, i, e),
            top_k=k,
            threads=threads,
            max_tokens=2 * (4 * e // k),
            isa=collect_cpu().isa,
        )
    try:
        out["kernel"] = layer.kernel_class
        out["switch_above"] = kt_matmul_above(layer.kernel_class, e, k)
        xs = lengths_around(4 * e // k)
        inputs = {n: _inputs(n, shape, 0) for n in xs}
        samples: dict[int, list[float]] = {n: [] for n in xs}
        tags: dict[int, list[int]] = {n: [] for n in xs}
        for n in xs:  # warm-up: each length's first calls
            for _ in range(2):
                layer.forward(*inputs[n])
        for r in range(rounds):
            for n in xs if r % 2 == 0 else reversed(xs):
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    layer.forward(*inputs[n])
                    samples[n].append((time.perf_counter() - t0) * 1e3)
                    tags[n].append(r)
    finally:
        layer.close()
    est = {n: estimate(samples[n], rounds=tags[n]) for n in xs}
    out["points"] = [{"tokens": n, **est[n].to_dict()} for n in xs]
    out["steps"] = [
        {"from": a, "to": b, **compare(est[a], est[b]).to_dict(), "per_token": compare(est[a], est[b]).ratio * a / b}
        for a, b in zip(xs, xs[1:])
    ]
    return out


def markdown(d: dict) -> str:
    lines = [
        "# kt-kernel's switch of GEMM kernels, measured",
        "",
        f"Host: {d['host']}; kt-kernel {d['kt_variant']}; {d['threads']} worker threads; {d['rounds']} interleaved "
        f"rounds of {d['repeats']} calls per length after 2 warm-up calls. Per length: median ms [95% interval of the "
        "mean]; per step: the paired ratio of the longer length's time to the shorter's [interval], and that ratio "
        "per token. The rule (`kt_matmul_above`) puts the switch after 4E/k tokens for the classes that have one.",
        "",
    ]
    for c in d["cases"]:
        sw = c.get("switch_above")
        lines += [
            f"## {c['method']} H{c['hidden']} I{c['inter']} E{c['experts']} top-{c['top_k']}: {c['kernel']}, "
            + (f"switch after {sw} tokens" if sw else "one kernel (no switch)"),
            "",
            "| tokens | median ms [interval] | step | time ratio [interval] | per token |",
            "|---|---|---|---|---|",
        ]
        steps = {s["to"]: s for s in c["steps"]}
        for p in c["points"]:
            s = steps.get(p["tokens"])
            mark = " **(switch)**" if s and sw and s["from"] == sw else ""
            step = f"{s['from']} -> {s['to']}{mark}" if s else ""
            ratio = f"{s['ratio']:.3f} [{s['low']:.3f}-{s['high']:.3f}]" if s else ""
            per = f"{s['per_token']:.3f}" if s else ""
            lines.append(
                f"| {p['tokens']} | {p['median']:.2f} [{p['low']:.2f}-{p['high']:.2f}] | {step} | {ratio} | {per} |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    from kttune.kernels.kt_ext import load_kt_kernel
    from kttune.probes.inventory import host_line

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", choices=sorted(CASES), default="small")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", help="folder for the results (default: benchmarks/results/<today>-<this machine>/)")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    kt = load_kt_kernel()
    if kt is None:
        raise SystemExit("bench_kt_dispatch: kt-kernel is not importable (bash scripts/setup.sh installs it)")
    doc = {
        "host": host_line(),
        "kt_variant": kt.variant,
        "threads": a.threads,
        "rounds": a.rounds,
        "repeats": a.repeats,
        "cases": [],
    }
    for case in CASES[a.cases]:
        t0 = time.perf_counter()
        doc["cases"].append(measure_case(case, a.threads, a.rounds, a.repeats))
        print(f"{case}: {time.perf_counter() - t0:.0f} s", flush=True)
    out = Path(a.out) if a.out else results_dir()
    out.mkdir(parents=True, exist_ok=True)
    name = "kt-dispatch" + (f"-{a.tag}" if a.tag else "")
    (out / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / f"{name}.md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
