"""The figures hold the series they should: each is rendered without a display from real results (a
search run through the CLI on the measured H200 profile, the shipped measured profile, a real CPU
probe of this machine) and its plotted data is read back from the matplotlib objects."""

from __future__ import annotations

import json
import re

import pytest

from kttune.cli import main
from kttune.config import LaunchConfig
from kttune.emit import figures as F
from kttune.hw.registry import load_shipped
from kttune.hw.profile import profile_to_dict
from kttune.memory.vram import vram_breakdown
from kttune.spec.loader import load_model
from kttune.units import GIB

MEASURED = "h200-pcie5-xeon-amx-16c"


def _search(tmp_path_factory, argv: list[str]) -> dict:
    import contextlib
    import io

    storage = tmp_path_factory.mktemp("study") / "s.journal"
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["search", *argv, "--profile", MEASURED, "--seed", "1", "--storage", str(storage), "--json"])
    assert code == 0
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def kimi(tmp_path_factory) -> dict:
    """Kimi-K2-Thinking (RAWINT4) on one H200, long prompts: layerwise fires, threshold > 0."""
    return _search(
        tmp_path_factory,
        [
            "--model",
            "kimi-k2-thinking",
            "--vram",
            "140G",
            "--host-ram",
            "1T",
            "--workload",
            "long-context",
            "--trials",
            "150",
        ],
    )


@pytest.fixture(scope="module")
def qwen(tmp_path_factory) -> dict:
    """The README's main job: Qwen3-30B-A3B in 32 GiB."""
    return _search(tmp_path_factory, ["--model", "qwen3-30b-a3b", "--vram", "32G", "--trials", "150"])


@pytest.fixture(scope="module")
def measured() -> dict:
    return profile_to_dict(load_shipped(MEASURED))


def lines_by_label(ax) -> dict:
    return {ln.get_label(): ln for ln in ax.get_lines()}


def vlines(ax) -> dict:
    """Vertical lines (axvline) by label: their x."""
    out = {}
    for ln in ax.get_lines():
        xs = list(ln.get_xdata())
        if len(xs) == 2 and xs[0] == xs[1] and list(ln.get_ydata()) == [0, 1]:
            out[ln.get_label()] = xs[0]
    return out


def hlines(ax) -> dict:
    out = {}
    for ln in ax.get_lines():
        ys = list(ln.get_ydata())
        if len(ys) == 2 and ys[0] == ys[1] and list(ln.get_xdata()) == [0, 1]:
            out[ln.get_label()] = ys[0]
    return out


def collection(ax, label: str):
    found = [c for c in ax.collections if c.get_label() == label]
    assert len(found) == 1, [c.get_label() for c in ax.collections]
    return found[0]


def bar_containers(ax) -> dict:
    return {c.get_label(): c for c in ax.containers}


# ---- (1) prefill ----------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["kimi", "qwen"])
def test_prefill_lines_are_the_result_rows(which, request):
    doc = request.getfixturevalue(which)
    fig = F.fig_prefill(doc)
    ax_t, ax_r = fig.axes[:2]
    rows = doc["by_prompt_tokens"]
    lines = lines_by_label(ax_t)
    for label, key in (("hybrid only", "hybrid_ms"), ("layerwise only", "layerwise_ms"), ("picked", "picked_ms")):
        ln = lines[label]
        assert list(ln.get_xdata()) == [r["prompt_tokens"] for r in rows]
        assert list(ln.get_ydata()) == pytest.approx([r[key] / 1e3 for r in rows])
        # throughput x time = tokens, point by point
        tput = lines_by_label(ax_r)[label]
        for x, s, tps in zip(ln.get_xdata(), ln.get_ydata(), tput.get_ydata()):
            assert tps * s == pytest.approx(x)
    flags = doc["pick"]["flags"]
    marks = vlines(ax_t)
    assert marks[f"crossover {doc['crossover_tokens']:,}"] == doc["crossover_tokens"]
    assert marks[f"threshold {flags['gpu_prefill_token_threshold']:,}"] == flags["gpu_prefill_token_threshold"]
    assert vlines(ax_r) == marks


def test_prefill_picked_line_follows_the_threshold_up_to_one_chunk(kimi):
    """A prompt that fits one chunk is one forward: the picked time is the layerwise time at or above
    the threshold and the hybrid time below it (a law of the path choice, read off the figure)."""
    fig = F.fig_prefill(kimi)
    lines = lines_by_label(fig.axes[0])
    flags = kimi["pick"]["flags"]
    thr, chunk = flags["gpu_prefill_token_threshold"], flags["chunked_prefill_size"]
    assert thr > 0
    checked = 0
    for x, picked, hyb, lw in zip(
        lines["picked"].get_xdata(),
        lines["picked"].get_ydata(),
        lines["hybrid only"].get_ydata(),
        lines["layerwise only"].get_ydata(),
    ):
        if x <= chunk:
            assert picked == pytest.approx(lw if x >= thr else hyb)
            checked += 1
        if 2 * kimi["crossover_tokens"] <= x <= chunk:
            assert lw < hyb  # right of the crossover, layerwise wins
    assert checked >= 4


def test_prefill_draws_runner_points_at_the_chosen_chunk_only(kimi):
    chunk = kimi["pick"]["flags"]["chunked_prefill_size"]
    runs = [
        {"path": "layerwise", "tokens": 8192, "chunk": chunk, "predicted_ms": 16000.0, "measured_ms": 17500.0},
        {"path": "hybrid", "tokens": 1024, "chunk": chunk, "predicted_ms": 47000.0, "measured_ms": 44000.0},
        {"path": "layerwise", "tokens": 8192, "chunk": 2048, "predicted_ms": 1.0, "measured_ms": 2.0},
        # one forward of 512 tokens at chunk 512 is the same forward as at the chosen chunk
        {
            "path": "hybrid",
            "tokens": 512,
            "chunk": 512,
            "predicted_ms": 9000.0,
            "measured_ms": 9000.0,
            "extrapolated_ms": 30000.0,
        },
        # another GPU-expert count measures another configuration
        {
            "path": "hybrid",
            "tokens": 1024,
            "chunk": chunk,
            "gpu_experts": kimi["pick"]["flags"]["num_gpu_experts"] + 1,
            "predicted_ms": 1.0,
            "measured_ms": 1.0,
        },
    ]
    assert chunk > 8192
    fig = F.fig_prefill(kimi, runs)
    ax_t = fig.axes[0]
    assert collection(ax_t, "measured layerwise").get_offsets().tolist() == [[8192, 17.5]]
    # the whole-model time (extrapolated_ms) where the row has one
    assert sorted(collection(ax_t, "measured hybrid").get_offsets().tolist()) == [[512, 30.0], [1024, 44.0]]
    # |17.5/16 - 1| = 9.4%, |44/47 - 1| = 6.4%, |2/1 - 1| = 100%, 0%; the other GPU-expert count left out
    assert "median |error| 8%" in F.provenance_of(fig) and "over 4 runs" in F.provenance_of(fig)


# ---- (2) VRAM ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["kimi", "qwen"])
def test_vram_bars_stack_to_each_configurations_peak(which, request):
    doc = request.getfixturevalue(which)
    fig = F.fig_vram(doc)
    ax = fig.axes[0]
    cands = F.vram_candidates(doc)
    assert cands[0] == ("pick", doc["pick"])
    assert cands[-1] == ("kt run default", doc["kt_run_default"])
    bars = bar_containers(ax)
    totals = [0.0] * len(cands)
    for c in bars.values():
        assert len(c.patches) == len(cands)
        for i, p in enumerate(c.patches):
            assert p.get_y() == pytest.approx(totals[i])  # stacked: each starts where the last ended
            totals[i] += p.get_height()
    for (_, e), total in zip(cands, totals):
        assert total == pytest.approx(e["vram_bytes_per_gpu"]["runtime_peak_bytes"] / GIB)
    budget = doc["budget"]["vram_bytes_per_gpu"] / GIB
    h = hlines(ax)
    assert h[f"budget {budget:.1f} GiB"] == pytest.approx(budget)
    assert totals[0] <= budget  # the pick fits


def test_vram_pick_bar_matches_the_memory_model(kimi):
    """Each stacked item of the pick, against kttune.memory.vram recomputed from the picked flags."""
    fig = F.fig_vram(kimi)
    bars = bar_containers(fig.axes[0])
    b = vram_breakdown(load_model("kimi-k2-thinking"), LaunchConfig(**kimi["pick"]["flags"]))
    d = b.to_dict()
    for key, name in F.VRAM_ITEMS:
        if d[key] and any(e["vram_bytes_per_gpu"][key] for _, e in F.vram_candidates(kimi)):
            assert bars[name].patches[0].get_height() == pytest.approx(d[key] / GIB)
    assert "layerwise full-layer slot" in bars  # layerwise fires: the lazily allocated slot is shown


# ---- (3) Pareto --------------------------------------------------------------------------------------


def test_pareto_front_pick_and_kt_run_default(kimi):
    fig = F.fig_pareto(kimi, F.study_trials(kimi))
    ax = fig.axes[0]
    front = collection(ax, "Pareto front")
    pts = [tuple(p) for p in front.get_offsets().tolist()]
    want = sorted((e["predicted"]["mean_prefill_ms"] / 1e3, e["predicted"]["decode_tok_s"]) for e in kimi["pareto"])
    assert len(pts) == len(want)
    assert [v for p in pts for v in p] == pytest.approx([v for p in want for v in p])
    # a front: sorted by prefill time, decode throughput strictly rises (nothing dominates anything)
    assert all(b[0] >= a[0] and b[1] > a[1] for a, b in zip(pts, pts[1:]))
    peaks = sorted(kimi["pareto"], key=lambda e: e["predicted"]["mean_prefill_ms"])
    assert list(front.get_array()) == pytest.approx(
        [e["vram_bytes_per_gpu"]["runtime_peak_bytes"] / GIB for e in peaks]
    )
    pick = collection(ax, "pick").get_offsets().tolist()[0]
    assert pick == pytest.approx(
        [kimi["pick"]["predicted"]["mean_prefill_ms"] / 1e3, kimi["pick"]["predicted"]["decode_tok_s"]]
    )
    # on the front, or off it only where the threshold snap made it better: never dominated by it
    assert not any(fx <= pick[0] and fy >= pick[1] and (fx, fy) != tuple(pick) for fx, fy in pts)
    base = collection(ax, "kt run default").get_offsets().tolist()[0]
    assert base == pytest.approx(
        [
            kimi["kt_run_default"]["predicted"]["mean_prefill_ms"] / 1e3,
            kimi["kt_run_default"]["predicted"]["decode_tok_s"],
        ]
    )
    cloud = collection(ax, "feasible trials").get_offsets().tolist()
    assert len(cloud) == kimi["study"]["feasible"]
    for x, y in cloud:  # no feasible trial beats the front on both objectives
        assert not any(x < fx - 1e-9 and y > fy + 1e-9 for fx, fy in pts) or (x, y) in pts
    assert fig.axes[1].get_ylabel() == "runtime peak VRAM (GiB)"  # the colorbar


# ---- (4) probe curves -----------------------------------------------------------------------------------


def test_cpu_moe_lines_are_the_profile_curves_and_show_the_cliff(measured):
    fig = F.fig_cpu_moe(measured)
    cores = measured["inventory"]["cpu"]["physical_cores"]
    lines = {}
    for ax in fig.axes:
        for ln in ax.get_lines():
            lines[(ax.get_title(), ln.get_label())] = ln
    curves = [c for c in measured["curves"] if c["kind"] == "cpu_moe"]
    assert len(lines) == len(curves)
    for c in curves:
        p = c["params"]
        ln = lines[(f"H{p['hidden']} I{p['inter']} E{p['experts']} top-{p['top_k']}", F.cpu_moe_label(p))]
        pts = sorted((pt["x"], pt["t_ms"]) for pt in c["points"])
        assert list(ln.get_xdata()) == [x for x, _ in pts]
        assert list(ln.get_ydata()) == [t for _, t in pts]
        assert (ln.get_linestyle() == "--") == (p["threads"] == cores)
    # the full-core cliff is in the plotted data: at 1 token, every core is > 10x slower than cores - 1
    small = {ln: l for (title, ln), l in lines.items() if title == "H1024 I512 E32 top-8"}
    for method in ("AMXINT4", "AMXINT8", "BF16", "FP8", "RAWINT4"):
        full, one_less = small[f"{method} {cores} thr"], small[f"{method} {cores - 1} thr"]
        assert full.get_ydata()[0] > 10 * one_less.get_ydata()[0]


def test_h2d_bandwidth_against_the_link_limit(measured):
    fig = F.fig_h2d(measured)
    ax = fig.axes[0]
    lines = lines_by_label(ax)
    curves = [c for c in measured["curves"] if c["kind"] in ("h2d", "d2h")]
    for c in curves:
        ln = lines[f"{c['kind']} {'pinned' if c['params']['pinned'] else 'pageable'} gpu {c['params']['gpu']}"]
        pts = sorted(c["points"], key=lambda pt: pt["x"])
        assert list(ln.get_xdata()) == [pt["x"] for pt in pts]
        assert list(ln.get_ydata()) == pytest.approx([pt["x"] / pt["t_ms"] / 1e6 for pt in pts])
    ((label, limit),) = hlines(ax).items()
    assert label.startswith("link limit") and limit == pytest.approx(63.02, abs=0.01)  # Gen5 x16 after 128b/130b
    for ln in ax.get_lines():
        if ln.get_label().endswith("gpu 0"):
            assert max(ln.get_ydata()) < limit  # no copy beats the link


def test_two_gpu_profile_aggregate_against_two_links():
    """The two-GPU box: each GPU under one link's rate, both at once under twice that (x is bytes
    per GPU on the all-GPUs curve)."""
    doc = profile_to_dict(load_shipped("h200x2-pcie5-xeon-amx-32c"))
    ax = F.fig_h2d(doc).axes[0]
    limits = hlines(ax)
    one, both = limits["link limit 63.02 GB/s"], limits["link limit 126.03 GB/s (all GPUs)"]
    assert both == pytest.approx(2 * one, abs=0.02)  # both rounded to 0.01
    lines = lines_by_label(ax)
    agg = lines["h2d pinned gpu all (aggregate)"]
    curve = next(c for c in doc["curves"] if c["kind"] == "h2d" and c["params"]["gpu"] == "all")
    assert list(agg.get_ydata()) == pytest.approx([2 * pt["x"] / pt["t_ms"] / 1e6 for pt in curve["points"]])
    assert one < max(agg.get_ydata()) < both  # two links beat one, and stay under their sum
    assert max(lines["h2d pinned gpu 0"].get_ydata()) < one


def test_pipeline_bars_are_the_stage_times(measured):
    fig = F.fig_pipeline(measured)
    bars = bar_containers(fig.axes[0])
    groups = F.pipeline_groups(measured)
    # three representative shapes and GLM-4.7 in FP8_PERCHANNEL, each at 11, 13 and 15 threads
    assert len(groups) == sum(c["kind"] == "pipeline" for c in measured["curves"]) == 12
    for key, label in F.PIPELINE_STAGES:
        assert [p.get_height() for p in bars[label].patches] == pytest.approx([g[1][key] for g in groups])
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == [g[0] for g in groups]
    kimi13 = ticks.index("Kimi-K2 RAWINT4\n13 thr, 9.5 GB")
    assert bars["layer (pipelined)"].patches[kimi13].get_height() == pytest.approx(196.6, abs=0.1)


def test_probe_figures_from_a_real_probe_of_this_machine(tmp_path):
    """A real (small) CPU probe here: its CPU MoE curves are the figure's lines, both thread counts."""
    from kttune.probes.run import ProbeOptions, run_probe

    prof = run_probe(
        ProbeOptions(
            quick=True,
            methods=("BF16",),
            threads=(1, 2),
            max_tokens=4,
            gpu=False,
            write_cache=False,
            merge_cached=False,
            stage_a=False,
        )
    )
    doc = profile_to_dict(prof)
    fig = F.fig_cpu_moe(doc)
    labels = sorted(ln.get_label() for ax in fig.axes for ln in ax.get_lines())
    assert labels == ["BF16 1 thr", "BF16 2 thr"]
    curve = prof.curves_of("cpu_moe", threads=2)[0]
    ln = next(ln for ax in fig.axes for ln in ax.get_lines() if ln.get_label() == "BF16 2 thr")
    assert list(ln.get_ydata()) == [pt.t_ms for pt in sorted(curve.points, key=lambda p: p.x)]
    assert prof.provenance.machine in F.provenance_of(fig)
    with pytest.raises(ValueError, match="h2d"):
        F.fig_h2d(doc)  # a CPU-only probe has no copy curves: said, not drawn empty


# ---- (5) calibration, (6) schedules: the documented input schemas ----------------------------------


RUNS = [
    {"path": "hybrid", "tokens": 512, "chunk": 8192, "predicted_ms": 100.0, "measured_ms": 110.0},
    {"path": "hybrid", "tokens": 2048, "chunk": 8192, "predicted_ms": 400.0, "measured_ms": 380.0},
    {"path": "layerwise", "tokens": 8192, "chunk": 8192, "predicted_ms": 900.0, "measured_ms": 1170.0},
    {"path": "layerwise", "tokens": 16384, "chunk": 8192, "predicted_ms": 1800.0, "measured_ms": 1800.0},
]


def test_calibration_scatter_and_error(measured):
    fig = F.fig_calibration(RUNS, measured)
    ax = fig.axes[0]
    assert collection(ax, "hybrid").get_offsets().tolist() == [[100.0, 110.0], [400.0, 380.0]]
    assert collection(ax, "layerwise").get_offsets().tolist() == [[900.0, 1170.0], [1800.0, 1800.0]]
    diag = lines_by_label(ax)["y = x"]
    assert list(diag.get_xdata()) == list(diag.get_ydata())
    # errors 10%, 5%, 30%, 0%: median 7.5%, max 30%
    assert "median |error| 8%" in ax.get_title() and "max 30%" in ax.get_title()
    cal = F.calibration_error(RUNS)
    assert cal["median_abs_rel"] == pytest.approx(0.075) and cal["max_abs_rel"] == pytest.approx(0.30)
    assert "calibration vs path runner" in F.provenance_of(fig) and measured["provenance"][
        "machine"
    ] in F.provenance_of(fig)


SIM = {
    "schedules": {
        "chunked": {
            "ttft_s": [0.5, 2.0, 1.0, 8.0],
            "tbt_s": [0.05, 0.30, 0.06],
            "attainment": [[0.5, 1.0], [2.0, 0.4], [1.0, 0.8]],
        },
        "layered": {
            "ttft_s": [0.6, 1.5, 1.2, 3.0],
            "tbt_s": [0.05, 0.07, 0.06],
            "attainment": [[0.5, 1.0], [1.0, 0.95], [2.0, 0.7]],
        },
    },
    "slo": {"ttft_s": 2.0, "tbt_s": 0.1},
}


def test_schedule_distributions_and_attainment(kimi):
    fig = F.fig_schedules(SIM, kimi)
    ax_ttft, ax_tbt, ax_att = fig.axes[:3]
    for name, s in SIM["schedules"].items():
        ln = lines_by_label(ax_ttft)[name]
        assert list(ln.get_xdata()) == sorted(s["ttft_s"])
        assert list(ln.get_ydata()) == pytest.approx([0.25, 0.5, 0.75, 1.0])  # an empirical CDF
        tbt = lines_by_label(ax_tbt)[name]
        assert list(tbt.get_xdata()) == pytest.approx(sorted(v * 1e3 for v in s["tbt_s"]))
        att = lines_by_label(ax_att)[name]
        assert list(zip(att.get_xdata(), att.get_ydata())) == sorted(tuple(p) for p in s["attainment"])
    assert vlines(ax_ttft)["TTFT SLO"] == 2.0
    assert vlines(ax_tbt)["TBT SLO"] == pytest.approx(100.0)
    assert kimi["profile"]["machine"] in F.provenance_of(fig)


def test_every_figure_carries_provenance(kimi, measured):
    figs = [
        F.fig_prefill(kimi),
        F.fig_vram(kimi),
        F.fig_pareto(kimi),
        F.fig_cpu_moe(measured),
        F.fig_h2d(measured),
        F.fig_pipeline(measured),
        F.fig_calibration(RUNS, kimi),
        F.fig_schedules(SIM, kimi),
    ]
    for fig in figs:
        text = F.provenance_of(fig)
        assert "profile measured on NVIDIA H200" in text
        assert "calibration" in text or "cost-model fit" in text or "measurements" in text
    # without a runner result, the search figures say the model is not calibrated and how well it fits
    assert "not calibrated by the path runner" in F.provenance_of(figs[0])
    assert re.search(r"worst cost-model fit \w+ \d+% rel. RMS", F.provenance_of(figs[0]))


def test_figures_render_headless_and_the_core_never_loads_matplotlib(tmp_path):
    """In a fresh interpreter without a display: a search and its figures, saved as PNG, with no
    pyplot; the model core (search, cost, memory) imports no matplotlib."""
    import subprocess
    import sys

    code = f"""
import os, sys
os.environ.pop("DISPLAY", None); os.environ.pop("MPLBACKEND", None)
import kttune.app.search_explain, kttune.search.study, kttune.cost.prefill, kttune.memory.vram
assert "matplotlib" not in sys.modules
import json
from kttune.emit import figures as F
doc = json.load(open({str(tmp_path / "p.json")!r}))
F.save_png(F.fig_pipeline(doc), {str(tmp_path / "x.png")!r})
assert "matplotlib.pyplot" not in sys.modules
print("ok")
"""
    (tmp_path / "p.json").write_text(json.dumps(profile_to_dict(load_shipped(MEASURED))))
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MPLCONFIGDIR": str(tmp_path / "mpl")},
    )
    assert r.returncode == 0, r.stderr
    from matplotlib.image import imread

    img = imread(tmp_path / "x.png")
    assert img.shape[0] > 300 and img.shape[1] > 600


def test_explain_result_prefill_and_single_vram_bar(capsys):
    code = main(
        [
            "explain",
            "--model",
            "qwen3-30b-a3b",
            "--vram",
            "32G",
            "--gpu-experts",
            "40",
            "--chunk",
            "16384",
            "--threshold",
            "1024",
            "--max-total-tokens",
            "40960",
            "--profile",
            MEASURED,
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)
    fig = F.fig_prefill(doc)
    assert vlines(fig.axes[0])["threshold 1,024"] == 1024
    bars = bar_containers(F.fig_vram(doc).axes[0])
    total = sum(c.patches[0].get_height() for c in bars.values())
    assert all(len(c.patches) == 1 for c in bars.values())
    assert total == pytest.approx(doc["evaluation"]["vram_bytes_per_gpu"]["runtime_peak_bytes"] / GIB)
