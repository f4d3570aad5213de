"""The chunked-against-layered trade-off, simulated for the catalog's models on a hardware profile.

    python benchmarks/report_layered_tradeoff.py [--profile h200-pcie5-xeon-amx-16c] [--models ...]
        [--out PREFIX]   # default: benchmarks/results/<today>-computed/layered-tradeoff

For each model (its default KT method) and the paper's two workload presets (arxiv-summarize,
sharegpt-chat) it simulates
token-chunked prefill with KT's path switch at chunk 2048 and 8192, pure hybrid, and Layered
Prefill (large chunk 8192, the paper's group rule). Flags: threshold = the cost model's crossover
(where layerwise stops being slower than hybrid, what kttune picks), 0 GPU experts, 32 running
requests, a 131072-token KV pool (VRAM is not checked here; `kttune explain` does that).

SLOs scale with the machine, in the paper's way: TBT limit = 5 x one decode step of 32 requests at
4,096 tokens (the paper's rule); TTFT limit = 5 x the idle-server TTFT of the preset's mean prompt
at chunk 8192 (the paper's 10 s is about that multiple of its H100 prefill time). Capacity = the
highest Poisson rate with >= 90% of requests meeting both, over 300 requests per rate; the
distributions are at half the chunk-8192 capacity (or of the best schedule's when that is 0),
over 1000 requests. Writes <out>.md (tables) and <out>.json: {"profile", "machine", "wall_s",
"reports": [SimulationReport.to_dict() (schema in kttune.sim) of one schedule each, with
"schedule_settings"[0]["label"] naming the column and "capacity_tight_tbt" the capacity under the
tight TBT limit]}; per-request samples (for TTFT / gap distributions) for --samples-for models.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

from kttune.cost.prefill import crossover_tokens, prefill_time_ms
from kttune.errors import UserError
from kttune.sim.engine import Schedule
from kttune.app.simulation import simulation_inputs
from kttune.sim.metrics import Slo
from kttune.sim.simulate import SimulationReport, capacity, paper_rule_tbt_slo_ms, simulate_one
from kttune.sim.costs import IterationCosts
from kttune.search.workload import load_workload
from kttune.sim.workload import mix_statistics, poisson_requests, rescale_arrivals
from kttune.spec.catalog import catalog_names
from results_layout import COMPUTED, results_dir

SCHEDULES = (
    ("chunked-2048", Schedule("chunked"), 2048),
    ("chunked-8192", Schedule("chunked"), 8192),
    ("hybrid-8192", Schedule("hybrid"), 8192),
    ("layered", Schedule("layered"), 8192),
)
GB = 1e9
PRESETS = ("arxiv-summarize", "sharegpt-chat")  # the paper's arXiv and ShareGPT sets (log-normal presets)
TIGHT = 2  # the tight TBT limit: 2 x (instead of 5 x) the 32-request decode step


def one(model: str, preset: str, profile: str, n_cap: int, n_dist: int, samples: bool) -> dict:
    inp = simulation_inputs(
        model,
        profile,
        workload=preset,
        rate=1.0,
        requests=n_dist,
        max_total_tokens=131072,
        chunk=8192,
        threshold=0,
        this_machine=None,
    )
    comp = inp.comp
    cross = crossover_tokens(comp, replace(inp.cfg, chunked_prefill_size=65536)) if comp.method.layerwise else None
    thr = cross or 0
    mix = load_workload(preset).mix
    mean_prompt = int(mix_statistics(mix)["prompt_tokens"]["mean"])
    base_cfg = replace(inp.cfg, gpu_prefill_token_threshold=min(thr, 8192))
    slo = Slo(
        ttft_s=5 * prefill_time_ms(comp, base_cfg, mean_prompt) / 1e3,
        tbt_ms=paper_rule_tbt_slo_ms(IterationCosts(comp, base_cfg)),
    )
    tight = Slo(ttft_s=slo.ttft_s, tbt_ms=slo.tbt_ms * TIGHT / 5)
    cap_reqs = poisson_requests(mix, 1.0, n_cap, seed=1)
    caps, caps_tight, cfgs = {}, {}, {}
    for label, sched, chunk in SCHEDULES:
        cfg = replace(base_cfg, chunked_prefill_size=chunk, gpu_prefill_token_threshold=min(thr, chunk))
        cfgs[label] = cfg
        caps[label] = capacity(comp, cfg, cap_reqs, sched, slo)
        caps_tight[label] = capacity(comp, cfg, cap_reqs, sched, tight)
    ref = caps["chunked-8192"].max_rate_per_s or max(c.max_rate_per_s for c in caps.values())
    rate = 0.5 * ref if ref > 0 else 0.5e3 / prefill_time_ms(comp, base_cfg, mean_prompt)
    dist_reqs = rescale_arrivals(poisson_requests(mix, 1.0, n_dist, seed=2), rate)
    results = {
        label: simulate_one(comp, cfgs[label], dist_reqs, sched, slo, samples=samples) for label, sched, _ in SCHEDULES
    }
    reports = {
        label: SimulationReport(
            model=comp.model.name,
            method=comp.method.name,
            profile=profile,
            flags=cfgs[label].to_dict(),
            workload={
                "name": preset,
                "source": "preset",
                "mix": mix.to_dict(),
                "statistics": mix_statistics(mix),
                "rate_per_s": rate,
                "requests": n_dist,
                "seed": 2,
            },
            slo=slo,
            router_skew=0.0,
            schedules=(results[label],),
            capacity=(caps[label],),
            schedule_settings=(dict(sched.to_dict(), label=label),),
            notes=tuple(dict.fromkeys(comp.notes)),
        ).to_dict()
        for label, sched, _ in SCHEDULES
    }
    for label in reports:
        reports[label]["capacity_tight_tbt"] = caps_tight[label].to_dict() | {"slo": tight.to_dict()}
    return {
        "model": model,
        "method": comp.method.name,
        "preset": preset,
        "threshold": thr,
        "slo": slo.to_dict(),
        "tight": tight.to_dict(),
        "rate_per_s": rate,
        "results": results,
        "caps": caps,
        "caps_tight": caps_tight,
        "reports": reports,
    }


def fmt_s(v: float) -> str:
    return "-" if v != v else (f"{v:.1f}" if v < 1000 else f"{v:,.0f}")


def fmt_ms(v: float) -> str:
    return "-" if v != v else f"{v:,.0f}"


def ratio(a: float, b: float) -> str:
    if not (a == a and b == b) or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="h200-pcie5-xeon-amx-16c")
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--capacity-requests", type=int, default=300)
    ap.add_argument(
        "--out", help="path prefix of the .md and .json (default: benchmarks/results/<today>-computed/layered-tradeoff)"
    )
    ap.add_argument(
        "--samples-for", nargs="*", default=["qwen3-30b-a3b"], help="models whose per-request samples go in the JSON"
    )
    a = ap.parse_args()
    a.out = a.out or str(results_dir(COMPUTED) / "layered-tradeoff")
    models = a.models or catalog_names()
    t0 = time.perf_counter()
    rows, skipped, reports = [], [], []
    for m in models:
        for preset in PRESETS:
            try:
                r = one(m, preset, a.profile, a.capacity_requests, a.requests, m in a.samples_for)
            except UserError as e:
                skipped.append(f"{m} ({preset}): {e.line()}")
                continue
            rows.append(r)
            reports += list(r["reports"].values())
            print(f"{m:<30} {preset:<9} done", flush=True)
    wall = time.perf_counter() - t0
    from kttune.probes.inventory import host_line

    where = host_line()
    lines = [
        f"# Chunked against Layered Prefill, simulated on `{a.profile}`",
        "",
        f"Generated by `python benchmarks/report_layered_tradeoff.py --profile {a.profile}` ({wall:.0f} s on {where}). "
        "Every number is a simulation over the cost model (`kttune simulate`), not a measurement of a server.",
        "",
        "Flags: threshold = the cost model's crossover (the `thr` column), 0 GPU experts, 32 running requests, 131072-token KV pool. "
        "SLOs: TBT <= 5 x a 32-request decode step at 4K context (the paper's rule), TTFT <= 5 x the idle-server TTFT of the "
        "preset's mean prompt. Capacity = highest rate with >= 90% of requests meeting both (300 requests per rate). "
        "The tight TBT limit is 2 x (not 5 x) that decode step. "
        "Gap, TTFT and traffic columns are at half the chunk-8192 capacity under the rule SLO (1000 requests); "
        "the longest gap is per request (the quantity the TBT SLO tests), its p99 over requests. "
        "`layered / c8192` compares Layered Prefill (large chunk 8192, G = ceil(T/512)) with token-chunked prefill at chunk 8192: "
        "below 1 means layered is lower.",
        "",
    ]
    lines += ["## Direction and size", ""]
    for preset in PRESETS:
        rs = [x for x in rows if x["preset"] == preset]
        if not rs:
            continue

        def span(f) -> str:
            v = sorted(x for x in (f(r) for r in rs) if x == x)
            return f"{v[len(v) // 2]:.2f}x (range {v[0]:.2f}-{v[-1]:.2f})" if v else "-"

        def rr(a: float, b: float) -> float:
            return a / b if b else float("nan")

        lines.append(
            f"- **{preset}** ({len(rs)} models), layered against chunk 8192, median over models: longest gap p99 "
            f"{span(lambda r: rr(r['results']['layered'].max_tbt_ms.p99, r['results']['chunked-8192'].max_tbt_ms.p99))}; "
            f"TTFT p50 {span(lambda r: rr(r['results']['layered'].ttft_s.p50, r['results']['chunked-8192'].ttft_s.p50))}; "
            f"PCIe per prompt {span(lambda r: rr(r['results']['layered'].traffic_prefill_per_prompt.pcie_bytes, r['results']['chunked-8192'].traffic_prefill_per_prompt.pcie_bytes))} "
            f"(chunk 2048: {span(lambda r: rr(r['results']['chunked-2048'].traffic_prefill_per_prompt.pcie_bytes, r['results']['chunked-8192'].traffic_prefill_per_prompt.pcie_bytes))}); "
            f"capacity under the rule SLO {span(lambda r: rr(r['caps']['layered'].max_rate_per_s, r['caps']['chunked-8192'].max_rate_per_s))}, "
            f"under the tight TBT limit {span(lambda r: rr(r['caps_tight']['layered'].max_rate_per_s, r['caps_tight']['chunked-8192'].max_rate_per_s))}."
        )
    lines += [
        "",
        "Why, in KT terms: a layerwise forward streams every MoE layer over PCIe whatever the chunk, so a smaller chunk "
        "does not shorten the stall (chunk 2048 stalls about as long as 8192) but loads every layer more often "
        "(the chunk 2048 traffic above); "
        "Layered Prefill loads each layer once per 8192 tokens like chunk 8192 and stalls decode for one group only. "
        "Its price is that each of the G iterations of a prompt also runs a full decode step, which on a CPU-decoding "
        "server is long, so TTFT grows; it wins capacity when the TBT limit is below the layerwise forward time, "
        "and loses a little when the limit is loose.",
        "",
    ]
    for preset in PRESETS:
        st = mix_statistics(load_workload(preset).mix)
        lines += [
            f"## {preset}: {load_workload(preset).description}",
            "",
            f"Sampled statistics: prompt mean {st['prompt_tokens']['mean']:,.0f}, p50 {st['prompt_tokens']['p50']:,}, "
            f"p90 {st['prompt_tokens']['p90']:,} tokens; output mean {st['output_tokens']['mean']:,.0f}, p90 {st['output_tokens']['p90']:,}.",
            "",
            "| model | method | thr | SLO: TTFT s / TBT ms (rule; tight) | capacity req/s, rule SLO: c2048 / c8192 / hybrid / layered "
            "| capacity req/s, tight TBT: c2048 / c8192 / hybrid / layered | longest gap p99 ms: c2048 / c8192 / layered "
            "| TTFT p50 s: c2048 / c8192 / layered | PCIe GB per prompt: c2048 / c8192 / layered "
            "| layered / c8192: capacity rule, tight; longest gap; PCIe |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        keys = ("chunked-2048", "chunked-8192", "hybrid-8192", "layered")
        three = ("chunked-2048", "chunked-8192", "layered")
        for r in (x for x in rows if x["preset"] == preset):
            res, caps, capt = r["results"], r["caps"], r["caps_tight"]
            c8, ly = res["chunked-8192"], res["layered"]
            lines.append(
                f"| {r['model']} | {r['method']} | {r['threshold']} | {r['slo']['ttft_s']:.1f} / {r['slo']['tbt_ms']:,.0f}; {r['tight']['tbt_ms']:,.0f} | "
                + " / ".join(f"{caps[k].max_rate_per_s:.3g}" for k in keys)
                + " | "
                + " / ".join(f"{capt[k].max_rate_per_s:.3g}" for k in keys)
                + " | "
                + " / ".join(fmt_ms(res[k].max_tbt_ms.p99) for k in three)
                + " | "
                + " / ".join(fmt_s(res[k].ttft_s.p50) for k in three)
                + " | "
                + " / ".join(f"{res[k].traffic_prefill_per_prompt.pcie_bytes / GB:,.0f}" for k in three)
                + " | "
                + f"{ratio(caps['layered'].max_rate_per_s, caps['chunked-8192'].max_rate_per_s)}, "
                f"{ratio(capt['layered'].max_rate_per_s, capt['chunked-8192'].max_rate_per_s)}; "
                f"{ratio(ly.max_tbt_ms.p99, c8.max_tbt_ms.p99)}; "
                f"{ratio(ly.traffic_prefill_per_prompt.pcie_bytes, c8.traffic_prefill_per_prompt.pcie_bytes)} |"
            )
        lines.append("")
    if skipped:
        lines += ["## Not simulated", ""] + [f"- {s}" for s in skipped] + [""]
    open(a.out + ".md", "w").write("\n".join(lines))
    with open(a.out + ".json", "w") as f:
        json.dump({"profile": a.profile, "machine": where, "wall_s": wall, "reports": reports}, f)
    print(f"wrote {a.out}.md and {a.out}.json in {wall:.0f} s")


if __name__ == "__main__":
    main()
