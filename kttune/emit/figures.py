"""Figures of a search, a probe, a path-runner calibration and a serving simulation (matplotlib).

Each `fig_*` function takes plain, JSON-ready data (what `kttune search --json`, `kttune explain
--json` and `kttune probe --json` print, or the small documented dicts of the path runner and the
simulator) and returns a `matplotlib.figure.Figure`. Figures are built without pyplot, so no display
and no global backend are involved (saving a PNG uses the Agg canvas); matplotlib is imported inside
the functions, so importing this module costs nothing and the model core never loads it.

Every figure carries a provenance line at its foot (`PROVENANCE_GID` names that text artist): the
profile it rests on, where that profile was measured, and the calibration error when a path-runner
result is given (else the cost-model fits' error on their own points).
"""

from __future__ import annotations

import math
from statistics import median
from typing import Iterable

from kttune.units import GB, GIB

PROVENANCE_GID = "kttune-provenance"

# VRAM items in stacking order, with the labels the terminal report uses (kttune.emit.report).
VRAM_ITEMS = (
    ("cuda_context", "CUDA context + NCCL"),
    ("non_expert_weights", "non-expert weights / TP"),
    ("gpu_experts", "resident GPU experts"),
    ("kv_cache", "KV cache"),
    ("linear_state", "linear-attention states"),
    ("req_to_token_pool", "request pool"),
    ("cuda_graphs", "CUDA graphs + KT buffers"),
    ("kt_staging", "KT staging buffer"),
    ("layerwise_slot", "layerwise full-layer slot"),
    # persistent activations plus the largest phase of a layer (docs/memory.md#activations-by-phase):
    # the phases are not stacked, they do not coexist
    ("prefill_activations", "activation peak (largest phase)"),
)


# ---- provenance ------------------------------------------------------------------------------


def calibration_error(runs: Iterable[dict] | None) -> dict | None:
    """Median and worst |measured / predicted - 1| over path-runner rows (see `fig_calibration`),
    or None when there are none. Runs the runner named disturbed are left out and counted."""
    rows = [r for r in runs or () if r.get("measured_ms") and r.get("predicted_ms")]
    errs = [abs(r["measured_ms"] / r["predicted_ms"] - 1.0) for r in rows if not r.get("disturbed")]
    if not errs:
        return None
    return {
        "median_abs_rel": median(errs),
        "max_abs_rel": max(errs),
        "n": len(errs),
        "disturbed": sum(1 for r in rows if r.get("disturbed")),
    }


def provenance_text(doc: dict, runs: Iterable[dict] | None = None) -> str:
    """One line: which profile, measured where, and the calibration error.

    `doc` is a search/explain result (its "profile" block), a hardware profile (its "provenance"
    block) or any dict with a "profile" block of {machine, kind, fingerprint, created}."""
    if doc.get("format") == "kttune-hardware-profile":
        p = doc.get("provenance", {})
        prof = {
            "machine": p.get("machine"),
            "kind": p.get("kind"),
            "fingerprint": doc.get("fingerprint"),
            "created": p.get("created"),
        }
    else:
        prof = doc.get("profile") or {}
        if isinstance(prof, str):  # a result that names its profile only
            prof = {"machine": prof}
    kind = {
        "measured": "measured on ",
        "datasheet": "derived from datasheets for ",
        "mixed": "measured (with shipped parts) on ",
    }.get(prof.get("kind"), f"{prof['kind']}: " if prof.get("kind") else "")
    when = f", {str(prof['created'])[:10]}" if prof.get("created") else ""
    fp = f" [{prof['fingerprint']}]" if prof.get("fingerprint") else ""
    head = f"profile {kind}{prof.get('machine', '?')}{fp}{when}"
    cal = calibration_error(runs)
    if cal:
        tail = (
            f"calibration vs path runner: median |error| {cal['median_abs_rel']:.0%}, "
            f"max {cal['max_abs_rel']:.0%} over {cal['n']} runs"
            + (f" ({cal['disturbed']} disturbed left out)" if cal.get("disturbed") else "")
        )
    elif doc.get("model_fits"):
        worst = max(doc["model_fits"].items(), key=lambda kv: kv[1].get("rel_rmse", 0.0))
        tail = (
            f"not calibrated by the path runner; worst cost-model fit {worst[0]} "
            f"{worst[1].get('rel_rmse', 0.0):.0%} rel. RMS on its own points"
        )
    elif doc.get("format") == "kttune-hardware-profile":
        tail = "medians of repeated measurements after warm-up, no model involved"
    else:
        tail = "calibration error not given"
    return f"{head}; {tail}"


def _new_figure(width_in: float, height_in: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in), layout="constrained")


def _stamp(fig, text: str) -> None:
    """The provenance line at the figure's foot (wrapped so it stays inside the figure)."""
    import textwrap

    width = max(60, int(fig.get_figwidth() * 16))
    lines = textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)
    fig.supxlabel("\n".join(lines), fontsize=7, color="0.35", gid=PROVENANCE_GID)


def provenance_of(fig) -> str:
    """The provenance line a figure carries (its wrapped lines joined by spaces)."""
    for t in fig.texts:
        if t.get_gid() == PROVENANCE_GID:
            return " ".join(t.get_text().split("\n"))
    return ""


def _token_formatter():
    """Tick labels for token counts on a log-2 axis: 512, 2K, 32K (K = 1024)."""
    from matplotlib.ticker import FuncFormatter

    def fmt(x: float, _pos) -> str:
        n = int(round(x))
        return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else f"{n:,}"

    return FuncFormatter(fmt)


def _flags(doc: dict) -> dict:
    """Picked flags of a search result, or the evaluated flags of an explanation."""
    for key in ("pick", "evaluation"):
        if key in doc:
            return doc[key]["flags"]
    raise KeyError("a search or explain result has 'pick' or 'evaluation'")


def _short_cfg(flags: dict) -> str:
    return (
        f"{flags['num_gpu_experts']} GPU exp, chunk {flags['chunked_prefill_size']:,}, "
        f"thr {flags['gpu_prefill_token_threshold']:,}, {flags['cpuinfer_threads']} thr"
    )


def runner_points_for(doc: dict, runs: Iterable[dict] | None) -> list[dict]:
    """The path-runner rows that measure the configuration of a search/explain result: rows naming
    a model, method or GPU-expert count must match the result's (rows that name none all match)."""
    flags = _flags(doc)
    want = {
        "model": (doc.get("model") or {}).get("name"),
        "method": flags.get("method"),
        "gpu_experts": flags.get("num_gpu_experts"),
    }
    return [r for r in runs or () if all(r.get(k) is None or v is None or r[k] == v for k, v in want.items())]


# ---- (1) prefill against prompt length ------------------------------------------------------------


def fig_prefill(doc: dict, runs: Iterable[dict] | None = None):
    """Prefill time and throughput against prompt length, hybrid-only and layerwise-only at the
    chosen chunk, and the picked flags; the crossover and the chosen threshold marked.

    doc: a `kttune search --json` or `kttune explain --json` result. Reads `by_prompt_tokens`
    (rows of {prompt_tokens, hybrid_ms, layerwise_ms (None without a layerwise path), picked_ms}),
    `crossover_tokens`, the flags under `pick` (or `evaluation`), `profile` and `model_fits`.
    runs: optional path-runner rows (schema in `fig_calibration`); those of the same model, method
    and GPU-expert count (`runner_points_for`) whose path is "hybrid" or "layerwise", at the chosen
    chunk or a prompt that fits one chunk either way, are drawn as measured points: the whole-model
    time `extrapolated_ms` where the row has it (the runner measures K layers), else `measured_ms`.

    Axes: [0] time (s) against prompt tokens, [1] throughput (tokens/s); both log-x. Lines are
    labelled "hybrid only", "layerwise only", "picked"; vertical lines "crossover N" and
    "threshold N"; measured points "measured hybrid" / "measured layerwise"."""
    rows = sorted(doc["by_prompt_tokens"], key=lambda r: r["prompt_tokens"])
    flags = _flags(doc)
    chunk, thr = flags["chunked_prefill_size"], flags["gpu_prefill_token_threshold"]
    cross = doc.get("crossover_tokens")
    runs = list(runs or ())
    fig = _new_figure(8.0, 6.4)
    ax_t, ax_r = fig.subplots(2, 1, sharex=True)
    # the picked line runs on top of one path or the other: draw the paths wide and pale under it
    series = [
        ("hybrid only", "hybrid_ms", "tab:orange", "-", 4.0, 0.55),
        ("layerwise only", "layerwise_ms", "tab:blue", "-", 4.0, 0.55),
        ("picked", "picked_ms", "black", "--", 1.4, 1.0),
    ]
    for label, key, color, ls, lw, alpha in series:
        pts = [(r["prompt_tokens"], r[key]) for r in rows if r.get(key) is not None]
        if not pts:
            continue
        px = [p for p, _ in pts]
        ax_t.plot(px, [ms / 1e3 for _, ms in pts], ls, color=color, marker="o", ms=3, lw=lw, alpha=alpha, label=label)
        ax_r.plot(
            px, [p / (ms / 1e3) for p, ms in pts], ls, color=color, marker="o", ms=3, lw=lw, alpha=alpha, label=label
        )
    runs = runner_points_for(doc, runs)
    for path, color in (("hybrid", "tab:orange"), ("layerwise", "tab:blue")):
        pts = [
            (r["tokens"], r.get("extrapolated_ms") or r["measured_ms"])
            for r in runs
            if r.get("path") == path
            and r.get("measured_ms")
            and (r.get("chunk") == chunk or r["tokens"] <= min(r.get("chunk") or 0, chunk))
        ]
        if pts:
            ax_t.scatter(
                [p for p, _ in pts],
                [ms / 1e3 for _, ms in pts],
                marker="D",
                s=30,
                color=color,
                edgecolor="black",
                zorder=5,
                label=f"measured {path}",
            )
            spread = [
                r
                for r in runs
                if r.get("path") == path
                and r.get("extrapolated_low_ms")
                and (r.get("chunk") == chunk or r["tokens"] <= min(r.get("chunk") or 0, chunk))
            ]
            _error_bars(ax_t, spread, "tokens", "extrapolated", color, scale=1e-3)
            ax_r.scatter(
                [p for p, _ in pts],
                [p / (ms / 1e3) for p, ms in pts],
                marker="D",
                s=30,
                color=color,
                edgecolor="black",
                zorder=5,
                label=f"measured {path}",
            )
    for ax in (ax_t, ax_r):
        if cross:
            ax.axvline(cross, color="tab:green", ls=":", lw=1.5, label=f"crossover {cross:,}")
        if thr:
            ax.axvline(thr, color="tab:red", ls="-.", lw=1.5, label=f"threshold {thr:,}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(_token_formatter())
        ax.grid(True, which="both", alpha=0.3)
    ax_t.set_ylabel("prefill time (s)")
    ax_r.set_ylabel("prefill throughput (tokens/s)")
    ax_r.set_xlabel("prompt tokens (idle server)")
    ax_t.legend(fontsize=8)
    model = doc.get("model", {}).get("name", "?")
    ax_t.set_title(f"{model} {flags['method']}: prefill at chunk {chunk:,} ({_short_cfg(flags)})", fontsize=10)
    _stamp(fig, provenance_text(doc, runs))
    return fig


# ---- (2) VRAM breakdown ---------------------------------------------------------------------------


def _same_flags(a: dict, b: dict) -> bool:
    return all(
        a.get(k) == b.get(k)
        for k in (
            "num_gpu_experts",
            "chunked_prefill_size",
            "gpu_prefill_token_threshold",
            "max_total_tokens",
            "cpuinfer_threads",
        )
    )


def vram_candidates(doc: dict, neighbours: int = 2) -> list[tuple[str, dict]]:
    """The configurations the VRAM figure shows: the pick, its Pareto neighbours (up to
    `neighbours` on each side by mean prefill time) and the `kt run` defaults, as (label, evaluation)."""
    front = sorted(doc.get("pareto") or [], key=lambda e: e["predicted"]["mean_prefill_ms"])
    if "pick" not in doc:  # an explanation: the flags given, alone
        return [("given flags", doc["evaluation"])]
    pick = doc["pick"]
    # the pick may sit off the stored front (the search snaps its threshold to the crossover when
    # the workload cannot tell thresholds apart): its neighbours are then those around its prefill time
    front = [e for e in front if not _same_flags(e["flags"], pick["flags"])]
    i = sum(e["predicted"]["mean_prefill_ms"] < pick["predicted"]["mean_prefill_ms"] for e in front)
    out = [("pick", pick)]
    others = front[max(0, i - neighbours) : i] + front[i : i + neighbours]
    for e in sorted(others, key=lambda e: e["predicted"]["mean_prefill_ms"]):
        out.append(("Pareto", e))
    if doc.get("kt_run_default"):
        out.append(("kt run default", doc["kt_run_default"]))
    return out


def fig_vram(doc: dict):
    """VRAM per GPU of the pick as a stacked bar against the budget, beside the runner-up
    configurations (its Pareto neighbours) and the `kt run` defaults.

    doc: a `kttune search --json` result: `pick`, `pareto`, `kt_run_default` (each with `flags` and
    `vram_bytes_per_gpu`, the breakdown of kttune.memory.vram), `budget` {vram_bytes_per_gpu,
    vram_margin}; or a `kttune explain --json` result (its `evaluation`, one bar). Axes [0]: one BarContainer per VRAM item (label = the item's name in VRAM_ITEMS),
    heights in GiB, bars in `vram_candidates` order; horizontal lines "budget" and "usable (margin)"."""
    cands = vram_candidates(doc)
    budget = doc["budget"]["vram_bytes_per_gpu"] / GIB
    usable = budget * (1.0 - doc["budget"].get("vram_margin", 0.0))
    fig = _new_figure(max(6.5, 1.5 * len(cands) + 3.5), 5.2)
    ax = fig.subplots()
    xs = list(range(len(cands)))
    bottoms = [0.0] * len(cands)
    import matplotlib

    cmap = matplotlib.colormaps["tab20"]
    for k, (key, label) in enumerate(VRAM_ITEMS):
        hs = [e["vram_bytes_per_gpu"].get(key, 0) / GIB for _, e in cands]
        if not any(hs):
            continue
        ax.bar(xs, hs, bottom=bottoms, width=0.6, label=label, color=cmap(k), edgecolor="white", lw=0.5)
        bottoms = [b + h for b, h in zip(bottoms, hs)]
    ax.axhline(budget, color="tab:red", lw=1.5, label=f"budget {budget:.1f} GiB")
    ax.axhline(usable, color="tab:red", lw=1, ls="--", label=f"usable {usable:.1f} GiB (margin)")
    labels = []
    for (kind, e), top in zip(cands, bottoms):
        f = e["flags"]
        labels.append(
            f"{kind}\n{f['num_gpu_experts']} exp, C {f['chunked_prefill_size']:,}\n"
            f"T {f['gpu_prefill_token_threshold']:,}, KV {f['max_total_tokens'] // 1024}K"
        )
    ax.set_xticks(xs, labels, fontsize=7)
    for t in ax.get_xticklabels()[:1]:
        t.set_fontweight("bold")
    ax.set_ylabel("GiB per GPU (rank 0), runtime peak")
    ax.set_ylim(0, max(bottoms + [budget]) * 1.08)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    model = doc.get("model", {}).get("name", "?")
    ax.set_title(
        f"{model}: VRAM of the pick and the runner-ups" if "pick" in doc else f"{model}: VRAM of the given flags",
        fontsize=10,
    )
    _stamp(fig, provenance_text(doc))
    return fig


# ---- (3) Pareto front -----------------------------------------------------------------------------


def fig_pareto(doc: dict, trials: list[tuple[float, float]] | None = None):
    """The search's Pareto front: mean prefill time (s) against decode throughput (tokens/s),
    coloured by runtime peak VRAM (GiB), with the pick and the `kt run` defaults marked.

    doc: a `kttune search --json` result (`pareto`, `pick`, `kt_run_default`, `study`). Axes [0]:
    collections labelled "Pareto front" (offsets = the front's points, array = peak GiB), "pick" and
    "kt run default"; a colorbar axis beside it. trials: optional (mean prefill s, decode tok/s) of
    every feasible trial (`study_trials`), drawn grey behind the front as "feasible trials"."""
    front = sorted(doc["pareto"], key=lambda e: e["predicted"]["mean_prefill_ms"])

    def xy(e: dict) -> tuple[float, float]:
        return e["predicted"]["mean_prefill_ms"] / 1e3, e["predicted"]["decode_tok_s"]

    fig = _new_figure(7.5, 5.0)
    ax = fig.subplots()
    pts = [xy(e) for e in front]
    peaks = [e["vram_bytes_per_gpu"]["runtime_peak_bytes"] / GIB for e in front]
    if trials:
        ax.scatter([x for x, _ in trials], [y for _, y in trials], s=8, color="0.75", zorder=0, label="feasible trials")
    ax.plot([x for x, _ in pts], [y for _, y in pts], color="0.6", lw=1, zorder=1)
    sc = ax.scatter(
        [x for x, _ in pts],
        [y for _, y in pts],
        c=peaks,
        cmap="viridis",
        s=40,
        zorder=2,
        label="Pareto front",
        edgecolor="black",
        lw=0.4,
    )
    fig.colorbar(sc, ax=ax, label="runtime peak VRAM (GiB)")
    px, py = xy(doc["pick"])
    ax.scatter([px], [py], marker="*", s=260, facecolor="none", edgecolor="tab:red", lw=1.6, zorder=3, label="pick")
    ax.annotate(_short_cfg(doc["pick"]["flags"]), (px, py), textcoords="offset points", xytext=(10, -14), fontsize=7)
    base = doc.get("kt_run_default")
    if base:
        bx, by = xy(base)
        ax.scatter([bx], [by], marker="X", s=80, color="0.3", zorder=3, label="kt run default")
        ax.annotate(
            "kt run: " + _short_cfg(base["flags"]),
            (bx, by),
            textcoords="offset points",
            xytext=(0, 10),
            ha="center",
            fontsize=7,
        )
    ax.set_xscale("log")
    ax.set_xlabel("mean prefill time over the workload (s, lower is better)")
    ax.set_ylabel("decode throughput (tokens/s, higher is better)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    st = doc.get("study") or {}
    ax.set_title(
        f"{doc.get('model', {}).get('name', '?')}: Pareto front of {st.get('feasible', '?')} feasible "
        f"of {st.get('trials', '?')} trials",
        fontsize=10,
    )
    _stamp(fig, provenance_text(doc) + (f"; study {st['name']}" if st.get("name") else ""))
    return fig


def study_trials(doc: dict) -> list[tuple[float, float]] | None:
    """(mean prefill s, decode tok/s) of every feasible trial of the search's Optuna study, read
    from its storage; None when the storage cannot be opened or the study is not in it."""
    st = doc.get("study") or {}
    if not st.get("name") or not st.get("storage"):
        return None
    import os

    if "://" not in st["storage"] and not os.path.isfile(st["storage"]):
        return None
    import optuna

    from kttune.search.storage import open_storage

    try:
        study = optuna.load_study(study_name=st["name"], storage=open_storage(st["storage"]).storage)
    except Exception:  # moved or deleted storage, another study: the figure goes without the cloud
        return None
    out = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        cons = t.constraints
        if t.values and cons and all(c <= 0 for c in cons.values()):
            out.append((float(t.values[0]), float(t.values[1])))
    return out


# ---- (4) probe curves ----------------------------------------------------------------------------


def _curves(profile: dict, kind: str) -> list[dict]:
    return [c for c in profile.get("curves", ()) if c["kind"] == kind and c.get("points")]


def cpu_moe_label(params: dict) -> str:
    pools = params.get("threadpools", 1)
    return f"{params.get('method')} {params.get('threads')} thr" + (f" x{pools} pools" if pools and pools > 1 else "")


def fig_cpu_moe(profile: dict):
    """CPU MoE layer time against tokens, one line per method and thread count, one panel per expert
    shape (H, I, E, top-k). Lines at the full core count are dashed, so the full-core cliff shows.

    profile: a hardware profile dict (`kttune probe --json`, profiles/*.json); reads its `cpu_moe`
    curves and `inventory.cpu.physical_cores`. Each line's label is `cpu_moe_label(params)`, its
    xdata the curve's tokens and ydata its median ms; each panel's title names the shape."""
    curves = _curves(profile, "cpu_moe")
    if not curves:
        raise ValueError("the profile has no cpu_moe curves")
    cores = profile.get("inventory", {}).get("cpu", {}).get("physical_cores") or 0
    shapes: dict[tuple, list[dict]] = {}
    for c in curves:
        p = c["params"]
        shapes.setdefault((p.get("hidden"), p.get("inter"), p.get("experts"), p.get("top_k")), []).append(c)
    n = len(shapes)
    cols = 1 if n == 1 else 2
    rows = math.ceil(n / cols)
    fig = _new_figure(6.0 * cols, 3.6 * rows + 0.6)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    import matplotlib

    methods = sorted({c["params"].get("method") for c in curves})
    colors = {m: matplotlib.colormaps["tab10"](i % 10) for i, m in enumerate(methods)}
    threads_all = sorted({c["params"].get("threads") for c in curves})
    markers = {t: "osv^Dp"[i % 6] for i, t in enumerate(threads_all)}
    for ax, ((h, i, e, k), cs) in zip(axes, shapes.items()):
        for c in sorted(cs, key=lambda c: (c["params"].get("method"), c["params"].get("threads"))):
            p = c["params"]
            full = cores and p.get("threads", 0) * p.get("threadpools", 1) >= cores
            pts = sorted((pt["x"], pt["t_ms"]) for pt in c["points"])
            ax.plot(
                [x for x, _ in pts],
                [t for _, t in pts],
                "--" if full else "-",
                color=colors[p.get("method")],
                marker=markers[p.get("threads")],
                ms=3,
                lw=1.8 if full else 1.2,
                label=cpu_moe_label(p),
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"H{h} I{i} E{e} top-{k}", fontsize=9)
        ax.set_xlabel("tokens per forward")
        ax.set_ylabel("ms per MoE layer")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    for ax in axes[n:]:
        ax.set_visible(False)
    cliff = f" (dashed: {cores} threads = every core, the driving thread starves)" if cores else ""
    fig.suptitle(f"kt-kernel CPU MoE forward{cliff}", fontsize=10)
    _stamp(fig, provenance_text(profile))
    return fig


def copy_gbps(point: dict) -> float:
    """GB/s (1e9 bytes per second) of one copy-curve point; on an all-GPUs curve x is the bytes per
    GPU and the rate is the aggregate over its `extra.gpus` GPUs (probes/gpu_copy.py)."""
    gpus = (point.get("extra") or {}).get("gpus", 1)
    return point["x"] * gpus / GB / (point["t_ms"] / 1e3)


def fig_h2d(profile: dict):
    """Host-device copy bandwidth (GB/s) against size, pinned and pageable, H2D and D2H per GPU and
    all GPUs at once, with the link's theoretical rate as a horizontal line.

    profile: a hardware profile dict; reads its `h2d` and `d2h` curves (params gpu, pinned) and the
    points' `extra.link_theoretical_gbps`. Lines are labelled "<kind> <pinned|pageable> gpu <g>"
    (+ " (aggregate)" for all GPUs at once), xdata bytes (per GPU), ydata GB/s (`copy_gbps`); one
    limit line per distinct rate, "link limit <rate> GB/s" (+ " (all GPUs)")."""
    curves = _curves(profile, "h2d") + _curves(profile, "d2h")
    if not curves:
        raise ValueError("the profile has no h2d/d2h curves (measured on a machine without a GPU?)")
    fig = _new_figure(7.5, 4.8)
    ax = fig.subplots()
    limits = set()
    for c in sorted(curves, key=lambda c: (c["kind"], not c["params"].get("pinned"), str(c["params"].get("gpu")))):
        p = c["params"]
        pts = sorted(c["points"], key=lambda pt: pt["x"])
        label = f"{c['kind']} {'pinned' if p.get('pinned') else 'pageable'} gpu {p.get('gpu')}"
        if p.get("gpu") == "all":
            label += " (aggregate)"
        color = {
            (True, "h2d"): "tab:blue",
            (True, "d2h"): "tab:cyan",
            (False, "h2d"): "tab:orange",
            (False, "d2h"): "tab:brown",
        }[(bool(p.get("pinned")), c["kind"])]
        ax.plot(
            [pt["x"] for pt in pts],
            [copy_gbps(pt) for pt in pts],
            "-" if c["kind"] == "h2d" else ":",
            color=color,
            marker="o" if p.get("gpu") != "all" else "s",
            ms=3,
            label=label,
        )
        for pt in pts:
            lim = (pt.get("extra") or {}).get("link_theoretical_gbps")
            if lim:
                limits.add((round(float(lim), 2), p.get("gpu") == "all"))
    for lim, every in sorted(limits):
        ax.axhline(
            lim,
            color="black",
            lw=1,
            ls="--" if not every else "-.",
            label=f"link limit {lim:g} GB/s" + (" (all GPUs)" if every else ""),
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per copy")
    ax.set_ylabel("GB/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("Host-device copies against the link's theoretical rate", fontsize=10)
    _stamp(fig, provenance_text(profile))
    return fig


PIPELINE_STAGES = (
    ("stage_a_ms", "A: CPU write"),
    ("stage_b_ms", "B: H2D copy"),
    ("stage_c_ms", "C: GPU repack"),
    ("layer_ms", "layer (pipelined)"),
)


def pipeline_groups(profile: dict) -> list[tuple[str, dict]]:
    """(label, extra) of each pipeline curve's full-layer point (its largest), in drawing order."""
    out = []
    for c in sorted(
        _curves(profile, "pipeline"),
        key=lambda c: (str(c["params"].get("model")), c["params"].get("method"), -c["params"].get("threads", 0)),
    ):
        pt = max(c["points"], key=lambda pt: pt["x"])
        p = c["params"]
        out.append(
            (
                f"{p.get('model') or p.get('method')} {p.get('method')}\n{p.get('threads')} thr, {pt['x'] / GB:.1f} GB",
                pt.get("extra") or {},
            )
        )
    return out


def fig_pipeline(profile: dict):
    """The layerwise pipeline over one full MoE layer: each stage alone (A CPU write, B H2D copy,
    C GPU repack) beside the pipelined layer time, per model shape and stage A thread count.

    profile: a hardware profile dict; reads each `pipeline` curve's largest point's `extra`
    (stage_a_ms, stage_b_ms, stage_c_ms, layer_ms). Axes [0]: one BarContainer per PIPELINE_STAGES
    label, bars in `pipeline_groups` order, heights in ms."""
    groups = pipeline_groups(profile)
    if not groups:
        raise ValueError("the profile has no pipeline curves (measured on a machine without a GPU?)")
    fig = _new_figure(max(7.0, 1.1 * len(groups) + 2), 4.8)
    ax = fig.subplots()
    width = 0.8 / len(PIPELINE_STAGES)
    colors = ("tab:orange", "tab:blue", "tab:purple", "black")
    for k, ((key, label), color) in enumerate(zip(PIPELINE_STAGES, colors)):
        hs = [float(extra.get(key) or 0.0) for _, extra in groups]
        xs = [g + (k - (len(PIPELINE_STAGES) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, hs, width=width, label=label, color=color, alpha=0.85 if key != "layer_ms" else 1.0)
    ax.set_xticks(range(len(groups)), [g for g, _ in groups], fontsize=7)
    ax.set_ylabel("ms per full MoE layer")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title("Layerwise pipeline: stages alone against the pipelined layer", fontsize=10)
    _stamp(fig, provenance_text(profile))
    return fig


# ---- (5) path runner: predicted against measured ------------------------------------------------


def _error_bars(ax, rows: list[dict], x_key: str, y: str, color, scale: float = 1.0) -> None:
    """The repeats' intervals (`<y>_low_ms`, `<y>_high_ms`) of the rows that have them, as vertical bars."""
    rs = [r for r in rows if r.get(f"{y}_low_ms") is not None and r.get(f"{y}_high_ms") is not None]
    if not rs:
        return
    mid = [r[f"{y}_ms"] * scale for r in rs]
    lo = [max(0.0, m - r[f"{y}_low_ms"] * scale) for m, r in zip(mid, rs)]
    hi = [max(0.0, r[f"{y}_high_ms"] * scale - m) for m, r in zip(mid, rs)]
    ax.errorbar([r[x_key] for r in rs], mid, yerr=[lo, hi], fmt="none", ecolor=color, elinewidth=1, capsize=2, zorder=4)


def fig_calibration(runs: list[dict], doc: dict | None = None):
    """Predicted against measured prefill time from the path runner, one point per run, coloured by
    path, with the y = x line and the error in the title.

    runs: rows of {"path": "hybrid"|"layerwise"|"switch", "tokens": int (prompt or forward tokens),
    "chunk": int, "predicted_ms": float, "measured_ms": float}, optionally "gpu_experts": int.
    With "measured_low_ms"/"measured_high_ms" (the repeats' interval) a vertical bar shows it.
    Extra keys are ignored. doc: an optional result or profile dict, for the provenance line.
    Axes [0]: one collection per path labelled with the path (offsets = (predicted, measured) ms),
    and the line "y = x"."""
    rows = [r for r in runs if r.get("predicted_ms") and r.get("measured_ms")]
    if not rows:
        raise ValueError("no path-runner rows with both predicted_ms and measured_ms")
    fig = _new_figure(6.0, 5.4)
    ax = fig.subplots()
    colors = {"hybrid": "tab:orange", "layerwise": "tab:blue", "switch": "tab:green"}
    for path in sorted({r["path"] for r in rows}):
        rs = [r for r in rows if r["path"] == path and not r.get("disturbed")]
        if rs:
            ax.scatter(
                [r["predicted_ms"] for r in rs],
                [r["measured_ms"] for r in rs],
                s=30,
                label=path,
                color=colors.get(path),
                edgecolor="black",
                lw=0.4,
            )
            _error_bars(ax, rs, "predicted_ms", "measured", colors.get(path))
    bad = [r for r in rows if r.get("disturbed")]
    if bad:
        ax.scatter(
            [r["predicted_ms"] for r in bad],
            [r["measured_ms"] for r in bad],
            s=40,
            marker="x",
            color="0.35",
            label="disturbed (left out)",
        )
    lo = min(min(r["predicted_ms"], r["measured_ms"]) for r in rows) / 1.3
    hi = max(max(r["predicted_ms"], r["measured_ms"]) for r in rows) * 1.3
    ax.plot([lo, hi], [lo, hi], color="0.4", lw=1, ls="--", label="y = x")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("predicted (ms)")
    ax.set_ylabel("measured (ms)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    cal = calibration_error(rows)
    left = f", {cal['disturbed']} disturbed left out" if cal.get("disturbed") else ""
    ax.set_title(
        f"Path runner against the cost model\nmedian |error| {cal['median_abs_rel']:.0%}, "
        f"max {cal['max_abs_rel']:.0%} ({cal['n']} runs{left})",
        fontsize=10,
    )
    _stamp(fig, provenance_text(doc or {}, rows))
    return fig


# ---- (6) simulator: schedules ---------------------------------------------------------------------


def _ecdf(samples: list[float]) -> tuple[list[float], list[float]]:
    xs = sorted(samples)
    return xs, [(i + 1) / len(xs) for i in range(len(xs))]


def fig_schedules(sim: dict, doc: dict | None = None):
    """Serving-simulation comparison of prefill schedules: the TTFT and TBT distributions (empirical
    CDFs) and SLO attainment against the arrival rate.

    sim: {"schedules": {name: {"ttft_s": [samples], "tbt_s": [samples],
                               "attainment": [[rate_req_per_s, share 0..1], ...],
                               "ttft_pct_s": {"50": s, "90": s, "99": s},   (optional)
                               "tbt_pct_s": {"50": s, ...}}},                (optional)
          "slo": {"ttft_s": float, "tbt_s": float},  (optional)
          "tbt_what": "every inter-token gap"}  (optional: what the TBT samples are)
    A schedule may omit any series; percentiles are drawn (markers at their quantile) only where
    samples are absent. doc: an optional result or profile dict for the provenance line.
    Axes [0] TTFT, [1] TBT (in ms): one line per schedule labelled with its name, xdata the sorted
    samples, ydata the empirical CDF (or the percentiles, labelled "<name> p50/p90/p99"); SLO
    vertical lines "TTFT SLO" / "TBT SLO". Axes [2]: one line per schedule, xdata rates, ydata
    attainment."""
    scheds = sim.get("schedules") or {}
    if not scheds:
        raise ValueError("the simulation result has no schedules")
    slo = sim.get("slo") or {}
    fig = _new_figure(13.0, 4.4)
    ax_ttft, ax_tbt, ax_att = fig.subplots(1, 3)
    for i, (name, s) in enumerate(scheds.items()):
        color = f"C{i % 10}"
        for ax, key, scale in ((ax_ttft, "ttft", 1.0), (ax_tbt, "tbt", 1e3)):
            samples = [v for v in s.get(f"{key}_s") or () if v is not None]
            pct = {float(q): v for q, v in (s.get(f"{key}_pct_s") or {}).items() if v is not None}
            if samples:
                ax.plot(*_ecdf([v * scale for v in samples]), drawstyle="steps-post", color=color, label=name)
            elif pct:
                qs = sorted(pct)
                ax.plot(
                    [pct[q] * scale for q in qs],
                    [q / 100 for q in qs],
                    "o--",
                    color=color,
                    ms=4,
                    label=f"{name} " + "/".join(f"p{q:g}" for q in qs),
                )
        if s.get("attainment"):
            pts = sorted((float(r), float(a)) for r, a in s["attainment"])
            ax_att.plot([r for r, _ in pts], [a for _, a in pts], marker="o", ms=3, color=f"C{i % 10}", label=name)
    if slo.get("ttft_s"):
        ax_ttft.axvline(slo["ttft_s"], color="tab:red", ls="--", lw=1, label="TTFT SLO")
    if slo.get("tbt_s"):
        ax_tbt.axvline(slo["tbt_s"] * 1e3, color="tab:red", ls="--", lw=1, label="TBT SLO")
    ax_ttft.set_xscale("log")
    ax_ttft.set_xlabel("time to first token (s)")
    ax_tbt.set_xlabel(f"time between tokens (ms; {sim.get('tbt_what', 'every inter-token gap')})")
    for ax in (ax_ttft, ax_tbt):
        ax.set_ylabel("share of requests")
        ax.set_ylim(0, 1.02)
    ax_att.set_xlabel("arrival rate (requests/s)")
    ax_att.set_ylabel("SLO attainment")
    ax_att.set_ylim(0, 1.02)
    for ax in (ax_ttft, ax_tbt, ax_att):
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # the attainment axis is empty without a capacity search
            ax.legend(fontsize=7)
    fig.suptitle("Prefill schedules in the serving simulation", fontsize=10)
    _stamp(fig, provenance_text(doc or sim))
    return fig


def save_png(fig, path, dpi: int = 110) -> None:
    """Write a figure as PNG through the Agg canvas (no display, no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=dpi, format="png")
