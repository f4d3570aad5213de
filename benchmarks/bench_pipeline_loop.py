"""A quick probe's pipeline curve timed in sglang-kt's loop, against the one stream configuration it
timed alone before 2026-12-05 (docs/probe.md#the-pipeline).

A probe without a model streams three representative layers (Qwen3-30B-A3B BF16, DeepSeek-V3 FP8,
Kimi-K2 RAWINT4); every other model's layerwise load is read from its method's curve by the bytes
streamed. A server runs sglang-kt 0.7.2's loop (host-driven, two slots, one expert a step); until
2026-12-05 the quick probe timed only `slots=2,group=2,driver=stream`, and the cost model took the
loop to cost the same. Two held-out checks:

1. Probes of seven models on one H200 instance (2026-12-03, GPU-5697184c), each of which streamed
   its own whole layer in every configuration: each layer's loop predicted from the representative
   layer of its method in the loop and in the stream configuration alone (`kttune.runner.pipeline_configs
   .in_config`, the full point's ratio applied to the curve). Probe against probe, no runner.
2. The path runner's forced sweeps of nine models on an H100 instance (2026-12-05, h100f) whose quick
   probe timed the loop: the layerwise forwards predicted from that profile as probed and with its
   curves put back in the stream configuration alone. Raw cost model, calibration left out.

    python3 benchmarks/bench_pipeline_loop.py --out benchmarks/results/2026-12-05-computed/pipeline-loop
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace
from pathlib import Path

from bench_quick_transfer import predict
from results_layout import write_result

from kttune.cost.components import SGLANG_KT_PIPELINE, Components
from kttune.runner.pipeline_configs import in_config
from kttune.hw.profile import load_profile
from kttune.spec.loader import load_model

RESULTS = Path("benchmarks/results")
ONE_INSTANCE = RESULTS / "2026-12-03-h200-pcie5-xeon-amx-16c"
H100 = RESULTS / "2026-12-05-h100-pcie5-xeon-amx-16c"
QUICK_BEFORE = "slots=2,group=2,driver=stream"
THREADS = 11
# (representative layer the quick probe streams, held-out model, method)
TARGETS = [
    ("deepseek-v3", "minimax-m2.1", "FP8"),
    ("deepseek-v3", "qwen3-235b-a22b-fp8", "FP8"),
    ("deepseek-v3", "glm-4.7", "FP8_PERCHANNEL"),
    ("qwen3-30b-a3b", "glm-4.5-air", "BF16"),
]


def _probe(name: str):
    return replace(load_profile(ONE_INSTANCE / f"probe-{name}-one-instance.profile.json"), calibration=())


def _full(profile):
    (c,) = [c for c in profile.curves if c.kind == "pipeline" and c.params.get("threads") == THREADS]
    return c.points[-1]


def probe_against_probe() -> list[dict]:
    rows = []
    for rep, name, method in TARGETS:
        own = _full(_probe(name))
        measured = own.extra["configs"][SGLANG_KT_PIPELINE]["layer_ms"]
        n = own.extra["experts_streamed"]
        spec = load_model(name, method)
        row = {"representative": rep, "model": name, "method": method, "experts": n, "measured_ms": measured}
        for key, prof in (
            ("loop", in_config(_probe(rep), SGLANG_KT_PIPELINE)),
            ("stream_alone", in_config(_probe(rep), QUICK_BEFORE, keep_configs=False)),
        ):
            pred = Components(prof, spec, method, 1).pipeline_layer_ms(n, THREADS)
            row[key] = {"predicted_ms": pred, "error": pred / measured - 1}
        rows.append(row)
    return rows


def runner_sweeps(tag: str = "h100f") -> list[dict]:
    quick = replace(load_profile(H100 / f"quick-transfer-{tag}.profile.json"), calibration=())
    variants = {"loop": quick, "stream_alone": in_config(quick, QUICK_BEFORE, keep_configs=False)}
    rows = []
    for sweep in sorted(H100.glob(f"quick-transfer-crossover-*-{tag}.json")):
        row = {"sweep": sweep.name}
        for key, prof in variants.items():
            r = predict(str(sweep), prof)
            row["model"] = r["model"]
            row[key] = {"layerwise": r["layerwise"], "crossover": r["crossover"]}
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    pp, rs = probe_against_probe(), runner_sweeps()
    keys = ("loop", "stream_alone")
    pp_mean = {k: statistics.mean(abs(r[k]["error"]) for r in pp) for k in keys}
    rs_mean = {k: statistics.mean(r[k]["layerwise"]["mape"] for r in rs) for k in keys}
    rs_cross = {k: sum(c["agrees"] for r in rs for c in r[k]["crossover"]) for k in keys}
    n_cross = sum(len(r["loop"]["crossover"]) for r in rs)
    lines = [
        "# The quick probe's pipeline curve: sglang-kt's loop, or the stream configuration alone",
        "",
        "benchmarks/bench_pipeline_loop.py. A layer the probe did not stream is read from its method's "
        "representative curve by bytes; a server runs sglang-kt 0.7.2's loop (`slots=2,group=1`).",
        "",
        f"## 1. Probe against probe: one H200 instance (GPU-5697184c, 2026-12-03), {THREADS} threads",
        "",
        "Each model's own probe streamed its whole layer in every configuration; its loop is the measurement. "
        "Predicted from the representative layer's curve in the loop, and in the stream configuration alone "
        "(what the quick probe timed before).",
        "",
        "| model | method | from | experts | its loop, ms | from the loop | from the stream config alone |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in pp:
        lines.append(
            f"| {r['model']} | {r['method']} | {r['representative']} | {r['experts']} | {r['measured_ms']:.1f} | "
            f"{r['loop']['predicted_ms']:.1f} ({r['loop']['error']:+.0%}) | "
            f"{r['stream_alone']['predicted_ms']:.1f} ({r['stream_alone']['error']:+.0%}) |"
        )
    lines += [
        f"| **mean abs** | | | | | {pp_mean['loop']:.0%} | {pp_mean['stream_alone']:.0%} |",
        "",
        "## 2. The path runner's sweeps: H100 instance h100f (2026-12-05, GPU-602350d0), 11 threads",
        "",
        "Layerwise forwards (per decoder-layer forward, mean absolute and signed error) predicted from the "
        "instance's own quick probe, which timed the loop, and from the same probe with its curves put back "
        "in the stream configuration alone; crossovers judged by kttune.protocol.check_crossing.",
        "",
        "| model | from the loop | from the stream config alone |",
        "|---|---|---|",
    ]
    for r in rs:
        cells = [
            f"{r[k]['layerwise']['mape']:.0%} ({r[k]['layerwise']['signed']:+.0%})"
            + "".join(" crossover agrees" if c["agrees"] else " crossover off" for c in r[k]["crossover"])
            for k in keys
        ]
        lines.append(f"| {r['model']} | {cells[0]} | {cells[1]} |")
    lines += [
        f"| **mean** | {rs_mean['loop']:.0%}, crossovers {rs_cross['loop']} of {n_cross} | "
        f"{rs_mean['stream_alone']:.0%}, crossovers {rs_cross['stream_alone']} of {n_cross} |",
        "",
    ]
    doc = {
        "probe_against_probe": pp,
        "runner_sweeps": rs,
        "summary": {
            "probe_against_probe_mean_abs": pp_mean,
            "runner_layerwise_mean": rs_mean,
            "runner_crossovers_agree": rs_cross,
            "runner_crossovers": n_cross,
        },
    }
    write_result(args.out, doc, "\n".join(lines))


if __name__ == "__main__":
    main()
