"""`kttune tune` judged (issue 21): per model, tune's pick against a measured grid, tune's wall time,
the coefficient of variation of one configuration measured at 5 positions of a run, tune's
verification table and output check; and the memory of one runner session across 50 configurations.

Per model (`--models name:METHOD:VRAM[:HOST_RAM]`):

1. tune: `kttune.app.tuning.run_tune` as `kttune tune` runs it (fresh state, default plan), timed; its
   runner session is kept for what follows (so the grid costs no second build);
2. grid: chunks x thresholds x GPU experts {0, the most that fit beside them} x two thread counts
   (>= 24 configurations), every point measured `--grid-repeats` (3) times in interleaved rounds at
   tune's measured prompt lengths, through the measurement protocol (kttune.protocol);
3. cv: tune's pick measured at 5 positions of the run: before the grid, after each grid round and
   after the head-to-head, each position the median of 3 samples back to back (the protocol's
   measurement of a configuration); the coefficient of variation of those (the claim: <= 3%), and
   of the single samples beside it; at each position tune's strongest rival (the fastest other
   configuration of its verification) is measured in turn with the pick, and the CV of their ratio
   says how much a decision moves where the absolute figure drifts;
4. head-to-head: tune's pick and the grid optimum, 5 interleaved rounds: pick / optimum with its
   interval (the claim: the pick within 3% of the optimum's median, or inside its interval).

`memory`: benchmarks/bench_runner_memory.py's run (one session in a worker, `--memory-configs`
configurations) for each of `--memory-models`.

    # the GPU box, two commands (each well under 9 minutes; see docs/tune.md#benchmark):
    python benchmarks/bench_tune.py --out $OUT/a --models qwen3-30b-a3b:BF16:32G,qwen3-30b-a3b-fp8:FP8:32G \
        --parts tune,grid,cv --deadline-s 480
    python benchmarks/bench_tune.py --out $OUT/b --models glm-4.5-air:BF16:80G:512G --parts tune,grid,cv,memory \
        --memory-models glm-4.5-air:BF16,kimi-k2-thinking:RAWINT4 --deadline-s 480
    # anywhere (the CPU variant, small shapes, a tiny workload):
    python benchmarks/bench_tune.py --small --out /tmp/bench-tune

Writes bench_tune.json and bench_tune.md to --out (after every part), tune's own report under
tune-<model>/, the memory run under memory/.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SMALL_WORKLOAD = {"prompt_tokens": [300, 700, 1500], "weights": [1, 1, 1], "output_tokens": 16, "concurrency": 1}
CV_POSITIONS = 5
CV_REPEATS = 3  # samples per position, back to back after its warm-up: the protocol's measurement is their median
CV_TARGET = 0.03
WITHIN = 0.03
# rough seconds of each part per model on the H200 box, for the deadline (what is left must fit)
PART_S = {"tune": 120, "grid": 100, "memory": 120}


def _t0():
    t = time.perf_counter()
    return lambda: time.perf_counter() - t


def say(clock, msg: str) -> None:
    print(f"[{clock():6.1f}s] {msg}", flush=True)


def grid_configs(res, chunks, thresholds, threads) -> list:
    """The grid at tune's KV pool: every chunk x threshold (<= chunk) x thread count, each with 0 and
    the most GPU experts that fit beside them (the calibrated model's VRAM rule)."""
    from kttune.search.evaluate import evaluate

    space, comp, base = res.space, res.components, res.request
    kv = space.params_of(res.pick)["kv_k"]

    def fits(c, t, n, th):
        return evaluate(comp, space.config(c, t, n, kv, th), base.workload, base.budget).feasible

    out = []
    for c, t, th in itertools.product(chunks, thresholds, threads):
        if t > c or not fits(c, t, 0, th):
            continue
        lo, hi = 0, space.gpu_experts_max
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(c, t, mid, th) else (lo, mid - 1)
        for n in sorted({0, lo}):
            out.append(space.config(c, t, n, kv, th))
    return out


def label(c) -> str:
    return f"{c.chunked_prefill_size}/{c.gpu_prefill_token_threshold}/{c.num_gpu_experts}/{c.cpuinfer_threads}"


def judge_model(item: str, a, out: Path, clock, parts: set, deadline) -> dict:
    from kttune.emit import tune_report
    from kttune.protocol import Protocol, compare, estimate, measure_rounds
    from kttune.search.measured import prefill_tok_s
    from kttune.app.tuning import TuneRequest, run_tune
    from kttune.units import parse_size_bytes

    name, method, vram, *rest = item.split(":")
    host = rest[0] if rest else None
    wl = str(out / "workload.json") if a.small else a.workload
    req = TuneRequest(
        model=name,
        method=method,
        vram_bytes=parse_size_bytes(vram),
        workload=wl,
        host_ram_bytes=parse_size_bytes(host, "--host-ram") if host else None,
        evaluator="runner-cpu" if a.small else "runner",
        profile=a.profile,
        seed=a.seed,
        chunks=(512, 768, 1024) if a.small else (),
        fresh=True,
        state_path=str(out / f"tune-{name}" / "state.json"),
        out_dir=str(out / f"tune-{name}"),
    )
    doc: dict = {"model": name, "method": method, "vram": vram, "host_ram": host}
    say(clock, f"{name} {method} {vram}: kttune tune")
    t = time.perf_counter()
    res = run_tune(
        req,
        on_event=lambda e: (
            say(clock, f"  tune {e.phase}: {e.message}")
            if e.message and e.phase in ("probe", "runner", "search", "check")
            else None
        ),
        keep_runner=True,
    )
    tune_s = time.perf_counter() - t
    tdoc = res.to_dict()
    tune_report.write_report(tdoc, out / f"tune-{name}")
    doc["tune"] = {
        "wall_s": round(tune_s, 1),
        "pick": label(res.pick),
        "decision": res.decision,
        "phases_s": res.phases_s,
        "verification": tdoc["verification"],
        "gains": tdoc["gains"],
        "output_check": tdoc["output_check"],
        "crossover": tdoc["crossover"].get("measured"),
        "probe": tdoc["probe"],
        "notes": tdoc["notes"],
        "samples": res.protocol.get("samples_this_run"),
    }
    say(clock, f"  tune: {tune_s:.0f} s, pick {label(res.pick)}: {res.decision}")
    ev = res.runner
    lengths, weights = res.lengths, res.weights

    def tok_s(cfg, r=0):
        ms = ev.measure(cfg, list(lengths))
        return prefill_tok_s(ms, lengths, weights) if set(ms) == set(lengths) else None

    try:
        cv_samples: list[float] = []  # the protocol's measurement at each position (median of CV_REPEATS)
        cv_singles: list[list[float]] = []  # every sample, by position
        # tune's strongest rival (the fastest other configuration of its verification), measured in
        # turn with the pick at each position: what a decision rests on is their ratio
        rival = rival_of(res)
        cv_ratios: list[float] = []

        def cv_point(where: str) -> None:
            if "cv" in parts:
                vs, rs = [], []
                for _ in range(CV_REPEATS):
                    v = tok_s(res.pick)
                    if v is not None:
                        vs.append(v)
                    if rival is not None:
                        r = tok_s(rival)
                        if r is not None:
                            rs.append(r)
                if vs:
                    cv_samples.append(statistics.median(vs))
                    cv_singles.append(vs)
                if vs and rs:
                    cv_ratios.append(statistics.median(vs) / statistics.median(rs))
                say(
                    clock,
                    f"  cv position {len(cv_samples)} ({where}): median {cv_samples[-1]:.0f} tok/s of "
                    + ", ".join(f"{v:.0f}" for v in vs)
                    + (f"; pick / rival {cv_ratios[-1]:.3f}" if vs and rs else "")
                    if vs
                    else f"  cv position ({where}): not measurable",
                )

        if "grid" in parts and deadline() > PART_S["grid"] * (0.1 if a.small else 1):
            sp = res.space
            th = sorted(ev.thread_map) if ev.thread_map else list(ev.spec.threads)
            threads = sorted(set(th))[-2:]
            chunks = [int(x) for x in (a.grid_chunks or ("512,768,1024" if a.small else "8192,16384")).split(",")]
            thresholds = [
                int(x) for x in (a.grid_thresholds or ("0,512,1024" if a.small else "0,1024,4096")).split(",")
            ]
            chunks = [c for c in chunks if c in sp.chunks] or list(sp.chunks[-2:])
            thresholds = [t for t in thresholds if t in sp.thresholds] or list(sp.thresholds[:3])
            configs = grid_configs(res, chunks, thresholds, threads)
            say(
                clock,
                f"  grid: {len(configs)} configurations x {a.grid_repeats} rounds (chunks {chunks}, thresholds "
                f"{thresholds}, threads {threads})",
            )
            protocol = Protocol(repeats=a.grid_repeats, seed=a.seed)
            cv_point("before the grid")
            known: dict = {}
            t = time.perf_counter()
            grid = None
            for r in range(a.grid_repeats):
                grid = measure_rounds(configs, lambda c, rr: tok_s(c), protocol, known=known, rounds=r + 1)
                known = grid.samples.values
                say(clock, f"  grid round {r + 1}: {time.perf_counter() - t:.0f} s")
                cv_point(f"after grid round {r + 1}")
            grid_s = time.perf_counter() - t
            est = grid.estimates
            opt = max(est, key=lambda c: est[c].median) if est else None
            doc["grid"] = {
                "configurations": len(configs),
                "measured": len(est),
                "rounds": a.grid_repeats,
                "wall_s": round(grid_s, 1),
                "chunks": chunks,
                "thresholds": thresholds,
                "threads": threads,
                "unmeasurable": {label(c): r for c, r in grid.samples.unmeasurable.items()},
                "points": [
                    {"config": label(c), "tok_s": e.to_dict()}
                    for c, e in sorted(est.items(), key=lambda kv: -kv[1].median)
                ],
                "optimum": label(opt) if opt else None,
            }
            if opt is not None:
                h2h = measure_rounds(
                    [res.pick, opt] if opt != res.pick else [res.pick],
                    lambda c, rr: tok_s(c),
                    Protocol(repeats=5, seed=a.seed + 1),
                )
                pe, oe = h2h.estimates.get(res.pick), h2h.estimates.get(opt)
                cmp = compare(oe, pe) if pe is not None and oe is not None and opt != res.pick else None
                ratio = cmp.ratio if cmp else 1.0
                within = bool(
                    pe is not None
                    and oe is not None
                    and (pe.median >= (1 - WITHIN) * oe.median or oe.contains(pe.median))
                )
                doc["head_to_head"] = {
                    "pick": label(res.pick),
                    "optimum": label(opt),
                    "pick_tok_s": pe.to_dict() if pe else None,
                    "optimum_tok_s": oe.to_dict() if oe else None,
                    "pick_over_optimum": cmp.to_dict()
                    if cmp
                    else {"ratio": 1.0, "note": "the pick is the grid optimum"},
                    "pick_in_grid": res.pick in est,
                    "within_3pct_or_inside_interval": within,
                }
                say(
                    clock,
                    f"  head-to-head: pick {label(res.pick)} / optimum {label(opt)} = {ratio:.3f}"
                    + (f" [{cmp.low:.3f}-{cmp.high:.3f}]" if cmp else "")
                    + f": {'yes' if within else 'NO'}",
                )
                cv_point("after the head-to-head")
        elif "grid" in parts:
            doc["grid"] = {"skipped": f"deadline: {deadline():.0f} s left"}
        if "cv" in parts and cv_samples:
            while len(cv_samples) < CV_POSITIONS:
                cv_point("at the end")
            e = estimate(cv_samples)
            singles = [v for vs in cv_singles for v in vs]
            doc["cv"] = {
                "config": label(res.pick),
                "positions": len(cv_samples),
                "repeats_per_position": CV_REPEATS,
                "tok_s": e.to_dict(),
                "cv": _cv(cv_samples),
                "cv_single_samples": _cv(singles),
                "samples_by_position": cv_singles,
                "target": CV_TARGET,
                "met": _cv(cv_samples) <= CV_TARGET,
                "rival": label(rival) if rival is not None else None,
                "pick_over_rival_by_position": [round(x, 4) for x in cv_ratios],
                "cv_of_ratio": _cv(cv_ratios) if len(cv_ratios) > 1 else None,
            }
            say(
                clock,
                f"  cv over {len(cv_samples)} positions: {100 * _cv(cv_samples):.1f}% (the median of {CV_REPEATS} "
                f"at each); single samples {100 * _cv(singles):.1f}%"
                + (
                    f"; pick / rival {label(rival)} at the same positions: CV {100 * _cv(cv_ratios):.1f}%"
                    if len(cv_ratios) > 1
                    else ""
                ),
            )
        doc["runner"] = ev.info().get("stats", {})
        doc["memory_at_end"] = ev.memory()
    finally:
        ev.close()
    return doc


def rival_of(res):
    """The fastest configuration of tune's verification other than the pick (its closest competitor,
    runner-up or baseline), None when nothing else was measured."""
    rows = [r for r in res.rows if r.cfg != res.pick and r.estimate is not None and r.estimate.n >= 1]
    return max(rows, key=lambda r: r.estimate.median).cfg if rows else None


def _cv(xs) -> float:
    m = sum(xs) / len(xs)
    return (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 / m if len(xs) > 1 and m else 0.0


def markdown(doc: dict) -> str:
    lines = [
        f"# kttune tune judged ({doc['machine']})",
        "",
        f"Command: `{doc['command']}`; {doc['wall_s']:.0f} s.",
        "",
        "| model | tune wall s | pick | grid (configs x rounds) | grid optimum | pick / optimum [interval] | within 3% or inside | "
        "CV at 5 positions | output check |",
        "|---|---:|---|---|---|---|---|---:|---|",
    ]
    for m in doc["models"]:
        if "error" in m:
            lines.append(f"| {m['model']} | error: {m['error']} | | | | | | | |")
            continue
        t, g, h, cv = m.get("tune", {}), m.get("grid", {}), m.get("head_to_head", {}), m.get("cv", {})
        r = h.get("pick_over_optimum") or {}
        ratio = (
            (f"{r['ratio']:.3f} [{r['low']:.3f}-{r['high']:.3f}]" if "low" in r else f"{r.get('ratio', 0):.3f}")
            if r
            else "-"
        )
        chk = t.get("output_check") or {}
        ratio_cv = f"; pick / rival {100 * cv['cv_of_ratio']:.1f}%" if cv and cv.get("cv_of_ratio") is not None else ""
        cv_text = (
            f"{100 * cv['cv']:.1f}% (single samples {100 * cv['cv_single_samples']:.1f}%{ratio_cv})"
            if cv and "cv_single_samples" in cv
            else f"{100 * cv['cv_all_samples']:.1f}% (single samples)"
            if cv
            else "-"
        )
        within = "yes" if h.get("within_3pct_or_inside_interval") else ("NO" if h else "-")
        check = (
            f"{'agree' if chk.get('agree') else 'DISAGREE'} ({100 * chk.get('moe_rel_diff', 0):.2f}%)"
            if chk.get("checked")
            else chk.get("reason", "-")
        )
        lines.append(
            f"| {m['model']} {m['method']} {m['vram']} | {t.get('wall_s', '-')} | {t.get('pick', '-')} | "
            f"{g.get('measured', '-')} x {g.get('rounds', '-')} | {g.get('optimum', '-')} | {ratio} | {within} | "
            f"{cv_text} | {check} |"
        )
    for m in doc["models"]:
        if "tune" not in m:
            continue
        lines += [
            "",
            f"## {m['model']} {m['method']}: tune's verification",
            "",
            f"Decision: {m['tune']['decision']}",
            "",
            "| configuration | role | flags | tok/s [interval] | vs pick [interval] | status |",
            "|---|---|---|---|---|---|",
        ]
        for r in m["tune"]["verification"]:
            e, v = r.get("measured_tok_s") or {}, r.get("vs_pick") or {}
            c = r["config"]
            lines.append(
                f"| {r['name']} | {r['role']} | {c['chunked_prefill_size']}/{c['gpu_prefill_token_threshold']}/"
                f"{c['num_gpu_experts']}/{c['cpuinfer_threads']} | "
                + (f"{e['median']:,.0f} [{e['low']:,.0f}-{e['high']:,.0f}] n={e['n']}" if e else "-")
                + " | "
                + (f"{v['ratio']:.3f} [{v['low']:.3f}-{v['high']:.3f}]" if v else "")
                + f" | {r['status']} |"
            )
        for g in m["tune"].get("gains", []):
            lines.append(f"- gain over {g['baseline']}: {g['ratio']:.2f}x [{g['low']:.2f}-{g['high']:.2f}]")
        st = m.get("runner") or {}
        if st.get("timed_s"):
            lines.append(
                f"- the protocol's cost on this session (tune, grid, head-to-head, cv): warm-up {st['warm_s']:.0f} s "
                f"({st['warm_runs']} new plans, {st['switch_warmups']} switches) beside {st['timed_s']:.0f} s timed "
                f"({st['timed_runs']} runs); tune's phases: "
                + ", ".join(f"{k} {v:.0f} s" for k, v in m["tune"]["phases_s"].items())
            )
        if m.get("grid", {}).get("points"):
            lines += ["", "Grid (tok/s, median [interval], n):", ""]
            lines += [
                f"- {p['config']}: {p['tok_s']['median']:,.0f} [{p['tok_s']['low']:,.0f}-{p['tok_s']['high']:,.0f}] "
                f"n={p['tok_s']['n']}"
                for p in m["grid"]["points"]
            ]
    done = [m for m in doc.get("memory", []) if "rows" in m]
    if done:
        from bench_runner_memory import markdown as mem_md

        lines += ["", mem_md(done, doc["machine"]).replace("# ", "## ", 1)]
    lines += [
        f"- memory {m['model']}: {m.get('skipped') or m.get('error')}" for m in doc.get("memory", []) if "rows" not in m
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--models",
        default=None,
        help="name:METHOD:VRAM[:HOST_RAM],... (default: the three judged models; small: qwen3-30b-a3b)",
    )
    ap.add_argument("--parts", default="tune,grid,cv,memory")
    ap.add_argument("--memory-models", default="glm-4.5-air:BF16,kimi-k2-thinking:RAWINT4")
    ap.add_argument("--memory-configs", type=int, default=50)
    ap.add_argument("--workload", default="rag")
    ap.add_argument("--profile", default=None, help="tune's --profile (default: as kttune tune)")
    ap.add_argument("--grid-chunks", default=None)
    ap.add_argument("--grid-thresholds", default=None)
    ap.add_argument("--grid-repeats", type=int, default=3)
    ap.add_argument("--deadline-s", type=float, default=480.0, help="start no part that would not finish before this")
    ap.add_argument("--small", action="store_true", help="the CPU variant (runner-cpu, small shapes, a tiny workload)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    from kttune.probes.inventory import host_line

    clock = _t0()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    parts = set(a.parts.split(","))
    if a.small:
        (out / "workload.json").write_text(json.dumps(SMALL_WORKLOAD))
        a.profile = a.profile or "h200-pcie5-xeon-amx-16c"
    models = a.models or (
        "qwen3-30b-a3b:BF16:32G"
        if a.small
        else "qwen3-30b-a3b:BF16:32G,qwen3-30b-a3b-fp8:FP8:32G,glm-4.5-air:BF16:80G:512G"
    )
    doc: dict = {
        "machine": host_line(),
        "command": " ".join(["python", "benchmarks/bench_tune.py", *(argv or sys.argv[1:])]),
        "models": [],
        "memory": [],
        "wall_s": 0.0,
    }

    def left() -> float:
        return a.deadline_s - clock()

    def write() -> None:
        doc["wall_s"] = round(clock(), 1)
        (out / "bench_tune.json").write_text(json.dumps(doc, indent=1, default=str))
        (out / "bench_tune.md").write_text(markdown(doc))

    for item in models.split(","):
        if "tune" not in parts:
            break
        if left() < PART_S["tune"] * (0.1 if a.small else 1):
            doc["models"].append({"model": item, "error": f"not run: deadline ({left():.0f} s left)"})
            continue
        try:
            doc["models"].append(judge_model(item, a, out, clock, parts, left))
        except Exception as e:  # one model failing must not lose the others
            import traceback

            traceback.print_exc()
            doc["models"].append({"model": item, "error": f"{type(e).__name__}: {e}"})
        write()
    if "memory" in parts:
        from bench_runner_memory import default_grid, draw_configs, memory_run

        for item in a.memory_models.split(",") if not a.small else ["qwen3-30b-a3b:BF16"]:
            if left() < PART_S["memory"] * (0.1 if a.small else 1):
                doc["memory"].append({"model": item, "skipped": f"deadline ({left():.0f} s left)"})
                continue
            name, method = item.split(":")
            n_max, chunks, thresholds, threads = default_grid(name, method, a.small)
            configs = draw_configs(a.memory_configs, n_max, chunks, thresholds, threads, a.seed)
            try:
                doc["memory"].append(
                    memory_run(
                        name, method, configs, 128 if a.small else 256, threads, a.small, say=lambda s: say(clock, s)
                    )
                )
            except Exception as e:  # noqa: BLE001
                doc["memory"].append({"model": item, "error": f"{type(e).__name__}: {e}"})
            write()
    write()
    print((out / "bench_tune.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
