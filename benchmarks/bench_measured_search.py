"""Ground truth for the measured search: measure an exhaustive grid over the search space with the
same evaluator, then run `kttune search --measure` and compare its pick with the grid optimum.

    python benchmarks/bench_measured_search.py --model kimi-k2-thinking --vram 140G --host-ram 1T \
        --workload long-context --evaluator runner   # -> benchmarks/results/<today>-<machine>/measured-search/
    python benchmarks/bench_measured_search.py --quick --evaluator model --profile h200-pcie5-xeon-amx-16c \
        --out /tmp/bms   # anywhere, seconds

The grid: every chunk, threshold and `--kt-cpuinfer` of the search space (or the values given) x a
few GPU-expert counts (0, and evenly spaced up to the most that fit beside each chunk), at the KV
pool the measured search uses (the model search's pick). Configurations over the VRAM / host-RAM
budget are not measured. `--quick` takes three chunks, three thresholds, two thread counts and
two expert counts. Grid results are written as they come (rerunning with the same --out resumes).

Writes <out>/bench_measured_search.json and .md: the machine, the evaluator, the grid optimum, the
search's pick, its trials, and every baseline; and whether the pick is within 3% of the grid optimum
in at most 20 measured trials and beats every baseline that fits.

Shared session: the grid and the search use ONE evaluator, so one runner session (the model's K
layers and a kt-kernel MoE per thread count, built once in a worker process; warmed per new shape by
the session itself). Each grid point is one sample per length; the search screens and then races its
finalists with fresh samples in interleaved rounds (kttune.protocol) and reports their intervals.
`benchmarks/bench_tune.py` measures a grid with the protocol's repeats. `--grid-max-s` caps the grid's
wall time (a partial grid is reported as such) and `--budget` the search's.
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from results_layout import results_dir  # noqa: E402  (benchmarks/ is the script's folder)


def _ints(text: str | None) -> list[int] | None:
    return [int(x) for x in text.split(",")] if text else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3-30b-a3b")
    ap.add_argument("--vram", default="32G")
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--host-ram", default=None)
    ap.add_argument("--profile", default=None)
    ap.add_argument("--workload", default="long-context")
    ap.add_argument("--method", default=None)
    ap.add_argument("--evaluator", default="runner", help="runner | runner-cpu | model")
    ap.add_argument("--trials", type=int, default=20, help="measured trials of the search (the target: at most 20)")
    ap.add_argument("--budget", default=None, help="time budget of the search, e.g. 30m")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--quick", action="store_true", help="a small grid (3 chunks x 3 thresholds x 2 threads x 2 expert counts)"
    )
    ap.add_argument("--chunks", help="comma list overriding the grid's chunks")
    ap.add_argument("--thresholds", help="comma list overriding the grid's thresholds")
    ap.add_argument("--threads", help="comma list overriding the grid's --kt-cpuinfer values")
    ap.add_argument(
        "--experts",
        type=int,
        default=4,
        help="GPU-expert counts per (chunk, threshold, threads), 0 to the most that fit",
    )
    ap.add_argument(
        "--grid-max-s", type=float, default=None, help="stop the grid after this many seconds (partial grid, stated)"
    )
    ap.add_argument("--out", help="folder (default: benchmarks/results/<today>-<this machine>/measured-search/)")
    a = ap.parse_args(argv)

    from kttune import app
    from kttune.app import resolve
    from kttune.app.measured import make_evaluator
    from kttune.search.evaluate import evaluate
    from kttune.search.measured import MeasuredRequest, prefill_tok_s, run_measured_search
    from kttune.search.space import KV_UNIT
    from kttune.search.study import StudyOptions, prepare_search, run_search
    from kttune.units import parse_duration_s

    out = Path(a.out) if a.out else results_dir() / "measured-search"
    out.mkdir(parents=True, exist_ok=True)
    inp = app.resolve_inputs(
        a.model, resolve.vram_bytes(a.vram), a.gpus, a.profile, a.workload, a.method, resolve.host_ram_bytes(a.host_ram)
    )
    inner = make_evaluator(inp, a.evaluator)

    class Counting:
        """The one shared evaluator, counting the distinct configurations asked for per phase."""

        name = inner.name

        def __init__(self) -> None:
            self.asked: dict[str, set] = {}
            self.measured: dict[str, set] = {}
            self.phase = "grid"

        def measure(self, cfg, lengths):
            got = inner.measure(cfg, lengths)
            # measured = the evaluator answered at least one length; asked = every configuration tried
            self.asked.setdefault(self.phase, set()).add(cfg)
            if got:
                self.measured.setdefault(self.phase, set()).add(cfg)
            return got

    ev = Counting()
    base = inp.request
    comp, space = prepare_search(base)  # the space both searches use
    wl, budget = base.workload, base.budget
    model_res = run_search(base, StudyOptions(trials=300, seed=a.seed, storage=str(out / "studies.journal")))
    kv_units = space.params_of(model_res.best.cfg)["kv_k"]

    chunks = _ints(a.chunks) or (
        list(space.chunks)
        if not a.quick
        else sorted({space.chunks[0], 4096 if 4096 in space.chunks else space.chunks[0], space.chunks[-1]})
    )
    thresholds = _ints(a.thresholds) or (
        list(space.thresholds) if not a.quick else sorted({0, *[t for t in (1024, 4096) if t in space.thresholds]})
    )
    threads = _ints(a.threads) or (
        list(space.threads)
        if not a.quick
        else sorted(
            {
                space.threads[0],
                *[t for t in space.threads if t < (base.profile.inventory.cpu.physical_cores or 10**9)][-1:],
            }
        )
    )
    n_exp = 2 if a.quick else max(2, a.experts)

    def most_experts(chunk: int, thr: int, th: int) -> int:
        lo, hi = 0, space.gpu_experts_max
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (
                (mid, hi)
                if evaluate(comp, space.config(chunk, thr, mid, kv_units, th), wl, budget).feasible
                else (lo, mid - 1)
            )
        return lo

    grid_file = out / "grid.json"
    grid = json.loads(grid_file.read_text()) if grid_file.exists() else {}
    configs = []
    for chunk in chunks:
        for thr in thresholds:
            if thr > chunk:
                continue
            for th in threads:
                if not evaluate(comp, space.config(chunk, thr, 0, kv_units, th), wl, budget).feasible:
                    continue
                top = most_experts(chunk, thr, th)
                for n in sorted({round(top * i / (n_exp - 1)) for i in range(n_exp)}):
                    configs.append(space.config(chunk, thr, n, kv_units, th))
    print(
        f"grid: {len(configs)} configurations that fit x {len(wl.prompt_tokens)} prompt lengths, evaluator {ev.name}, "
        f"{len(grid)} already measured in {grid_file}",
        flush=True,
    )
    from kttune.search.measured import measured_pruner

    pruner_name = type(measured_pruner(0.1)).__name__
    print(f"pruner of the measured search: {pruner_name}", flush=True)
    t0 = time.perf_counter()
    grid_partial = False
    unmeasurable: dict[str, dict] = {}
    for i, cfg in enumerate(configs):
        if a.grid_max_s is not None and time.perf_counter() - t0 > a.grid_max_s:
            grid_partial = True
            print(
                f"grid stopped at its time cap ({a.grid_max_s:.0f} s): {i} of {len(configs)} configurations", flush=True
            )
            break
        key = (
            f"{cfg.chunked_prefill_size}/{cfg.gpu_prefill_token_threshold}/{cfg.num_gpu_experts}/{cfg.cpuinfer_threads}"
        )
        if key in grid:
            continue
        got = ev.measure(cfg, list(wl.prompt_tokens))
        if set(got) != set(wl.prompt_tokens):  # the evaluator could not measure every length (its limits)
            why = [sk.get("reason") for sk in getattr(inner, "skipped", {}).get(cfg, [])]
            unmeasurable[key] = {
                "config": cfg.to_dict(),
                "missing": sorted(set(wl.prompt_tokens) - set(got)),
                "reasons": why[:3],
            }
            print(
                f"  [{i + 1}/{len(configs)}] {key}: not measurable ({unmeasurable[key]['missing']}: {why[:1]})",
                flush=True,
            )
            continue
        ms = {n: got[n] for n in wl.prompt_tokens}
        grid[key] = {
            "config": cfg.to_dict(),
            "ms": {str(n): v for n, v in ms.items()},
            "tok_s": prefill_tok_s(ms, wl.prompt_tokens, wl.weights),
        }
        grid_file.write_text(json.dumps(grid, indent=1))
        print(f"  [{i + 1}/{len(configs)}] {key}: {grid[key]['tok_s']:,.0f} tok/s", flush=True)
    grid_s = time.perf_counter() - t0
    best_key = max(grid, key=lambda k: grid[k]["tok_s"]) if grid else None
    optimum = grid[best_key]["tok_s"] if best_key else None

    grid_cfgs = set(ev.measured.get("grid", set()))
    ev.phase = "search"
    t1 = time.perf_counter()
    mreq = MeasuredRequest(
        base=base,
        trials=a.trials,
        seed=a.seed,
        storage=str(out / "measured.journal"),
        budget_s=parse_duration_s(a.budget, "--budget") if a.budget else None,
    )
    res = run_measured_search(mreq, ev, model_res)
    search_s = time.perf_counter() - t1
    search_cfgs = ev.measured.get("search", set())
    distinct = len(search_cfgs)
    new_cfgs = len(search_cfgs - grid_cfgs)
    unmeasurable_tries = len(ev.asked.get("search", set()) - search_cfgs)
    pick = res.best.measured_tok_s
    fitting = [b for b in res.baselines if b.fits and b.measured_tok_s is not None]
    verdict = {
        "within_3pct_of_grid": bool(optimum and pick >= 0.97 * optimum),
        "at_most_20_measured_trials": res.trials_measured <= 20 and distinct <= 20,
        "beats_every_fitting_baseline": all(pick >= b.measured_tok_s for b in fitting),
    }
    doc = {
        "machine": {
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "profile": base.profile.provenance.machine,
            "profile_kind": base.profile.provenance.kind,
            "cpu": base.profile.inventory.cpu.model,
            "gpus": [g.name for g in base.profile.inventory.gpus],
        },
        "evaluator": ev.name,
        "model": base.model.name,
        "method": base.method,
        "tp": base.tp,
        "vram": a.vram,
        "workload": {"name": wl.name, "prompt_tokens": list(wl.prompt_tokens), "weights": list(wl.weights)},
        "kv_tokens": kv_units * KV_UNIT,
        "grid": {
            "chunks": chunks,
            "thresholds": thresholds,
            "threads": threads,
            "expert_counts_per_cell": n_exp,
            "measured": len(grid),
            "wall_s": grid_s,
            "configurations": len(configs),
            "partial": grid_partial,
            "unmeasurable": unmeasurable,
            "optimum": grid.get(best_key) if best_key else None,
        },
        "shared_measurements": "one evaluator (one runner session) for grid and search; grid points one sample "
        "per length, the search's finalists raced with fresh samples",
        "pruner": pruner_name,
        "search": {
            "pick": {"config": res.best.cfg.to_dict(), "tok_s": pick},
            "measured_trials": res.trials_measured,
            "distinct_configs_measured": distinct,
            "configs_new_to_grid": new_cfgs,
            "configs_tried_not_measurable": unmeasurable_tries,
            "pick_in_grid": res.best.cfg in grid_cfgs,
            "pruned": res.trials_pruned,
            "wall_s": search_s,
            "study": res.study_name,
            "model_pick": {"config": res.model_pick.cfg.to_dict(), "tok_s": res.model_pick.measured_tok_s},
            "baselines": [
                {
                    "name": b.name,
                    "fits": b.fits,
                    "tok_s": b.measured_tok_s,
                    "config": b.cfg.to_dict(),
                    "notes": list(b.notes),
                }
                for b in res.baselines
            ],
        },
        "pick_over_grid_optimum": pick / optimum if optimum else None,
        "verdict": verdict,
    }
    (out / "bench_measured_search.json").write_text(json.dumps(doc, indent=1, default=str))
    md = [
        f"# Measured search against an exhaustive grid: {base.model.name} {base.method}, {a.vram} x {base.tp} GPU",
        "",
        f"Machine: {doc['machine']['hostname']} ({base.profile.provenance.machine}, profile {base.profile.provenance.kind}); "
        f"evaluator `{ev.name}`; workload {wl.name} ({len(wl.prompt_tokens)} lengths); KV pool {kv_units * KV_UNIT} tokens.",
        "",
        "| configuration | chunk | threshold | GPU experts | cpuinfer | fits budget | measured tok/s | / grid optimum |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]

    def row(name, cfg, tok, fits=True):
        rel = f"{tok / optimum:.3f}" if tok and optimum else "-"
        md.append(
            f"| {name} | {cfg['chunked_prefill_size']} | {cfg['gpu_prefill_token_threshold']} | {cfg['num_gpu_experts']} | "
            f"{cfg['cpuinfer_threads']} | {'yes' if fits else 'no'} | {f'{tok:,.0f}' if tok else '-'} | {rel} |"
        )

    if best_key:
        row("grid optimum", grid[best_key]["config"], optimum)
    row(f"measured pick ({distinct} measured configurations)", res.best.cfg.to_dict(), pick)
    row("model pick", res.model_pick.cfg.to_dict(), res.model_pick.measured_tok_s)
    for b in res.baselines:
        row(b.name, b.cfg.to_dict(), b.measured_tok_s, b.fits)
    md += [
        "",
        f"Grid: {len(grid)} of {len(configs)} configurations measured in {grid_s:.0f} s"
        f"{f', {len(unmeasurable)} not measurable by the runner' if unmeasurable else ''}"
        f"{' (PARTIAL: stopped at its time cap)' if grid_partial else ''}; chunks {chunks}, thresholds {thresholds}, "
        f"--kt-cpuinfer {threads}, {n_exp} GPU-expert counts per cell (0 to the most that fit).",
        f"Search: {search_s:.0f} s, {res.trials_measured} measured trials = {distinct} distinct configurations "
        f"({new_cfgs} not in the grid, measured anew; {unmeasurable_tries} more tried that the evaluator could not measure), "
        f"{res.trials_pruned} pruned ({pruner_name}); "
        "grid and search share one runner session; the search's finalists were raced with fresh samples.",
        "",
        "Verdict: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in verdict.items()),
    ]
    (out / "bench_measured_search.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"\nwrote {out / 'bench_measured_search.json'} and .md")
    getattr(inner, "close", lambda: None)()
    return 0


if __name__ == "__main__":
    sys.exit(main())
