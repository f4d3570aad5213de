"""The figures of README.md and docs/*.md, made by the code at HEAD: every block of a page between
`<!-- figures:NAME -->` and `<!-- /figures -->` is the text `BLOCKS[NAME]` makes (each name on one
page only), and the PNGs under docs/figures/ carry the configuration they show in their metadata.
tests/test_readme_figures.py checks both, so a change that moves a figure fails until this is rerun.

    python scripts/readme_figures.py            # check: exit 1 and a diff where a page is stale
    python scripts/readme_figures.py --write    # rewrite the blocks and the PNGs (matplotlib)

Each figure is what the page's command prints on a fresh machine (no probed profile, so the
shipped default profile), computed through kttune.app as the CLI does, studies in memory; the
accuracy table is read from the results files under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import difflib
import json
import statistics
import os
import re
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = (README, *sorted((ROOT / "docs").glob("*.md")))  # the pages that may hold figures blocks
FIGURES = ROOT / "docs" / "figures"
RESULTS = ROOT / "benchmarks" / "results"
BLOCK_RE = re.compile(r"<!-- figures:(?P<name>[a-z0-9-]+) -->\n(?P<body>.*?)<!-- /figures -->", re.S)
PNG_KEY = "Description"  # the PNG text chunk that names what a figure shows

MAIN_JOB = dict(model="qwen3-30b-a3b", vram="32G", seed=1)
DERIVE = dict(
    source="h200-pcie5-xeon-amx-16c", gpu="rtx5090", gpus=2, model="minimax-m2.1", vram="30G", host_ram="256G", seed=1
)
H200 = "2026-12-01-h200-pcie5-xeon-amx-16c"  # the GPU box's results folder
RUNNER = dict(
    model="qwen3-30b-a3b",
    vram="139G",
    gpu_experts=0,
    chunk=4096,
    threshold=2048,
    cpuinfer=13,
    profile="h200-pcie5-xeon-amx-16c",
    results=f"{H200}/paths.json",
)
# the evidence the accuracy table is read from (benchmarks/results/manifest.json says what each is)
ACCURACY = dict(
    paths=(f"{H200}/paths.json", f"{H200}/paths-earlier.json"),
    host_ram="2026-12-01-xeon-amx-2c/host_ram.json",
    derive="2026-12-04-computed/derive-16c-to-32c.json",
    derive_real="2026-12-05-computed/derive-16c-to-32c-real-shapes.json",
    measured_search=f"{H200}/measured-search.json",
    transfer="2026-12-05-computed/transfer-h200-seven-models-sglang-loop.json",
    quick_transfer="2026-12-05-computed/quick-transfer-h200.json",
    thread_interp="2026-12-05-computed/thread-interp.json",
    thread_interp_runner=tuple(
        f"2026-12-05-computed/thread-interp-runner-h100-{m}.json"
        for m in ("glm-4.5-air", "qwen3-30b-a3b", "minimax-m2.1")
    ),
    thread_interp_runner_t12=tuple(
        f"2026-12-05-computed/thread-interp-runner-t12-h100-{m}.json"
        for m in ("glm-4.5-air", "qwen3-30b-a3b", "minimax-m2.1", "kimi-k2-thinking")
    ),
    h100_derived="2026-12-05-computed/quick-transfer-h100-derived.json",
    h100_shipped="2026-12-05-computed/quick-transfer-h100-shipped.json",
    # bench_probe_median over every instance probed 2-3 times beside its sweeps (its "fastest" rows unread)
    probe_median="2026-12-06-computed/probe-median-fastest.json",
    runner_repeat="2026-12-05-computed/runner-repeat.json",
    newest_lomo=(
        "2026-12-05-computed/transfer-merged-probes-h100i.json",
        "2026-12-05-computed/transfer-quick-narrow-h100i.json",
    ),
    h200_lomo=(
        "2026-12-05-computed/transfer-merged-probes-h200ab.json",
        "2026-12-05-computed/transfer-quick-probe-h200c.json",
    ),
    # a busy H200 instance (docs/probe.md#a-busy-machine): its three probes merged, and how busy
    h200_busy=("2026-12-06-computed/transfer-merged-probes-h200f.json", "2026-12-06-computed/instance-noise.json"),
    # the H100 box's instances, each from its own quick probes (two merged where the call took two)
    h100_lomo=(
        "2026-12-05-computed/transfer-quick-probe-h100a.json",
        *(f"2026-12-05-computed/transfer-merged-probes-h100{t}.json" for t in "fghik"),
        "2026-12-06-computed/transfer-merged-probes-h100m.json",
        *(f"2026-12-06-computed/transfer-quick-h100{t}.json" for t in "nop"),
        "2026-12-06-computed/transfer-merged-probes-h100r.json",
        "2026-12-06-computed/transfer-merged-probes-h100s.json",
        "2026-12-06-computed/transfer-merged-probes-h100t.json",
        *(f"2026-12-06-computed/transfer-quick-h100{t}.json" for t in "uv"),
        "2026-12-06-computed/transfer-merged-probes-h100x.json",
        # seventeenth session: aa (Sapphire Rapids) and ac (Emerald Rapids), two probes merged each
        "2026-12-06-computed/transfer-merged-probes-h100aa.json",
        "2026-12-06-computed/transfer-merged-probes-h100ac.json",
        # nineteenth session: ad (Emerald Rapids), two probes merged, stage A's methods in processes of their own
        "2026-12-06-computed/transfer-merged-probes-h100ad.json",
        # twentieth session: ae (Sapphire Rapids), two probes merged, the CPU MoE layer warm and cold
        "2026-12-07-computed/transfer-merged-probes-h100ae.json",
        # twenty-first session: af (Sapphire Rapids), three probes of two calls merged
        "2026-12-07-computed/transfer-merged-probes-h100af.json",
        # twenty-second session: ah (Emerald Rapids), three probes of two calls merged, the first timed to 1,024 tokens
        "2026-12-07-computed/transfer-merged-probes-h100ah.json",
        # twenty-third session: aj (four probes of two calls), al and am (two probes each), Emerald Rapids
        *(f"2026-12-07-computed/transfer-merged-probes-{t}.json" for t in ("h100aj", "h100al", "h100am")),
        # twenty-fourth session: ao, ap and aq (three probes each), Emerald Rapids
        *(f"2026-12-07-computed/transfer-merged-probes-{t}.json" for t in ("h100ao", "h100ap", "h100aq")),
        # twenty-sixth session: ar (three probes), Emerald Rapids, the quick layer also timed cold
        "2026-12-07-computed/transfer-merged-probes-h100ar.json",
        # twenty-ninth session: av (three probes) and aw (two), Emerald Rapids, the quick layer also timed cold
        *(f"2026-12-08-computed/transfer-merged-probes-{t}.json" for t in ("h100av", "h100aw")),
    ),
    # H100 instances: their sweeps from their quick probes and from `kttune probe --model` of each model
    own_layer=(
        *(f"2026-12-06-computed/own-layer-h100{t}.json" for t in ("s", "t", "aa", "ac", "ad")),
        *(f"2026-12-07-computed/own-layer-h100{t}.json" for t in ("ae", "af")),
        # twenty-ninth session: gpt-oss-20b and gpt-oss-120b (MXFP4) on instance au
        "2026-12-08-computed/own-layer-h100au.json",
    ),
    # MXFP4 (gpt-oss) through the path runner, one H100 instance: own probe, quick probe, shipped profile
    mxfp4_runner="2026-12-07-computed/mxfp4-runner.json",
    # a quick probe that times MXFP4 (since 2026-12-07), another instance's gpt-oss sweeps
    mxfp4_quick="2026-12-07-computed/transfer-mxfp4-quick-h100as.json",
    # a quick probe that also streams gpt-oss-20b's MXFP4 layer (instance at), on the other instances'
    # sweeps: as it is, then less its MXFP4 pipeline curves, per instance
    mxfp4_quick_loop=tuple(
        f"2026-12-07-computed/transfer-mxfp4-quick-h100at-on-{i}{wo}.json"
        for i in ("as", "ar")
        for wo in ("", "-without-mx-loop")
    ),
    # the same quick probe on its own instance's gpt-oss sweeps (instance au): as it is, then less its
    # MXFP4 pipeline curves
    mxfp4_quick_same=(
        "2026-12-08-computed/transfer-quick-h100au.json",
        "2026-12-08-computed/transfer-quick-h100au-without-mx-loop.json",
    ),
    gap_read=(
        "2026-12-06-computed/diag-gap-read-mixtral-8x7b-h100z.json",
        "2026-12-06-computed/diag-gap-read-glm-4.5-air-h100z.json",
    ),
    pipeline_narrow="2026-12-05-computed/pipeline-narrow.json",
    hybrid_bias="2026-12-05-computed/hybrid-bias.json",
    # every quick-transfer call's own probes against its sweeps, grouped by the instance's CPU generation
    cpu_generation="2026-12-06-computed/cpu-generation.json",
    pipeline_loop="2026-12-05-computed/pipeline-loop.json",
    same_instance="2026-12-05-computed/same-machine-h200-seven-models-one-instance.json",
    lomo_instance="2026-12-05-computed/same-machine-h200-seven-models-leave-one-model-out.json",
    switch_sweeps="2026-12-05-computed/same-machine-h200-switch-sweeps.json",
    new_models="2026-12-05-computed/same-machine-h200-two-new-models.json",
    shape_law="2026-12-05-computed/same-machine-h200-expert-shape-law-held-out.json",
    shape_law_probe=(
        "2026-12-05-computed/shape-law-probe-held-out.json",
        "2026-12-05-computed/shape-law-probe-held-out-c.json",
    ),
    tp_two_gpus=tuple(
        f"2026-12-05-computed/tp-paths-h200x2-{m}.json"
        for m in (
            "qwen3-30b-a3b",
            "glm-4.5-air",
            "mixtral-8x7b",
            "qwen3-next-80b-a3b",
            "deepseek-v3",
            "kimi-k2-thinking",
        )
    ),
    tune=(
        f"{H200}/tune-qwen3.json",
        f"{H200}/tune-glm-4.5-air.json",
        "2026-12-02-h200-pcie5-xeon-amx-16c/tune-qwen3-fp8.json",
        "2026-12-02-h200-pcie5-xeon-amx-16c/tune-qwen3-sglang-loop.json",
        "2026-12-02-h200-pcie5-xeon-amx-16c/tune-kimi-k2.json",
        "2026-12-02-h200-pcie5-xeon-amx-16c/tune-qwen3-neighbours.json",
        "2026-12-02-h200-pcie5-xeon-amx-16c/tune-glm-4.5-air-sglang-loop.json",
        "2026-12-02-h200-pcie5-xeon-amx-16c/tune-qwen3-attention-block.json",
        "2026-12-03-h200-pcie5-xeon-amx-16c/tune-qwen3-fp8-sglang-loop.json",
        "2026-12-03-h200-pcie5-xeon-amx-16c/tune-qwen3-rival.json",
        "2026-12-03-h200-pcie5-xeon-amx-16c/tune-glm-4.5-air-rival.json",
        "2026-12-03-h200-pcie5-xeon-amx-16c/tune-qwen3-neighbour-experts.json",
        "2026-12-03-h200-pcie5-xeon-amx-16c/tune-glm-4.5-air-triton.json",
        "2026-12-03-h200-pcie5-xeon-amx-16c/tune-qwen3-triton.json",
        "2026-12-03-h200-pcie5-xeon-amx-16c/tune-qwen3-race-margin.json",
    ),
)


def fresh_machine() -> None:
    """As on a fresh machine: an empty kttune cache, so no probed profile of this one and the
    shipped default profile (the tests' cache is empty already)."""
    os.environ["KTTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="kttune-readme-")


def _n(v: float) -> str:
    return f"{v:,.0f}"


def _s(ms: float) -> str:
    return f"{ms / 1e3:.2f} s" if ms < 10_000 else f"{ms / 1e3:.1f} s"


def _wrap(text: str) -> str:
    """A paragraph at the README's line width."""
    import textwrap

    return textwrap.fill(text, 100, break_on_hyphens=False, break_long_words=False) + "\n"


def _flags(f: dict) -> str:
    return (
        f"{f['num_gpu_experts']} GPU experts per layer, chunk {_n(f['chunked_prefill_size'])}, threshold "
        f"{_n(f['gpu_prefill_token_threshold'])}, {_n(f['max_total_tokens'])} KV tokens and `--kt-cpuinfer "
        f"{f['cpuinfer_threads']}`"
    )


@lru_cache(maxsize=None)
def main_job() -> dict:
    """`kttune search --model qwen3-30b-a3b --vram 32G --seed 1 --json` on a fresh machine."""
    from kttune import app
    from kttune.app import resolve

    inp = app.resolve_inputs(MAIN_JOB["model"], resolve.vram_bytes(MAIN_JOB["vram"]))
    # through JSON, as the command prints it (tuples become lists)
    return json.loads(json.dumps(app.search(inp, trials=300, seed=MAIN_JOB["seed"], storage=":memory:").to_dict()))


def main_job_block() -> str:
    from kttune.units import times_faster

    d = main_job()
    pick, base = d["pick"], d["kt_run_default"]
    p, b = pick["predicted"], base["predicted"]
    return _wrap(
        f"With `--seed 1` (a reproducible search; `kttune search --model {MAIN_JOB['model']} --vram {MAIN_JOB['vram']} "
        f"--seed 1`) the main job picks {_flags(pick['flags'])}: a predicted mean prefill of "
        f"{_s(p['mean_prefill_ms'])} over the {d['workload']['name']} workload's prompts and "
        f"{p['decode_tok_s']:.1f} decode tok/s, against the `kt run` defaults mean prefill "
        f"{times_faster(p['mean_prefill_ms'], b['mean_prefill_ms'], lower_is_faster=True)} and decode "
        f"{times_faster(p['decode_tok_s'], b['decode_tok_s'], lower_is_faster=False)}; the paths cross at "
        f"{_n(d['crossover_tokens'])} tokens per forward. Without `--seed` the sampler differs from run to run "
        "and so may the pick."
    )


def prefill_figure_block() -> str:
    return _wrap(
        f"The main job's pick as `kttune report` draws it (`kttune search --model {MAIN_JOB['model']} --vram "
        f"{MAIN_JOB['vram']} --seed 1 --json > r.json && kttune report r.json`):"
    )


@lru_cache(maxsize=None)
def derive_example() -> dict:
    """`kttune profile derive ... --gpu rtx5090 --gpus 2`, then the search on it and the same flags
    explained on the measured profile."""
    from kttune import app
    from kttune.app import resolve
    from kttune.hw.derive import Change, derive_profile
    from kttune.hw.profile import save_profile
    from kttune.hw.registry import load_shipped

    measured = load_shipped(DERIVE["source"])
    derived = derive_profile(measured, Change(gpu=DERIVE["gpu"], n_gpus=DERIVE["gpus"]), created="")
    path = save_profile(derived.profile, Path(tempfile.mkdtemp(prefix="kttune-readme-")) / "2x5090.json")
    inp = app.resolve_inputs(
        DERIVE["model"],
        resolve.vram_bytes(DERIVE["vram"]),
        DERIVE["gpus"],
        str(path),
        host_ram_bytes=resolve.host_ram_bytes(DERIVE["host_ram"]),
    )
    found = app.search(inp, trials=300, seed=DERIVE["seed"], storage=":memory:").to_dict()
    f = found["pick"]["flags"]
    same = app.explain_flags(
        app.resolve_inputs(
            DERIVE["model"],
            resolve.vram_bytes(DERIVE["vram"]),
            DERIVE["gpus"],
            DERIVE["source"],
            host_ram_bytes=resolve.host_ram_bytes(DERIVE["host_ram"]),
        ),
        f["num_gpu_experts"],
        f["chunked_prefill_size"],
        f["gpu_prefill_token_threshold"],
        f["max_total_tokens"],
        f["cpuinfer_threads"],
    ).to_dict()
    return {"labels": derived.labels, "search": found, "measured_same_flags": same}


def derive_block() -> str:
    from kttune.hw.gpu_table import GPUS, pcie_gbps
    from kttune.units import times_faster

    d = derive_example()
    src, tgt = GPUS["h200"], GPUS[DERIVE["gpu"]]
    labels = d["labels"]
    count = ", ".join(f"{labels[k]} {k}" for k in ("measured", "scaled", "datasheet") if labels.get(k))
    p, same = d["search"]["pick"]["predicted"], d["measured_same_flags"]["evaluation"]["predicted"]
    decode = times_faster(p["decode_tok_s"], same["decode_tok_s"], lower_is_faster=False)
    if decode == "the same":
        decode += " (the CPU bounds decode on this box)"
    copies = "at the same" if (src.pcie_gen, src.pcie_width) == (tgt.pcie_gen, tgt.pcie_width) else "scaled to the"
    return _wrap(
        f"The first prints the GPU curves with their fitted fixed parts kept (launch-bound calls such as the "
        f"int4 repack stay as measured) and their bytes and flops terms scaled by the HBM and tensor-rate ratios "
        f"(HBM {src.hbm_gbps:g} -> {tgt.hbm_gbps:g} GB/s, BF16 {src.bf16_tflops:g} -> {tgt.bf16_tflops:g} TFLOP/s), "
        f"the copies {copies} PCIe Gen{tgt.pcie_gen} rate ({pcie_gbps(tgt.pcie_gen, tgt.pcie_width):.1f} GB/s), the "
        f"pipelines' measured overlap carried and the all-reduce from NCCL's own cost model at the PCIe datasheet "
        f"rate (no two-GPU measurement to fit it on); the CPU curves stay as measured "
        f"({count} curves). The search then picks {_flags(d['search']['pick']['flags'])}, for a predicted mean "
        f"prefill of {_s(p['mean_prefill_ms'])} on the {d['search']['workload']['name']} workload and "
        f"{p['decode_tok_s']:.1f} decode tok/s ({_s(same['mean_prefill_ms'])} and {same['decode_tok_s']:.1f} tok/s "
        f"with the measured H200s and the same flags): the cheaper GPUs make prefill "
        f"{times_faster(p['mean_prefill_ms'], same['mean_prefill_ms'], lower_is_faster=True)} and decode "
        f"{decode}."
    )


def _count(n: int, what: str) -> str:
    """'an H200', 'four H100s': a count in words for the accuracy table's prose."""
    words = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
    if n == 1:
        return f"{'an' if what[0] in 'AEFHILMNORSX' else 'a'} {what}"
    return f"{words[n] if n < len(words) else n} {what}s"


def probe_quick_block() -> str:
    """The quick probe's wall time, as benchmarks/bench_probe_quick_wall.py measured it."""
    runs = sorted(RESULTS.glob("*/probe-quick-wall*.json"))
    if not runs:
        raise SystemExit("no benchmarks/results/*/probe-quick-wall*.json: run benchmarks/bench_probe_quick_wall.py")
    parts = []
    for f in runs:
        r = json.loads(f.read_text())
        loads = r.get("load_avg_1min_before_each_run") or []
        load = (
            f"; 1-min load average {min(loads):.1f}-{max(loads):.1f} on {r['logical_cpus_visible']} CPUs"
            if loads
            else ""
        )
        note = f" ({r['note']}{load})" if r.get("note") or load else ""
        parts.append(
            f"{r['median_s']:.0f} s median, {r['min_s']:.0f}-{r['max_s']:.0f} s over {len(r['runs_s'])} runs, "
            f"on {r['machine']}{note}: `benchmarks/results/{f.relative_to(RESULTS).as_posix()}`"
        )
    return _wrap(
        "The quick probe end to end (Python start, the probe, its tables; "
        "`benchmarks/bench_probe_quick_wall.py`): " + "; ".join(parts) + "."
    )


@lru_cache(maxsize=None)
def runner_example() -> tuple[dict, list[dict]]:
    """`kttune explain ... --json > e.json`, and the path runner's rows of the results file."""
    from kttune import app
    from kttune.app import resolve
    from kttune.emit.markdown_report import read_inputs

    r = RUNNER
    inp = app.resolve_inputs(r["model"], resolve.vram_bytes(r["vram"]), 1, r["profile"])
    doc = app.explain_flags(inp, r["gpu_experts"], r["chunk"], r["threshold"], 65536, r["cpuinfer"]).to_dict()
    runs = read_inputs([RESULTS / r["results"]]).runs
    return doc, runs


def _count_words(instances: dict) -> str:
    """ "an H200, seven H100s": the GPU kinds of `bench_probe_median`'s instances, by their names."""
    words = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
    out = []
    for kind in ("H200", "H100"):
        n = sum(name.lower().startswith(kind.lower()) for name in instances)
        if n:
            out.append(f"an {kind}" if n == 1 else f"{words[n - 1] if n <= len(words) else n} {kind}s")
    return ", ".join(out)


def _pct(lo: float, hi: float) -> str:
    a, b = round(100 * lo), round(100 * hi)
    return f"{a}%" if a == b else f"{a}-{b}%"


def _derive_real_row(d: dict) -> tuple[str, str, str, str]:
    """The derive check at six models' own expert shapes (benchmarks/bench_derive.py --real-shapes)."""

    def span(rows: list[dict]) -> str:
        rs = [sum(r["derived_ms"]) / 2 / r["measured_ms"] for r in rows]
        return f"{min(rs):.2f}-{max(rs):.2f}x"

    def errs(path: str, tp: int | None = None) -> str:
        v = [r["abs_error"][path] for r in d["runs"] if path in r["abs_error"] and tp in (None, r["tp"])]
        return _pct(min(v), max(v))

    return (
        "kt-kernel MoE and prefill per forward of a derived machine, at models' own expert shapes",
        f"16-core box derived to the 32-core two-GPU box: its probes of {len(d['models'])} models, its path "
        f"runner's TP 1 and TP 2 forwards ({len(d['runs'])} jobs)",
        f"kt-kernel MoE {span([p for m in d['models'] for p in m['cpu_moe']])} (derived / measured); per "
        f"forward hybrid {errs('hybrid')}, layerwise TP 1 {errs('layerwise', 1)}, TP 2 {errs('layerwise', 2)}",
        "docs/derive.md#thread-scaling-inside-one-box-and-across-boxes",
    )


def _loop_pairs(files: tuple[str, ...]) -> tuple[list, list, list, list]:
    """Transfer results in pairs (the quick probe as it is, then less its MXFP4 pipeline curves): every
    raw error of the first, the layerwise ones of each, and the first's crossovers measured inside their
    sweep."""
    raw, lw, twin_lw, cross = [], [], [], []
    for with_loop, without in zip(files[::2], files[1::2]):
        a, b = (json.loads((RESULTS / f).read_text()) for f in (with_loop, without))
        raw += [r["raw"] for r in a["rows"]]
        lw += [r["raw"] for r in a["rows"] if r["path"] == "layerwise"]
        twin_lw += [r["raw"] for r in b["rows"] if r["path"] == "layerwise"]
        cross += [c for c in a["crossover"] if c.get("measured") and not c.get("measured_edge")]
    return raw, lw, twin_lw, cross


def mxfp4_row() -> tuple[str, str, str, str]:
    """MXFP4 through the path runner (gpt-oss), from the model's own probe and from a quick probe that
    had no MXFP4 curve."""
    doc = json.loads((RESULTS / ACCURACY["mxfp4_runner"]).read_text())
    rows = doc["rows"]

    def paths(label: str) -> list[float]:
        return [r[label][p]["mape"] for r in rows for p in ("hybrid", "layerwise")]

    bracketed = [c for r in rows for c in r["own"]["crossover"] if c["interval"]]
    quick_hybrid = [r["quick"]["hybrid"]["mape"] for r in rows]
    mq = json.loads((RESULTS / ACCURACY["mxfp4_quick"]).read_text())
    mq_raw = [r["raw"] for r in mq["rows"]]
    mq_cross = [c for c in mq["crossover"] if c.get("measured")]
    _, loop_lw, twin_lw, loop_cross = _loop_pairs(ACCURACY["mxfp4_quick_loop"])
    same_raw, same_lw, same_twin_lw, same_cross = _loop_pairs(ACCURACY["mxfp4_quick_same"])
    return (
        "MoE layer per forward and crossover for MXFP4 (gpt-oss-20b and gpt-oss-120b: kt-kernel's MXFP4 class, "
        "kttune's 4-bit GEMM with the e2m1 decode), from each model's own probe",
        f"path runner, H100 box, one instance: {sum(len(r['runs']) for r in rows)} sweeps of {len(rows)} models "
        f"({sum(r['own'][p]['forwards'] for r in rows for p in ('hybrid', 'layerwise'))} forwards), each model's "
        "own `kttune probe --model M` in the same call",
        f"raw {_pct(min(paths('own')), max(paths('own')))} per model and path; crossovers "
        + ", ".join(
            f"{c['measured']} [{c['interval'][0]:.0f}-{c['interval'][1]:.0f}] -> {c['predicted']}" for c in bracketed
        )
        + f"; the same instance's quick probe, which did not time MXFP4 then, read the hybrid path "
        f"{_pct(min(quick_hybrid), max(quick_hybrid))} fast. A quick probe that times it (another instance, "
        f"its own sweeps): raw {_pct(min(mq_raw), max(mq_raw))} per model and path, crossovers "
        f"{sum(1 for c in mq_cross if c['raw_inside_or_within_20pct'])} of {len(mq_cross)}; one that also streams "
        f"gpt-oss-20b's MXFP4 layer (a third instance, judged on the other two's sweeps): layerwise "
        f"{_pct(min(loop_lw), max(loop_lw))} ({_pct(min(twin_lw), max(twin_lw))} from RAWINT4's loop), crossovers "
        f"{sum(1 for c in loop_cross if c['raw_inside_or_within_20pct'])} of {len(loop_cross)}; the same on "
        f"its own instance's sweeps (a fourth): raw {_pct(min(same_raw), max(same_raw))} per model and path, layerwise "
        f"{_pct(min(same_lw), max(same_lw))} ({_pct(min(same_twin_lw), max(same_twin_lw))} from RAWINT4's loop), "
        f"crossovers {sum(1 for c in same_cross if c['raw_inside_or_within_20pct'])} of {len(same_cross)}",
        "docs/path-runner.md#mxfp4",
    )


def gap_read_row() -> tuple[str, str, str, str]:
    """The CPU term split at one moment (diag_gap_rounds.py --read on instance z): the runner with GPU
    experts against the runner without, and the layer and the runner against the round's quick-layer term."""

    def span(xs: list[float]) -> str:
        lo, hi = f"{min(xs):.2f}", f"{max(xs):.2f}"
        return f"{lo}x" if lo == hi else f"{lo}-{hi}x"

    cells = []
    for f in ACCURACY["gap_read"]:
        read = json.loads((RESULTS / f).read_text())
        by = {(r["candidate"], r["tokens"]): r for r in read["rows"]}
        sizes = read["sizes"]
        share = [by[("runner, GPU experts", m)]["measured_ms"] / by[("runner", m)]["measured_ms"] for m in sizes]
        layer = [by[("probe layer", m)]["over_round_term"]["ratio"] for m in sizes]
        runner = [by[("runner, GPU experts", m)]["over_round_term"]["ratio"] for m in sizes]
        n, e = read["gpu_experts"], read["experts"]
        cells.append(
            f"{read['model']} ({n} of {e} experts on the GPU, {read['rounds']} rounds at "
            f"{' and '.join(f'{m:,}' for m in sizes)} tokens): the runner with GPU experts {span(share)} the runner "
            f"without (their share {(e - n) / e:.2f}); measured over the round's quick-layer term: the layer "
            f"{span(layer)}, the runner with GPU experts {span(runner)}"
        )
    return (
        "the CPU term split at one moment: the runner's hybrid MoE with and without GPU experts, the model's "
        "layer and the quick layer carried by the shape law, timed in the same interleaved rounds",
        "path runner and kt-kernel, one H100 instance (z), `benchmarks/diag/diag_gap_rounds.py --gpu-experts N "
        "--quick-every 1`",
        "; ".join(cells),
        "docs/cost-model.md#the-instances-own-quick-probe",
    )


def accuracy_block() -> str:
    """One row per model kttune predicts with, against what measured it, read from the results."""
    from kttune.emit.figures import calibration_error

    _, runs = runner_example()
    cal = calibration_error(runs)
    models = sorted({r.get("model") for r in runs if r.get("measured_ms") and r.get("predicted_ms")})
    grids = [json.loads((RESULTS / f).read_text())["results"] for f in ACCURACY["paths"]]
    summaries = [b["summary"] for g in grids for b in g if "summary" in b]
    raw = [s["errors"][p]["mape_raw"] for s in summaries for p in ("hybrid", "layerwise")]
    held = [s["errors"][p]["mape_calibrated_held_out"] for s in summaries for p in ("hybrid", "layerwise")]
    cross = [c for s in summaries for c in s["crossover"].values() if c.get("measured")]
    latest = [b["summary"] for b in grids[0] if "summary" in b]
    peaks = [
        m["predicted_bytes"] / m["measured_peak_bytes"]
        for s in latest
        for m in s["memory"]
        if 4096 <= m["chunk"] <= 65536 and m.get("measured_peak_bytes")
    ]
    host = json.loads((RESULTS / ACCURACY["host_ram"]).read_text())["points"]
    derive = json.loads((RESULTS / ACCURACY["derive"]).read_text())
    ms = json.loads((RESULTS / ACCURACY["measured_search"]).read_text())
    rows = [
        (
            "prefill of a whole prompt (K = 2 layers)",
            f"path runner, H200 box: {cal['n']} runs, {len(models)} models",
            f"median {cal['median_abs_rel']:.0%}, worst {cal['max_abs_rel']:.0%}",
            "docs/path-runner.md#results",
        ),
        (
            "MoE layer per forward, hybrid and layerwise",
            f"that grid and the same one an hour earlier, {len(models)} models each",
            f"raw {_pct(min(raw), max(raw))}, calibrated (held out) {_pct(min(held), max(held))}",
            "docs/path-runner.md#results",
        ),
        (
            "crossover (where layerwise starts to win)",
            f"forced single forwards on each path, {len(cross)} crossovers",
            f"calibrated without the runs that measure it {_pct(min(c['error_calibrated'] for c in cross), max(c['error_calibrated'] for c in cross))}, "
            f"raw {_pct(min(c['error'] for c in cross), max(c['error'] for c in cross))}",
            "docs/path-runner.md#results",
        ),
        (
            "peak VRAM",
            f"{len(peaks)} runner peaks at chunks 4,096-65,536",
            f"predicted / measured {min(peaks):.3f}-{max(peaks):.3f}",
            "docs/memory.md#checked-against-the-path-runner",
        ),
        (
            "host RAM (kt-kernel's scratch)",
            f"{len(host)} real kt-kernel allocations, 2-core AMX VM",
            f"within {max(abs(p['pred_over_reserved'] - 1) for p in host):.0%} of the reservation",
            "docs/memory.md#kt-kernels-scratch-read-from-its-source-and-measured",
        ),
        (
            "CPU MoE and stage A of a derived machine",
            f"16-core box derived to 32 cores: {len(derive['points'])} points of the measured 32-core box",
            f"within {derive['worst_factor']:.2f}x",
            "docs/derive.md#cpu-kt-kernels-measured-per-core-throughput",
        ),
        _derive_real_row(json.loads((RESULTS / ACCURACY["derive_real"]).read_text())),
        (
            "`search --measure`'s pick",
            f"a measured grid on the H200 box ({ms['model']}, {ms['vram']})",
            f"throughput {ms['pick_over_grid_optimum']:.2f}x the grid optimum's, in {ms['search']['measured_trials']} measured trials",
            f"benchmarks/results/{ACCURACY['measured_search'].removesuffix('.json')}.md",
        ),
    ]
    tr = json.loads((RESULTS / ACCURACY["transfer"]).read_text())
    raw = [r["raw"] for r in tr["rows"]]
    cal = [r["calibrated_own_lopo"] for r in tr["rows"]]
    over = sorted(f"{r['model']} {r['path']} {r['raw']:.0%}" for r in tr["rows"] if r["raw"] > 0.15)
    rows.append(
        (
            "MoE layer per forward on models it was not corrected on (leave one model out)",
            f"path runner, H200 box: {sum(r['points'] for r in tr['rows'])} forwards of {len(tr['models'])} models "
            f"at grid and space-filling design points",
            f"raw {min(raw):.0%}-{max(raw):.0%} per model and path"
            + (f" (over 15%: {', '.join(over)})" if over else "")
            + f"; calibrated on the model's own runs, each forward held out, {min(cal):.0%}-{max(cal):.0%}",
            "docs/cost-model.md#how-far-to-trust-it",
        )
    )
    qt = json.loads((RESULTS / ACCURACY["quick_transfer"]).read_text())
    qs, ss = qt["summary"]["quick"], qt["summary"]["shipped"]
    worst = [q["worst_per_path"] for q in qt["quick_probes"]]
    rows.append(
        (
            "MoE layer per forward and crossover on models the profile never measured, from the serving instance's "
            "own `kttune probe --quick` (no model)",
            f"path runner, H200 box, {qs['instances']} instances: {len(qt['groups'])} quick probes, each followed by the runner's "
            f"sweeps ({qs['runs']} sweeps of {len({r['model'] for r in qt['rows']})} models, 3 repeats)",
            f"per model and path raw {_pct(qs['per_path_min'], qs['per_path_max'])} (worst per call "
            + " / ".join(f"{w:.0%}" for w in worst)
            + f"; the quick probes had {' / '.join(str(q['scattered']) for q in qt['quick_probes'])} of "
            f"{qt['quick_probes'][0]['cpu_moe_points']} CPU points scattered beyond 2x; mean {qs['per_path_mean']:.0%}; "
            f"both paths within 15% in {qs['runs_both_paths_within_target']} of {qs['runs']}), calibrated on own runs "
            f"(held out) at most {qs['calibrated_max']:.0%}; crossovers {qs['crossovers_agree']} of {qs['crossovers']} "
            f"inside or within 20%. From the shipped profile (another instance) on the same runs "
            f"{_pct(ss['per_path_min'], ss['per_path_max'])} ({ss['runs_both_paths_within_target']} of {ss['runs']}), "
            f"crossovers {ss['crossovers_agree']} of {ss['crossovers']}",
            "docs/cost-model.md#the-instances-own-quick-probe",
        )
    )
    si = [r["profiles"]["same machine"] for r in json.loads((RESULTS / ACCURACY["same_instance"]).read_text())["rows"]]
    si_x = [c for d in si for c in d["crossover"] if c.get("error") is not None]
    si_raw = [d[p]["mape"] for d in si for p in ("hybrid", "layerwise") if d[p]["mape"] is not None]
    si_cal = [v for d in si for v in d["calibrated_held_out"].values() if v is not None]
    rows.append(
        (
            "crossover and MoE layer per forward, from a `kttune probe --model` of the machine instance the runs ran on",
            f"path runner, H200 box, one instance: {len(si)} models, {len(si_x)} crossovers with intervals",
            f"crossover {_pct(min(c['error'] for c in si_x), max(c['error'] for c in si_x))} "
            f"({sum(1 for c in si_x if c['inside_interval'])} inside the measured interval); per forward raw "
            f"{_pct(min(si_raw), max(si_raw))}, calibrated (held out) {_pct(min(si_cal), max(si_cal))}",
            "docs/cost-model.md#one-machine-instance-seven-models",
        )
    )
    # leave one model out on that instance: the models whose method another model's probe measured
    lo = [
        r["profiles"]["other models, same instance"]
        for r in json.loads((RESULTS / ACCURACY["lomo_instance"]).read_text())["rows"]
    ]
    lo = [d for d in lo if not any("was not measured on this profile" in n for n in d["borrowed"])]
    lo_x = [c for d in lo for c in d["crossover"] if c.get("error") is not None]
    lo_raw = [d[p]["mape"] for d in lo for p in ("hybrid", "layerwise") if d[p]["mape"] is not None]
    rows.append(
        (
            "MoE layer per forward and crossover on a model left out, the machine instance fixed",
            f"the same instance's runs, each model predicted from the other models' probes ({len(lo)} models whose "
            "method another model measured)",
            f"per forward raw {_pct(min(lo_raw), max(lo_raw))}; crossover {_pct(min(c['error'] for c in lo_x), max(c['error'] for c in lo_x))} "
            f"({sum(1 for c in lo_x if c['inside_interval'])} inside the measured interval)",
            "docs/cost-model.md#one-machine-instance-seven-models",
        )
    )
    sw = json.loads((RESULTS / ACCURACY["switch_sweeps"]).read_text())["rows"]
    sw_raw = [r["profiles"]["same machine"]["hybrid"]["mape"] for r in sw]
    sw_cal = [r["profiles"]["same machine"]["calibrated_held_out"]["hybrid"] for r in sw]
    sw_n = sum(r["profiles"]["same machine"]["hybrid"]["forwards"] for r in sw)
    rows.append(
        (
            "hybrid MoE layer per forward across kt-kernel's switch of GEMM kernels (4E/k tokens), at lengths the "
            "probe did not measure",
            f"path runner, H200 box: {sw_n} forward sizes of {len(sw)} models (Kimi-K2 160-288 tokens, four BF16 "
            "models 40-136), probe of the same device call",
            f"raw {_pct(min(sw_raw), max(sw_raw))}, calibrated (held out) {_pct(min(sw_cal), max(sw_cal))}",
            "docs/cost-model.md#kt-kernels-two-gemm-kernels",
        )
    )
    nm = json.loads((RESULTS / ACCURACY["new_models"]).read_text())["rows"]
    nm_raw = [r["profiles"]["same machine"][p]["mape"] for r in nm for p in ("hybrid", "layerwise")]
    nm_x = [c for r in nm for c in r["profiles"]["same machine"]["crossover"] if c.get("error") is not None]
    nm_ship = [r["profiles"]["shipped"]["hybrid"]["mape"] for r in nm]
    rows.append(
        (
            "MoE layer per forward and crossover on two models of shapes no curve or fit had "
            "(Mixtral-8x7B: 8 experts of 176M parameters; Qwen3-Next-80B-A3B: 512 of 3.1M)",
            f"path runner, H200 box: {len(nm)} sweeps on 3 instances, probe of the same device call",
            f"raw {_pct(min(nm_raw), max(nm_raw))}; crossover "
            + ", ".join(f"{c['error']:.0%}" + (" (inside)" if c["inside_interval"] else "") for c in nm_x)
            + f"; from the shipped profile instead, hybrid {_pct(min(nm_ship), max(nm_ship))}",
            "docs/cost-model.md#two-models-off-every-grid",
        )
    )
    sl = json.loads((RESULTS / ACCURACY["shape_law"]).read_text())["rows"]

    def hybrid(label: str) -> list[float]:
        return [r["profiles"][label]["hybrid"]["mape"] for r in sl]

    def crossings(label: str) -> list[dict]:
        return [c for r in sl for c in r["profiles"][label]["crossover"] if c.get("error") is not None]

    law, flops = crossings("shipped"), crossings("shipped, flops alone")
    rows.append(
        (
            "hybrid MoE layer per forward and crossover from the shipped profile on models whose expert it never "
            "measured, with the expert-shape law (a cost per output element)",
            f"path runner, H200 box, one instance: {len(sl)} sweeps of "
            f"{len({r['model'] for r in sl})} models in BF16 (GLM-4.7 5,120 x 1,536, Qwen3-235B-A22B 4,096 x 1,536)",
            f"hybrid {_pct(min(hybrid('shipped')), max(hybrid('shipped')))} (by flops alone "
            f"{_pct(min(hybrid('shipped, flops alone')), max(hybrid('shipped, flops alone')))}); crossover "
            f"{_pct(min(c['error'] for c in law), max(c['error'] for c in law))}, "
            f"{sum(1 for c in law if c['inside_interval'])} of {len(law)} inside (by flops alone "
            f"{_pct(min(c['error'] for c in flops), max(c['error'] for c in flops))}, "
            f"{sum(1 for c in flops if c['inside_interval'])} inside)",
            "docs/cost-model.md#the-expert-shape-law",
        )
    )
    slp_runs = [json.loads((RESULTS / f).read_text())["rows"] for f in ACCURACY["shape_law_probe"]]

    def per_source(rows_: list[dict], label: str) -> list[float]:
        """Each model's mean |error| with the r of `label`."""
        return [sum(abs(e) for e in r["errors"][label]) / len(r["errors"][label]) for r in rows_ if r["errors"][label]]

    def means(labels) -> list[float]:
        return [sum(v) / len(v) for rows_ in slp_runs for lab in labels(rows_) if (v := per_source(rows_, lab))]

    own = means(lambda rows_: [k for k in rows_[0]["errors"] if k not in ("flops alone", "constant")])
    const, flops = means(lambda rows_: ["constant"]), means(lambda rows_: ["flops alone"])
    rows.append(
        (
            "kt-kernel MoE at expert shapes the probe did not measure, with the cost per output element the probe "
            "measures itself (`--shape-law`: what a kt-kernel build outside the project's table gets)",
            f"H200 box, {len(slp_runs)} instances: a quick probe with its shape sets ({len(own)} sets), then "
            f"{len(slp_runs[0])} models' own curves ({len({r['method'] for r in slp_runs[0]})} methods)",
            f"mean over the models {_pct(min(own), max(own))}; with the table's constants "
            f"{_pct(min(const), max(const))}, by flops alone {_pct(min(flops), max(flops))}",
            "docs/cost-model.md#the-probe-measures-r-itself",
        )
    )
    tp = [json.loads((RESULTS / f).read_text()) for f in ACCURACY["tp_two_gpus"]]
    tp2 = [j for d in tp for j in d["jobs"] if j["tp"] == 2]
    tp_err = {p: [j["predicted"]["probe"]["mape"][p] for j in tp2] for p in ("hybrid", "layerwise")}
    tp_x = [
        (j["crossover"], j["predicted"]["probe"]["crossover"])
        for j in tp2
        if j["crossover"] and j["crossover"]["x"] is not None and j["predicted"]["probe"]["crossover"]
    ]
    tp_inside = sum(1 for c, p in tp_x if c["low"] <= p <= c["high"])
    tp_ratio = [
        abs(r["predicted"]["probe"] - r["measured"][0])
        for d in tp
        for r in d["ratios"]
        if r["path"] == "layerwise" and "probe" in r["predicted"]
    ]
    rows.append(
        (
            "MoE layer per forward and crossover at TP 2 (sglang-kt's TP layerwise loop), from a `kttune probe --model` "
            "of the same instance",
            f"path runner on two H200s, 32-core AMX host at 28 threads: {len(tp)} models of 3 methods, TP 2 and TP 1 "
            f"in alternating processes ({len(tp2)} TP 2 jobs)",
            f"TP 2 layerwise {_pct(min(tp_err['layerwise']), max(tp_err['layerwise']))}, hybrid "
            f"{_pct(min(tp_err['hybrid']), max(tp_err['hybrid']))}; {tp_inside} of {len(tp_x)} measured crossovers "
            f"inside their interval; TP 2 / TP 1 layerwise time within {max(tp_ratio):.2f} of the measured ratio",
            "docs/cost-model.md#tp-layerwise-load",
        )
    )
    ti = json.loads((RESULTS / ACCURACY["thread_interp"]).read_text())
    moe = [r for r in ti["summary"] if r["kind"] == "cpu_moe"]
    runner = ti["runner"]["rows"]

    def per_forward(path: str, which: str) -> float:
        rs = [r for r in runner if r["path"] == path]
        return sum(r[which] * r["forwards"] for r in rs) / sum(r["forwards"] for r in rs)

    rows.append(
        (
            "kt-kernel MoE and MoE layer per forward at a `--kt-cpuinfer` the profile did not measure, between two "
            "it did",
            f"H200 box: each inner thread count left out and read from its neighbours ({sum(r['points'] for r in moe)} "
            f"kt-kernel MoE points at {len(moe)} held-out counts); the path runner's "
            f"{sum(r['forwards'] for r in runner)} forwards at {ti['runner']['held']} threads",
            f"kt-kernel MoE {_pct(min(r['interpolated_mean'] for r in moe), max(r['interpolated_mean'] for r in moe))} "
            f"(the nearest count below {_pct(min(r['nearest_below_mean'] for r in moe), max(r['nearest_below_mean'] for r in moe))}); "
            f"per forward hybrid {per_forward('hybrid', 'interpolated'):.0%}, layerwise "
            f"{per_forward('layerwise', 'interpolated'):.0%} (with the count measured "
            f"{per_forward('hybrid', 'measured'):.0%}, {per_forward('layerwise', 'measured'):.0%})",
            "docs/cost-model.md#a-thread-count-between-two-measured",
        )
    )
    # per model and path; the "all" rows are the report's alone
    tir = [json.loads((RESULTS / f).read_text()) for f in ACCURACY["thread_interp_runner"]]
    tir_rows = [r for t in tir for r in t["runner"]["rows"]]
    t12 = [json.loads((RESULTS / f).read_text()) for f in ACCURACY["thread_interp_runner_t12"]]
    t12_rows = [r for t in t12 for r in t["runner"]["rows"]]

    def tir_span(rs: list[dict], path: str, which: str) -> str:
        xs = [r[which] for r in rs if r["path"] == path]
        return _pct(min(xs), max(xs))

    def tir_read(rs: list[dict], lo: int, hi: int, mid: int) -> str:
        return (
            f"read from {lo} and {hi}: hybrid {tir_span(rs, 'hybrid', 'interpolated')}, layerwise "
            f"{tir_span(rs, 'layerwise', 'interpolated')} (with {mid} measured: {tir_span(rs, 'hybrid', 'measured')}, "
            f"{tir_span(rs, 'layerwise', 'measured')})"
        )

    rows.append(
        (
            "MoE layer per forward at a `--kt-cpuinfer` between two measured, the model's own shape measured at both",
            f"path runner, H100 box (two instances): `kttune probe --model X --threads 11,13,15` and the runner's sweep "
            f"at 13 threads, {len(tir)} models ({sum(r['forwards'] for r in tir_rows)} forwards); `--threads 9,12,15` "
            f"and the sweep at 12, {len(t12)} models ({sum(r['forwards'] for r in t12_rows)} forwards)",
            f"{tir_read(tir_rows, 11, 15, 13)}; {tir_read(t12_rows, 9, 15, 12)}",
            "docs/cost-model.md#a-thread-count-between-two-measured",
        )
    )
    hd = json.loads((RESULTS / ACCURACY["h100_derived"]).read_text())
    hs = json.loads((RESULTS / ACCURACY["h100_shipped"]).read_text())

    def lw(doc: dict, src: str) -> list[float]:
        return [r[src]["layerwise"]["mape"] for r in doc["rows"]]

    dq, ds = hd["summary"]["quick"], hd["summary"]["shipped"]
    rows.append(
        (
            "MoE layer per forward and crossover on another GPU: the H200 profile derived to an H100, and the H100's "
            "own `kttune probe --quick`",
            f"path runner, H100 box (same CPU kind, one instance): {dq['runs']} sweeps of {dq['runs']} models, 3 repeats",
            f"derived: per model and path {_pct(ds['per_path_min'], ds['per_path_max'])}, layerwise "
            f"{_pct(min(lw(hd, 'shipped')), max(lw(hd, 'shipped')))} (the H200 profile as it is: "
            f"{_pct(min(lw(hs, 'shipped')), max(lw(hs, 'shipped')))}), crossovers {ds['crossovers_agree']} of "
            f"{ds['crossovers']}; quick probe: {_pct(dq['per_path_min'], dq['per_path_max'])}, crossovers "
            f"{dq['crossovers_agree']} of {dq['crossovers']}",
            "docs/cost-model.md#the-instances-own-quick-probe",
        )
    )
    pm = json.loads((RESULTS / ACCURACY["probe_median"]).read_text())["instances"]
    medians, singles, worst_beaten = [], [], 0
    for inst in pm.values():
        ones = [r for r in inst["rows"] if r["source"].startswith("probe ")]
        full = [r for r in inst["rows"] if r["source"].startswith("median")][-1]  # the median of every probe
        medians.append(full)
        singles += ones
        worst_beaten += full["per_path_mean"] < max(r["per_path_mean"] for r in ones)
    rows.append(
        (
            "MoE layer per forward and crossover from the median of repeated quick probes (`kttune probe --repeat N`, "
            "`kttune profile merge`) against one probe",
            f"path runner, {len(pm)} instances ({_count_words(pm)}) each probed 2-3 times in the calls of its sweeps "
            f"({sum(len(i['sweeps']) for i in pm.values())} sweeps)",
            f"per instance, the median of its probes "
            f"{_pct(min(r['per_path_mean'] for r in medians), max(r['per_path_mean'] for r in medians))} "
            f"(worst {max(r['per_path_max'] for r in medians):.0%}), crossovers "
            f"{sum(r['crossovers_agree'] for r in medians)} of {sum(r['crossovers'] for r in medians)}; one probe "
            f"{_pct(min(r['per_path_mean'] for r in singles), max(r['per_path_mean'] for r in singles))} "
            f"(worst {max(r['per_path_max'] for r in singles):.0%}); the median below the instance's worst probe "
            f"in {worst_beaten} of {len(pm)}",
            "docs/probe.md#repeated-probes",
        )
    )
    merged, first = (json.loads((RESULTS / f).read_text()) for f in ACCURACY["newest_lomo"])

    def lomo(d: dict) -> tuple[str, int, int, int]:
        raw = [r["raw"] for r in d["rows"]]
        agree = sum(bool(c["raw_inside_or_within_20pct"]) for c in d["crossover"])
        return _pct(min(raw), max(raw)), sum(x > 0.15 for x in raw), len(raw), agree

    def cal_range(d: dict) -> str:
        cal = [r["calibrated_own_lopo"] for r in d["rows"] if r["calibrated_own_lopo"] is not None]
        return _pct(min(cal), max(cal))

    m_raw, m_over, n_paths, m_cross = lomo(merged)
    f_raw, f_over, _, f_cross = lomo(first)
    rows.append(
        (
            "MoE layer per forward and crossover on models the profile never measured, from two quick probes of the "
            "serving instance merged (`kttune probe --quick --repeat 2`), each model left out of every correction",
            f"path runner, H100 box, one instance: {len(merged['crossover'])} sweeps of {len(merged['models'])} models "
            f"({merged['points']} forwards)",
            f"raw {m_raw} per model and path ({m_over} of {n_paths} over 15%), calibrated (held out) "
            f"{cal_range(merged)}; crossovers {m_cross} of {len(merged['crossover'])}; from the first probe "
            f"alone raw {f_raw} ({f_over} over 15%), crossovers {f_cross} of {len(first['crossover'])}",
            "docs/cost-model.md#the-instances-own-quick-probe",
        )
    )
    ab, c = (json.loads((RESULTS / f).read_text()) for f in ACCURACY["h200_lomo"])
    ab_raw, ab_over, _, ab_cross = lomo(ab)
    c_raw, c_over, _, c_cross = lomo(c)
    rows.append(
        (
            "the same on the H200 box (the leave-one-model-out table of issue 22 from the serving instance's own "
            "quick probes)",
            f"path runner, H200 box: one instance's two quick probes merged, {len(ab['crossover'])} sweeps of "
            f"{len(ab['models'])} models ({ab['points']} forwards); another instance's one probe, "
            f"{len(c['crossover'])} sweeps",
            f"merged: raw {ab_raw} ({ab_over} of {len(ab['rows'])} over 15%), calibrated (held out) {cal_range(ab)}, "
            f"crossovers {ab_cross} of {len(ab['crossover'])}; one probe: raw {c_raw} ({c_over} over 15%), "
            f"calibrated {cal_range(c)}, crossovers {c_cross} of {len(c['crossover'])}",
            "docs/cost-model.md#the-instances-own-quick-probe",
        )
    )
    busy, noise = (json.loads((RESULTS / f).read_text()) for f in ACCURACY["h200_busy"])
    b_raw, b_over, b_paths, b_cross = lomo(busy)
    calls = {r["call"]: r for r in noise["rows"]}
    f_call = calls["h200f"]
    others = [r["runner"]["cv_median"] for k, r in calls.items() if k != "h200f"]
    rows.append(
        (
            "the same on a busy H200 instance (the probe names it: more than 5% of its points disturbed)",
            f"path runner, H200 box, one instance: three quick probes merged, {len(busy['crossover'])} sweeps of "
            f"{len(busy['models'])} models ({busy['points']} forwards); its runner's repeats scattered "
            f"{f_call['runner']['cv_median']:.1%} (median coefficient of variation) against "
            f"{100 * min(others):.1f}-{100 * max(others):.1f}% on the other {len(others)} calls",
            f"raw {b_raw} ({b_over} of {b_paths} over 15%), calibrated (held out) {cal_range(busy)}, crossovers "
            f"{b_cross} of {len(busy['crossover'])}; its probes named "
            f"{', '.join(str(p['named']) for p in f_call['probes'])} of {f_call['probes'][0]['points']} points",
            "docs/probe.md#a-busy-machine",
        )
    )
    h100 = [json.loads((RESULTS / f).read_text()) for f in ACCURACY["h100_lomo"]]
    raw_ok = [sum(r["raw"] <= 0.15 for r in d["rows"]) for d in h100]
    cal = [[r["calibrated_own_lopo"] for r in d["rows"] if r["calibrated_own_lopo"] is not None] for d in h100]
    cal_ok = [sum(x <= 0.10 for x in c) for c in cal]
    paths = [len(d["rows"]) for d in h100]
    cross_ok = sum(sum(bool(c["raw_inside_or_within_20pct"]) for c in d["crossover"]) for d in h100)
    rows.append(
        (
            "the same on the H100 box, instance by instance",
            f"path runner, H100 box: {len(h100)} instances, each from its own quick probes (one, or two to four merged), "
            f"{sum(len(d['crossover']) for d in h100)} sweeps of {min(len(d['models']) for d in h100)}-"
            f"{max(len(d['models']) for d in h100)} models ({sum(d['points'] for d in h100)} forwards)",
            f"per model and path raw within 15%: {sum(raw_ok)} of {sum(paths)} ({min(raw_ok)}-{max(raw_ok)} of "
            f"{min(paths)}-{max(paths)} per instance; every path on {sum(o == n for o, n in zip(raw_ok, paths))} of "
            f"{len(h100)} instances); calibrated on own runs (held out) within 10%: {sum(cal_ok)} of "
            f"{sum(len(c) for c in cal)} (every path on {sum(o == len(c) for o, c in zip(cal_ok, cal))} of {len(h100)}); "
            f"crossovers {cross_ok} of {sum(len(d['crossover']) for d in h100)}",
            "docs/cost-model.md#the-instances-own-quick-probe",
        )
    )
    ols = [
        (Path(f).stem.removeprefix("own-layer-h100"), json.loads((RESULTS / f).read_text()))
        for f in ACCURACY["own_layer"]
    ]

    def cell(summary: dict) -> str:
        return (
            f"{summary['within_target']} of {summary['paths']} (mean {summary['mean']:.0%}, worst "
            f"{summary['max']:.0%}), crossovers {summary['crossovers_agree']} of {summary['crossovers']}"
        )

    rows.append(
        (
            "the same on H100 instances from `kttune probe --model M` of each model (its own layer) against "
            "the quick probe",
            f"path runner, {len(ols)} H100 instances ({', '.join(n for n, _ in ols)}): "
            f"{', '.join(str(len(o['rows'])) for _, o in ols)} models' sweeps, then each model's own probe in the "
            "same instance",
            "paths within 15%: "
            + "; ".join(
                f"{n}: own layer {cell(o['summary']['own layer (--model)'])}, first quick probe "
                f"{cell(o['summary']['first quick probe'])}"
                for n, o in ols
            ),
            "docs/cost-model.md#the-instances-own-quick-probe",
        )
    )
    rows.append(mxfp4_row())
    rows.append(gap_read_row())
    rr_doc = json.loads((RESULTS / ACCURACY["runner_repeat"]).read_text())
    rr, boxes = rr_doc["summary"], ["h200" in p["folder"] for p in rr_doc["pairs"]]
    rows.append(
        (
            "nothing: the path runner's sweep against a second sweep of the same instance (the floor under every row)",
            f"the same forced sweep twice on one instance, minutes apart: {rr['sweeps']} pairs of sweeps, "
            f"{len(boxes)} instances ({_count(sum(boxes), 'H200')}, {_count(len(boxes) - sum(boxes), 'H100')})",
            f"per model and path {rr['per_path_mean']:.0%} mean, worst {rr['per_path_max']:.0%} "
            f"({rr['per_path_over_15']} of {rr['per_path_count']} over 15%), worst forward {rr['worst_forward']:.0%}; "
            f"crossovers {rr['crossovers_agree']} of {rr['crossovers']} agree",
            "docs/cost-model.md#the-runner-against-itself",
        )
    )
    pl = json.loads((RESULTS / ACCURACY["pipeline_loop"]).read_text())["summary"]
    rows.append(
        (
            "layerwise load of a layer the quick probe did not stream, from its method's curve timed in sglang-kt's "
            "loop (against the stream configuration the quick probe timed alone before)",
            "the loop of 4 models' own probes, one H200 instance; the path runner's layerwise forwards of 9 models, "
            "an H100 instance",
            f"probe against probe {pl['probe_against_probe_mean_abs']['loop']:.0%} mean "
            f"(before {pl['probe_against_probe_mean_abs']['stream_alone']:.0%}); runner "
            f"{pl['runner_layerwise_mean']['loop']:.0%} (before {pl['runner_layerwise_mean']['stream_alone']:.0%})",
            "docs/probe.md#the-pipeline",
        )
    )
    pn = json.loads((RESULTS / ACCURACY["pipeline_narrow"]).read_text())["probes"]
    rows.append(
        (
            "layerwise load of a layer the quick probe did not stream, from two expert sizes of its method (a "
            "narrow layer beside the representative one: a cost per step apart from a cost per byte)",
            f"the path runner's layerwise forwards of 9 models, "
            f"{len({p['probe'].split(' ')[0].split('-')[0] for p in pn})} H100 instances, {len(pn)} quick probes",
            f"mean per probe {_pct(min(p['mean']['with_narrow'] for p in pn), max(p['mean']['with_narrow'] for p in pn))} "
            f"(from the representative layer alone "
            f"{_pct(min(p['mean']['base'] for p in pn), max(p['mean']['base'] for p in pn))}), lower in "
            f"{sum(p['mean']['with_narrow'] < p['mean']['base'] for p in pn)} of {len(pn)} probes",
            "docs/probe.md#the-pipeline",
        )
    )
    boxes = json.loads((RESULTS / ACCURACY["hybrid_bias"]).read_text())["boxes"]
    hb, h200 = boxes["H100"], boxes["H200"]["summary"]["hybrid"]["all"]
    hyb, lw = hb["summary"]["hybrid"], hb["summary"]["layerwise"]
    n_probes = len({(r["call"], r["probe"]) for r in hb["rows"]})
    own = json.loads((RESULTS / ACCURACY["hybrid_bias"]).read_text())["own_layer"]
    own_h100 = [r["hybrid"] for r in own if r["box"] == "H100"]
    own_h200 = [r["hybrid"] for r in own if r["box"] == "H200"]

    gen = {
        (g["box"], g["generation"]): g["hybrid"]
        for g in json.loads((RESULTS / ACCURACY["cpu_generation"]).read_text())["groups"]
        if g["group"] == "BF16 models"
    }

    def by_gen(box: str, cpu: str) -> str:
        g = gen[(box, cpu)]
        return (
            f"{g['median']:+.0%} ({g['min']:+.0%} to {g['max']:+.0%}; {g['fast']} fast, {g['slow']} slow of {g['n']})"
        )

    rows.append(
        (
            "which way a quick probe errs, per path (a bias every probe of a host shares, which `--repeat` does "
            "not remove)",
            f"path runner, H100 box: {n_probes} quick probes of {len(hb['calls'])} calls, each predicting its call's "
            f"sweeps ({hyb['all']['n']} probe and sweep pairs); H200 box: {h200['n']} pairs",
            f"H100: hybrid read fast, median {hyb['all']['median']:+.0%}, {hyb['all']['fast']} of {hyb['all']['n']} "
            f"pairs fast and {hyb['all']['slow']} slow (RAWINT4 slow, {hyb['kimi-k2-thinking']['median']:+.0%}); "
            f"layerwise median {lw['all']['median']:+.0%} ({lw['all']['fast']} fast, {lw['all']['slow']} slow). "
            f"H200: hybrid median {h200['median']:+.0%} ({h200['fast']} fast, {h200['slow']} slow). The model's "
            f"own layer probed (`--model`, past the cache) beside its sweeps reads the same way: H100 "
            f"{min(own_h100):+.0%} to {max(own_h100):+.0%} ({len(own_h100)} models, at 13 threads, where the runner's own threads take cores), H200 {min(own_h200):+.0%} to "
            f"{max(own_h200):+.0%} (median {statistics.median(own_h200):+.0%}, {len(own_h200)} pairs). By the "
            f"instance's CPU generation (lscpu's family and model; every instance names its CPU alike), every call's "
            f"own quick probes read the BF16 models' hybrid paths {by_gen('H100', 'Emerald Rapids')} on the H100 "
            f"box's Emerald Rapids instances, {by_gen('H100', 'Sapphire Rapids')} on its Sapphire Rapids ones and "
            f"{by_gen('H200', 'Emerald Rapids')} on the H200 box's: the sign is mostly the CPU's, the spread within "
            "one generation the instance's",
            "docs/cost-model.md#the-instances-own-quick-probe",
        )
    )
    tunes = [m for f in ACCURACY["tune"] for m in json.loads((RESULTS / f).read_text())["models"]]
    h2h = [m["head_to_head"] for m in tunes if m.get("head_to_head")]
    ratios = [h["pick_over_optimum"]["ratio"] for h in h2h]
    inside = sum(1 for h in h2h if h["within_3pct_or_inside_interval"])
    walls = [m["tune"]["wall_s"] for m in tunes]
    rows.append(
        (
            "`kttune tune`'s pick",
            f"measured grids of 24 configurations x 3 rounds on the H200 box, "
            f"{len({m['model'] for m in tunes if m.get('head_to_head')})} models, {len(h2h)} runs",
            f"{inside} of {len(h2h)} within 3% of the optimum or inside its interval, worst "
            f"{min(ratios):.3f}x; tune took {min(walls):.0f}-{max(walls):.0f} s",
            "docs/tune.md#on-the-h200-box",
        )
    )
    lines = ["| kttune predicts | measured by | error | details |", "|---|---|---|---|"]
    lines += [f"| {what} | {by} | {err} | [{Path(link).name.split('#')[0]}]({link}) |" for what, by, err, link in rows]
    return "\n".join(lines) + "\n"


BLOCKS = {
    "main-job": main_job_block,
    "prefill-figure": prefill_figure_block,
    "derive-example": derive_block,
    "probe-quick": probe_quick_block,
    "accuracy": accuracy_block,
}


# ---- the PNGs: what each shows, in its metadata ---------------------------------------------------


def figure_descriptions() -> dict[str, str]:
    """docs/figures/<name>.png -> the text its PNG metadata must hold (what configuration it shows)."""
    d = main_job()
    doc, runs = runner_example()
    ef = doc["evaluation"]["flags"]
    n = len([r for r in runs if r.get("measured_ms")])
    return {
        "qwen3-30b-a3b-prefill.png": f"kttune search {d['model']['name']} seed 1: {_flags(d['pick']['flags'])}",
        "qwen3-30b-a3b-prefill-measured.png": f"kttune explain {doc['model']['name']}: {_flags(ef)}; {n} path-runner runs",
        "paths-h200-calibration.png": f"path runner {RUNNER['results']}: {n} runs",
    }


def write_figures() -> list[Path]:
    from kttune.emit import figures as F

    d = main_job()
    doc, runs = runner_example()
    made = {
        "qwen3-30b-a3b-prefill.png": F.fig_prefill(d),
        "qwen3-30b-a3b-prefill-measured.png": F.fig_prefill(doc, runs),
        "paths-h200-calibration.png": F.fig_calibration(runs, doc),
    }
    out = []
    for name, fig in made.items():
        path = FIGURES / name
        fig.savefig(path, dpi=110, format="png", metadata={PNG_KEY: figure_descriptions()[name]})
        out.append(path)
    return out


def png_text(path: Path) -> dict[str, str]:
    """The tEXt/iTXt chunks of a PNG (the standard's layout: length, type, data, CRC)."""
    import struct
    import zlib

    data = path.read_bytes()
    pos, out = 8, {}
    while pos + 8 <= len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"tEXt":
            key, _, text = body.partition(b"\0")
            out[key.decode("latin-1")] = text.decode("latin-1")
        elif kind == b"iTXt":
            key, _, rest = body.partition(b"\0")
            compressed, rest = rest[0], rest[2:]
            _lang, _, rest = rest.partition(b"\0")
            _tkey, _, text = rest.partition(b"\0")
            out[key.decode("latin-1")] = (zlib.decompress(text) if compressed else text).decode("utf-8")
        pos += 12 + length
    return out


# ---- the pages ---------------------------------------------------------------------------------


def rendered(text: str) -> str:
    """A page's text with every figures block made anew."""
    names = [m.group("name") for m in BLOCK_RE.finditer(text)]
    unknown = sorted(set(names) - set(BLOCKS))
    if unknown:
        raise SystemExit(f"figures blocks no function makes: {unknown}")
    return BLOCK_RE.sub(
        lambda m: f"<!-- figures:{m.group('name')} -->\n{BLOCKS[m.group('name')]()}<!-- /figures -->", text
    )


def blocks_by_page() -> dict[Path, list[str]]:
    """The figures blocks each page holds, in order (pages without one left out)."""
    found = {p: [m.group("name") for m in BLOCK_RE.finditer(p.read_text())] for p in PAGES}
    return {p: names for p, names in found.items() if names}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the pages' blocks and docs/figures/*.png")
    args = ap.parse_args(argv)
    fresh_machine()
    stale_pages = []
    for page, names in blocks_by_page().items():
        old = page.read_text()
        new = rendered(old)
        rel = page.relative_to(ROOT).as_posix()
        if args.write:
            if new != old:
                page.write_text(new)
            print(f"{rel} figures blocks: " + ", ".join(names))
        elif new != old:
            stale_pages.append(rel)
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), rel, "made"))
    if args.write:
        for p in write_figures():
            print(f"wrote {p.relative_to(ROOT)}")
        return 0
    stale = [name for name, want in figure_descriptions().items() if png_text(FIGURES / name).get(PNG_KEY) != want]
    if not stale_pages and not stale:
        print("the pages' figures blocks and docs/figures are up to date")
        return 0
    for name in stale:
        print(f"docs/figures/{name} shows another configuration than HEAD makes")
    print("rerun: python scripts/readme_figures.py --write")
    return 1


if __name__ == "__main__":
    sys.exit(main())
