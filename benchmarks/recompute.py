"""Every computed result the README's accuracy table reads, recomputed from its measurements with the
code as it is, and compared with the committed file: a change to the cost model, the probes' rules or
the constants that moves a published figure shows here until the results are recomputed.

Each recipe is the benchmark command that made the file (`benchmarks/results/manifest.json` holds it
with its placeholders filled in), with its output sent to a scratch folder. A recomputed JSON agrees
with the committed one when every number is within 0.5% (relative; 1e-6 absolute) and no key is
missing from either. About 40 s on the 2-core development VM.

    python3 benchmarks/recompute.py --check           # exit 1 and a list of what moved
    python3 benchmarks/recompute.py --write           # rewrite the recipes whose results moved
    python3 benchmarks/recompute.py --check transfer  # recipes whose name contains "transfer"
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
H16 = RESULTS / "2026-12-01-h200-pcie5-xeon-amx-16c"
H2 = RESULTS / "2026-12-02-h200-pcie5-xeon-amx-16c"
H3 = RESULTS / "2026-12-03-h200-pcie5-xeon-amx-16c"
H4 = RESULTS / "2026-12-04-h200-pcie5-xeon-amx-16c"
X2 = RESULTS / "2026-12-04-h200x2-pcie5-xeon-amx-32c"
H100 = RESULTS / "2026-12-05-h100-pcie5-xeon-amx-16c"
VM5 = RESULTS / "2026-12-05-epyc-avx512-2c"
H100_6 = RESULTS / "2026-12-06-h100-pcie5-xeon-amx-16c"
H200_6 = RESULTS / "2026-12-06-h200-pcie5-xeon-amx-16c"
C6 = "2026-12-06-computed"
H100_7 = RESULTS / "2026-12-07-h100-pcie5-xeon-amx-16c"
C7 = "2026-12-07-computed"
H100_8 = RESULTS / "2026-12-08-h100-pcie5-xeon-amx-16c"
C8 = "2026-12-08-computed"
C5 = "2026-12-05-computed"  # where the README's computed inputs are

REL_TOL, ABS_TOL = 0.005, 1e-6


@dataclass(frozen=True)
class Recipe:
    """A benchmark command (`{out}`: the folder it writes to) and the files it writes, which sit in
    `folder` of benchmarks/results/."""

    name: str
    argv: tuple[str, ...]
    files: tuple[str, ...]
    folder: str = C5


def _s(paths) -> list[str]:
    return [str(p) for p in paths]


def _bench(script: str, *args) -> tuple[str, ...]:
    """The command, with paths inside the repository written relative to it (the results record the
    paths they were given, as the manifest's commands give them)."""
    return (sys.executable, f"benchmarks/{script}", *[str(a).replace(f"{ROOT}/", "") for a in args])


def _sweeps(folder: Path, tag: str) -> str:
    return ",".join(_s(sorted(folder.glob(f"quick-transfer-crossover-*-{tag}.json"))))


def _per_call(
    name: str, script: str, flag: str, tags: tuple[str, ...], folder: Path = H100_6, computed: str = C6
) -> list[Recipe]:
    """One recipe per call (2026-12-06's on the H100 box unless `folder` and `computed` say):
    `script FLAG FOLDER:TAG --out {out}/NAME-TAG`."""
    return [
        Recipe(
            f"{name}-{t}",
            _bench(script, flag, f"{folder}:{t}", "--out", f"{{out}}/{name}-{t}"),
            (f"{name}-{t}.json",),
            computed,
        )
        for t in tags
    ]


def _same_machine(folder: Path, pairs: list[tuple[str, str]]) -> list[str]:
    return [f"{folder / run}:{folder / probe}" for run, probe in pairs]


def _merges() -> list[Recipe]:
    """Every merged profile the tables read (`kttune profile merge`, each point the median of an
    instance's probes), merged again from the probes its provenance names: first, since the tables
    read them, and a change to the probes' checks (which readings a merge leaves out) moves them."""
    out = []
    for f in sorted(RESULTS.glob("*-computed/*-merged.profile.json")):
        sources = json.loads(f.read_text())["provenance"]["command"].split()[3:]
        out.append(
            Recipe(
                f"merge-{f.name.removesuffix('-merged.profile.json')}",
                (sys.executable, "-m", "kttune.cli", "profile", "merge", *sources, "--out", f"{{out}}/{f.name}"),
                (f.name,),
                f.parent.name,
            )
        )
    return out


def recipes() -> list[Recipe]:
    one = _same_machine(
        H3,
        [
            (f"crossover-{m}-one-instance.json", f"probe-{m}-one-instance.profile.json")
            for m in (
                "deepseek-v3",
                "kimi-k2-thinking",
                "minimax-m2.1",
                "glm-4.5-air",
                "qwen3-30b-a3b",
                "qwen3-235b-a22b-fp8",
                "glm-4.7",
            )
        ],
    )
    switch = _same_machine(
        H4,
        [
            (f"crossover-{m}-switch.json", f"probe-{m}-switch.profile.json")
            for m in ("kimi-k2-thinking", "qwen3-30b-a3b", "glm-4.5-air", "glm-4.7-bf16", "qwen3-235b-a22b-bf16")
        ],
    )
    new_models = _same_machine(
        H4,
        [
            ("crossover-mixtral-8x7b-one-instance.json", "probe-mixtral-8x7b-one-instance.profile.json"),
            ("crossover-mixtral-8x7b-one-instance-2.json", "probe-mixtral-8x7b-one-instance.profile.json"),
            ("crossover-qwen3-next-80b-a3b-one-instance.json", "probe-qwen3-next-80b-a3b-one-instance.profile.json"),
            (
                "crossover-qwen3-next-80b-a3b-one-instance-2.json",
                "probe-qwen3-next-80b-a3b-one-instance-2.profile.json",
            ),
        ],
    )
    law = _same_machine(
        H4,
        [
            ("crossover-glm-4.7-law-instance.json", "probe-glm-4.7-law-instance.profile.json"),
            ("crossover-glm-4.7-law-instance-2.json", "probe-glm-4.7-law-instance.profile.json"),
            ("crossover-qwen3-235b-a22b-law-instance.json", "probe-qwen3-235b-a22b-law-instance.profile.json"),
        ],
    )
    shape_models = (
        "glm-4.5-air-BF16 mixtral-8x7b-BF16 qwen3-30b-a3b-BF16 glm-4.7-FP8_PERCHANNEL minimax-m2.1-FP8 "
        "kimi-k2-thinking-RAWINT4 qwen3-235b-a22b-AMXINT4 qwen3-235b-a22b-AMXINT8"
    ).split()
    b, c = H4 / "shape-law-probe-b", H4 / "shape-law-probe-c"
    cold_probes = _s(sorted(H4.glob("cpu-moe-cold-probe-*.profile.json")))
    constants_instances = [
        *(
            a
            for n in (1, 2)
            for a in ("--instance", f"cold-warm-{n}", H4 / f"cpu-moe-cold-warm-{n}.profile.json", *cold_probes)
        ),
        *(
            a
            for x in "abc"
            for a in (
                "--instance",
                f"shape-law-probe-{x}",
                H4 / f"shape-law-probe-{x}-probe-quick-shape-law.profile.json",
                *(H4 / f"shape-law-probe-{x}-probe-{m}.profile.json" for m in sorted(shape_models)),
            )
        ),
    ]
    seven = [
        H16 / "paths.json",
        H16 / "paths-transfer-glm-minimax.json",
        H2 / "paths-transfer-qwen235-glm47-sglang-loop.json",
        H2 / "paths-transfer-bf16-sglang-loop.json",
        H2 / "crossover-glm-4.7.json",
        H2 / "crossover-qwen3-235b.json",
        H2 / "crossover-qwen3-30b.json",
    ]
    h100a = f"h100a={H100 / 'quick-transfer-h100a.profile.json'}:{_sweeps(H100, 'h100a')}"
    h100i = _s(sorted(H100.glob("quick-transfer-crossover-*-h100i.json")))
    out = [
        Recipe(
            "derive", _bench("bench_derive.py", "--out", "{out}"), ("derive-16c-to-32c.json",), "2026-12-04-computed"
        ),
        Recipe(
            "derive-real-shapes",
            _bench(
                "bench_derive.py",
                "--real-shapes",
                *sorted(X2.glob("probe-*-x2.profile.json")),
                "--runs",
                *sorted(X2.glob("*-tp[12]-*.json")),
                "--out",
                "{out}",
            ),
            ("derive-16c-to-32c-real-shapes.json",),
        ),
        Recipe(
            "transfer",
            _bench("bench_transfer.py", *seven, "--out", "{out}", "--tag", "h200-seven-models-sglang-loop"),
            ("transfer-h200-seven-models-sglang-loop.json",),
        ),
        Recipe(
            "quick-transfer-h200",
            _bench(
                "bench_quick_transfer.py",
                *[f"{t}={H4 / f'quick-transfer-{t}.profile.json'}:{_sweeps(H4, t)}" for t in "abcd"],
                "--out",
                "{out}",
                "--tag",
                "h200",
            ),
            ("quick-transfer-h200.json",),
        ),
        Recipe(
            "thread-interp",
            _bench(
                "bench_thread_interp.py",
                "--profile",
                ROOT / "profiles/h200-pcie5-xeon-amx-16c.json",
                "--profile",
                ROOT / "profiles/h200x2-pcie5-xeon-amx-32c.json",
                "--threads-run",
                H4 / "cpu-threads.json",
                "--runs",
                H16 / "paths.json",
                H16 / "paths-transfer-glm-minimax.json",
                H16 / "paths-transfer-qwen235-glm47.json",
                H2 / "paths-transfer-bf16-sglang-loop.json",
                H2 / "paths-transfer-qwen235-glm47-sglang-loop.json",
                "--hold",
                "13",
                "--out",
                "{out}/thread-interp.md",
            ),
            ("thread-interp.json",),
        ),
        *[
            Recipe(
                f"thread-interp-runner-{m}",
                _bench(
                    "bench_thread_interp.py",
                    "--profile",
                    H100 / f"thread-interp-runner-probe-{m}.profile.json",
                    "--runs-profile",
                    H100 / f"thread-interp-runner-probe-{m}.profile.json",
                    "--runs",
                    H100 / f"thread-interp-runner-sweep-{m}.json",
                    "--hold",
                    "13",
                    "--out",
                    f"{{out}}/thread-interp-runner-h100-{m}.md",
                ),
                (f"thread-interp-runner-h100-{m}.json",),
            )
            for m in ("glm-4.5-air", "qwen3-30b-a3b", "minimax-m2.1")
        ],
        Recipe(
            "quick-transfer-h100-derived",
            _bench(
                "bench_quick_transfer.py",
                h100a,
                "--shipped",
                RESULTS / C5 / "derived-h200-to-h100.profile.json",
                "--shipped-about",
                "the shipped H200 profile derived to an H100 by kttune profile derive --gpu h100: another machine",
                "--out",
                "{out}",
                "--tag",
                "h100-derived",
            ),
            ("quick-transfer-h100-derived.json",),
        ),
        Recipe(
            "quick-transfer-h100-shipped",
            _bench(
                "bench_quick_transfer.py",
                h100a,
                "--shipped",
                "h200-pcie5-xeon-amx-16c",
                "--shipped-about",
                "another machine",
                "--out",
                "{out}",
                "--tag",
                "h100-shipped",
            ),
            ("quick-transfer-h100-shipped.json",),
        ),
        *[
            Recipe(
                f"thread-interp-runner-t12-{m}",
                _bench(
                    "bench_thread_interp.py",
                    "--profile",
                    H100 / f"thread-interp-runner-t12-probe-{m}.profile.json",
                    "--runs-profile",
                    H100 / f"thread-interp-runner-t12-probe-{m}.profile.json",
                    "--runs",
                    H100 / f"thread-interp-runner-t12-sweep-{m}.json",
                    "--hold",
                    "12",
                    "--out",
                    f"{{out}}/thread-interp-runner-t12-h100-{m}.md",
                ),
                (f"thread-interp-runner-t12-h100-{m}.json",),
            )
            for m in ("glm-4.5-air", "qwen3-30b-a3b", "minimax-m2.1", "kimi-k2-thinking")
        ],
        *[
            Recipe(
                f"quick-tokens-{name}",
                _bench(
                    "bench_quick_tokens.py",
                    *[
                        a
                        for n in (256, 1024)
                        for a in (
                            "--quick",
                            f"{n}=" + ",".join(_s(sorted(folder.glob(f"{prefix}-quick-{n}-[12].profile.json")))),
                        )
                    ],
                    *judged,
                    "--out",
                    f"{{out}}/quick-tokens-{name}",
                ),
                (f"quick-tokens-{name}.json",),
            )
            for name, folder, prefix, judged in (
                (
                    "h100l",
                    H100,
                    "quick-tokens-h100l",
                    ["--sweeps", *_s(sorted(H100.glob("quick-tokens-h100l-crossover-*.json")))],
                ),
                (
                    "epyc",
                    VM5,
                    "quick-tokens-vm",
                    ["--own", *_s(sorted(VM5.glob("quick-tokens-vm-probe-*.profile.json")))],
                ),
            )
        ],
        *[
            Recipe(
                f"quick-tokens-estimate-{tag}",
                _bench(
                    "bench_quick_tokens.py",
                    "--quick",
                    f"256={RESULTS / C5 / f'{tag}-merged.profile.json'}",
                    "--estimate",
                    "256",
                    "--ratios-from",
                    ",".join(_s(sorted(H100.glob("quick-tokens-h100l-quick-1024-[12].profile.json")))),
                    "--sweeps",
                    *sweeps,
                    "--out",
                    f"{{out}}/quick-tokens-estimate-{tag}",
                ),
                (f"quick-tokens-estimate-{tag}.json",),
            )
            for tag, sweeps in (
                ("h100k", _s(sorted(H100.glob("quick-transfer-crossover-*-h100k.json")))),
                ("h100i", h100i),
                (
                    "h200ab",
                    _s(sorted(H4.glob("quick-transfer-crossover-*-a.json")))
                    + _s(sorted(H4.glob("quick-transfer-crossover-*-b.json"))),
                ),
            )
        ],
        Recipe("probe-median", _bench("bench_probe_median.py", "--out", "{out}/probe-median"), ("probe-median.json",)),
        Recipe(
            "runner-repeat", _bench("bench_runner_repeat.py", "--out", "{out}/runner-repeat"), ("runner-repeat.json",)
        ),
        # each H100 instance's sweeps from its merged quick probes (`kttune profile merge`)
        *(
            Recipe(
                f"transfer-merged-probes-{t}",
                _bench(
                    "bench_transfer.py",
                    "--profile",
                    RESULTS / computed / f"{t}-merged.profile.json",
                    "--out",
                    "{out}",
                    "--tag",
                    f"merged-probes-{t}",
                    *_s(sorted(measured.glob(f"quick-transfer-crossover-*-{t}.json"))),
                ),
                (f"transfer-merged-probes-{t}.json",),
                computed,
            )
            for computed, measured, tags in (
                (C5, H100, ("h100f", "h100g", "h100h", "h100i", "h100k")),
                (C6, H100_6, ("h100m", "h100r", "h100s", "h100t", "h100x", "h100aa", "h100ac", "h100ad")),
                (C6, H200_6, ("h200f",)),
                (
                    C7,
                    H100_7,
                    (
                        "h100ae",
                        "h100af",
                        "h100ah",
                        "h100aj",
                        "h100al",
                        "h100am",
                        "h100ao",
                        "h100ap",
                        "h100aq",
                        "h100ar",
                    ),
                ),
                (C8, H100_8, ("h100av", "h100aw")),
            )
            for t in tags
        ),
        Recipe(
            "transfer-quick-probe-h100a",
            _bench(
                "bench_transfer.py",
                "--profile",
                H100 / "quick-transfer-h100a.profile.json",
                "--out",
                "{out}",
                "--tag",
                "quick-probe-h100a",
                *_s(sorted(H100.glob("quick-transfer-crossover-*-h100a.json"))),
            ),
            ("transfer-quick-probe-h100a.json",),
        ),
        Recipe(
            "transfer-quick-narrow-h100i",
            _bench(
                "bench_transfer.py",
                "--profile",
                RESULTS / C5 / "h100i-with-narrow.profile.json",
                "--out",
                "{out}",
                "--tag",
                "quick-narrow-h100i",
                *h100i,
            ),
            ("transfer-quick-narrow-h100i.json",),
        ),
        Recipe(
            "transfer-merged-probes-h200ab",
            _bench(
                "bench_transfer.py",
                "--profile",
                RESULTS / C5 / "h200ab-merged.profile.json",
                "--out",
                "{out}",
                "--tag",
                "merged-probes-h200ab",
                *sorted([*H4.glob("quick-transfer-crossover-*-a.json"), *H4.glob("quick-transfer-crossover-*-b.json")]),
            ),
            ("transfer-merged-probes-h200ab.json",),
        ),
        *[
            Recipe(
                f"transfer-quick-probe-h200{t}",
                _bench(
                    "bench_transfer.py",
                    "--profile",
                    H4 / f"quick-transfer-{t}.profile.json",
                    "--out",
                    "{out}",
                    "--tag",
                    f"quick-probe-h200{t}",
                    *sorted(H4.glob(f"quick-transfer-crossover-*-{t}.json")),
                ),
                (f"transfer-quick-probe-h200{t}.json",),
            )
            for t in ("c", "d")
        ],
        Recipe(
            "pipeline-narrow",
            _bench(
                "bench_pipeline_narrow.py",
                *[a for t in ("h100g", "h100h", "h100i") for a in ("--call", f"{H100}:{t}")],
                "--out",
                "{out}/pipeline-narrow",
            ),
            ("pipeline-narrow.json",),
        ),
        Recipe("hybrid-bias", _bench("bench_hybrid_bias.py", "--out", "{out}/hybrid-bias"), ("hybrid-bias.json",)),
        Recipe(
            "pipeline-loop", _bench("bench_pipeline_loop.py", "--out", "{out}/pipeline-loop"), ("pipeline-loop.json",)
        ),
        Recipe(
            "instance-memory",
            _bench("bench_instance_memory.py", "--out", "{out}/instance-memory"),
            ("instance-memory.json",),
        ),
        Recipe("thread-law", _bench("bench_thread_law.py", "--out", "{out}/thread-law"), ("thread-law.json",)),
        Recipe(
            "instance-noise",
            _bench("bench_instance_noise.py", "--out", "{out}/instance-noise"),
            ("instance-noise.json",),
            C6,
        ),
        Recipe(
            "shape-law-probe-mixtral-xeon-amx-2c",
            _bench(
                "bench_shape_law_probe.py",
                "--base",
                RESULTS / "2026-12-06-xeon-amx-2c" / "quick-cpu-bf16.profile.json",
                "--models",
                RESULTS / "2026-12-06-xeon-amx-2c" / "probe-mixtral-8x7b-BF16.profile.json",
                "--out",
                "{out}/shape-law-probe-mixtral-xeon-amx-2c.md",
            ),
            ("shape-law-probe-mixtral-xeon-amx-2c.json",),
            C6,
        ),
        *[
            Recipe(
                f"shape-law-probe-zen3-avx2-quick-{r}",
                _bench(
                    "bench_shape_law_probe.py",
                    "--base",
                    RESULTS / "2026-12-07-epyc-avx2-2c" / f"quick-tokens-zen3-quick-1024-{r}.profile.json",
                    "--models",
                    *_s(
                        sorted(
                            (RESULTS / "2026-12-07-epyc-avx2-2c").glob("quick-tokens-zen3-probe-*-BF16.profile.json")
                        )
                    ),
                    "--min-tokens",
                    "1",
                    "--out",
                    f"{{out}}/shape-law-probe-zen3-avx2-quick-{r}.md",
                ),
                (f"shape-law-probe-zen3-avx2-quick-{r}.json",),
                C7,
            )
            for r in (1, 2)
        ],
        Recipe(
            "gpu-expert-share",
            _bench("bench_gpu_expert_share.py", "--out", "{out}/gpu-expert-share"),
            ("gpu-expert-share.json",),
            C6,
        ),
        *[
            Recipe(
                f"gap-read-{m}-h100z",
                _bench(
                    "diag/diag_gap_rounds.py",
                    "--read",
                    H100_6 / f"diag-gap-rounds-{m}-h100z.json",
                    "--profile",
                    H100_6 / "diag-gap-rounds-quick-h100z.profile.json",
                    "--out",
                    "{out}",
                ),
                (f"diag-gap-read-{m}-h100z.json",),
                C6,
            )
            for m in ("mixtral-8x7b", "glm-4.5-air")
        ],
        Recipe(
            "probe-estimator",
            _bench("bench_probe_estimator.py", "--out", "{out}/probe-estimator"),
            ("probe-estimator.json",),
            C6,
        ),
        *_per_call("hybrid-cold", "bench_hybrid_cold.py", "--call", ("h100m", "h100n", "h100p")),
        *_per_call("hybrid-cold", "bench_hybrid_cold.py", "--call", ("h100ae", "h100af", "h100ag"), H100_7, C7),
        # instance ar: the first real cold layer of the H100 box (cycled past twice the L3)
        *_per_call("hybrid-cold", "bench_hybrid_cold.py", "--call", ("h100ar",), H100_7, C7),
        # instances av and aw (twenty-ninth session): the second and third real cold layers of the H100 box
        *_per_call("hybrid-cold", "bench_hybrid_cold.py", "--call", ("h100av", "h100aw"), H100_8, C8),
        Recipe(
            "probe-median-fastest",
            _bench(
                "bench_probe_median.py",
                "--call",
                f"{H100}:h100k",
                "--call",
                f"{H100_6}:h100m",
                "--call",
                f"{H100_6}:h100o",
                "--call",
                f"{H100_6}:h100r",
                "--call",
                f"{H100_6}:h100s",
                "--call",
                f"{H100_6}:h100t",
                "--call",
                f"{H200_6}:h200f",
                "--fastest-cpu-moe",
                "--out",
                "{out}/probe-median-fastest",
            ),
            ("probe-median-fastest.json",),
            C6,
        ),
        *(
            Recipe(
                f"transfer-quick-{tag}",
                _bench(
                    "bench_transfer.py",
                    "--profile",
                    folder / f"quick-transfer-{tag}.profile.json",
                    "--out",
                    "{out}",
                    "--tag",
                    f"quick-{tag}",
                    *_s(sorted(folder.glob(f"quick-transfer-crossover-*-{tag.split('-')[0]}.json"))),
                ),
                (f"transfer-quick-{tag}.json",),
                computed,
            )
            for folder, computed, tags in (
                (H100_6, C6, ("h100n", "h100o", "h100o-late", "h100p", "h100r", "h100r-late", "h100s", "h100s-late")),
                (H100_6, C6, ("h100t", "h100t-late")),
                (H100_6, C6, ("h100u", "h100v", "h100x", "h100x-late")),
                (H100_6, C6, ("h100aa", "h100aa-late", "h100ac", "h100ac-late", "h100ad", "h100ad-late")),
                (H200_6, C6, ("h200f", "h200f-again", "h200f-late")),
                (H100_7, C7, ("h100ae", "h100ae-late", "h100af", "h100af-late", "h100ag")),
                (H100_7, C7, ("h100ah", "h100ah-late", "h100ai")),
                (H100_7, C7, ("h100aj", "h100aj-late", "h100ak", "h100ak-late", "h100al", "h100al-late")),
                (H100_7, C7, ("h100am", "h100am-late")),
                (H100_7, C7, ("h100ao", "h100ao-again", "h100ao-late", "h100ap", "h100ap-again", "h100ap-late")),
                (H100_7, C7, ("h100aq", "h100aq-again", "h100aq-late")),
                (H100_7, C7, ("h100ar", "h100ar-again", "h100ar-late")),
                (H100_8, C8, ("h100au", "h100av", "h100av-again", "h100av-late", "h100aw", "h100aw-late")),
            )
            for tag in tags
        ),
        Recipe(
            "hybrid-cold-h100o",
            _bench(
                "bench_hybrid_cold.py",
                "--call",
                f"{H100_6}:h100o",
                "--call",
                f"{H100_6}:h100o-late",
                "--out",
                "{out}/hybrid-cold-h100o",
            ),
            ("hybrid-cold-h100o.json",),
            C6,
        ),
        *_per_call("own-r", "bench_cpu_generation.py", "--own-r", ("h100n", "h100o", "h100p", "h100aa")),
        *_per_call("own-layer", "bench_own_layer.py", "--call", ("h100s", "h100t", "h100aa", "h100ac", "h100ad")),
        *_per_call("own-layer", "bench_own_layer.py", "--call", ("h200f",), H200_6),
        *_per_call("own-layer", "bench_own_layer.py", "--call", ("h100ae", "h100af"), H100_7, C7),
        Recipe("quick-carry", _bench("bench_quick_carry.py", "--out", "{out}/quick-carry"), ("quick-carry.json",), C7),
        Recipe(
            "quick-series", _bench("bench_quick_series.py", "--out", "{out}/quick-series"), ("quick-series.json",), C7
        ),
        Recipe(
            "hybrid-intercept",
            _bench("bench_hybrid_intercept.py", "--out", "{out}/hybrid-intercept"),
            ("hybrid-intercept.json",),
            C7,
        ),
        Recipe(
            "mx-methods",
            _bench("bench_mx_methods.py", "report", RESULTS / "2026-12-07-xeon-amx-2c", "--out", "{out}/mx-methods"),
            ("mx-methods.json",),
            C7,
        ),
        Recipe(
            "mx-methods-h100ar",
            _bench(
                "bench_mx_methods.py", "report", H100_7, "--prefix", "mx-h100ar-", "--out", "{out}/mx-methods-h100ar"
            ),
            ("mx-methods-h100ar.json",),
            C7,
        ),
        Recipe(
            "mx-methods-h100av",
            _bench(
                "bench_mx_methods.py", "report", H100_8, "--prefix", "mx-h100av-", "--out", "{out}/mx-methods-h100av"
            ),
            ("mx-methods-h100av.json",),
            C8,
        ),
        # instance au: the quick probe that streams gpt-oss-20b's MXFP4 layer, judged on its own instance's
        # gpt-oss sweeps less its MXFP4 pipeline curves (RAWINT4's loop read by bytes), and each gpt-oss
        # model's own layer probed on the instance after the sweeps
        Recipe(
            "transfer-quick-h100au-without-mx-loop",
            _bench(
                "bench_transfer.py",
                "--profile",
                H100_8 / "quick-transfer-h100au.profile.json",
                "--out",
                "{out}",
                "--tag",
                "quick-h100au-without-mx-loop",
                "--without",
                "pipeline:MXFP4",
                *_s(sorted(H100_8.glob("quick-transfer-crossover-*-h100au.json"))),
            ),
            ("transfer-quick-h100au-without-mx-loop.json",),
            C8,
        ),
        *_per_call("own-layer", "bench_own_layer.py", "--call", ("h100au",), H100_8, C8),
        Recipe(
            "transfer-mxfp4-quick-h100as",
            _bench(
                "bench_transfer.py",
                "--profile",
                H100_7 / "mxfp4-quick-h100as.profile.json",
                "--out",
                "{out}",
                "--tag",
                "mxfp4-quick-h100as",
                *_s(sorted(H100_7.glob("mxfp4-quick-crossover-*-h100as.json"))),
            ),
            ("transfer-mxfp4-quick-h100as.json",),
            C7,
        ),
        # instance at's quick probe (it streams gpt-oss-20b's MXFP4 layer) on instances as's and ar's
        # gpt-oss sweeps, as it is and less its MXFP4 pipeline curves (RAWINT4's loop read by bytes)
        *(
            Recipe(
                f"transfer-{tag}{wo}",
                _bench(
                    "bench_transfer.py",
                    "--profile",
                    H100_7 / "mxfp4-quick-h100at.profile.json",
                    "--out",
                    "{out}",
                    "--tag",
                    f"{tag}{wo}",
                    *(("--without", "pipeline:MXFP4") if wo else ()),
                    *_s(sorted(H100_7.glob(sweeps))),
                ),
                (f"transfer-{tag}{wo}.json",),
                C7,
            )
            for tag, sweeps in (
                ("mxfp4-quick-h100at-on-as", "mxfp4-quick-crossover-gpt-oss-*-h100as.json"),
                ("mxfp4-quick-h100at-on-ar", "mxfp4-runner-crossover-gpt-oss-*-h100ar-*.json"),
            )
            for wo in ("", "-without-mx-loop")
        ),
        Recipe(
            "mxfp4-runner",
            _bench(
                "bench_mxfp4_runner.py",
                "--runs",
                H100_7,
                "--quick",
                H100_7 / "quick-transfer-h100ar.profile.json",
                "--out",
                "{out}",
            ),
            ("mxfp4-runner.json",),
            C7,
        ),
        # instance ah/ai (Emerald Rapids): three probes at each length in alternating order around call ai's
        # sweeps (quick-tokens-h100ai-order.txt; the middle 1,024-token probe is call ai's own)
        Recipe(
            "quick-tokens-h100ai",
            _bench(
                "bench_quick_tokens.py",
                "--quick",
                "256=" + ",".join(_s(sorted(H100_7.glob("quick-tokens-h100ai-quick-256-[123].profile.json")))),
                "--quick",
                "1024="
                + ",".join(
                    _s(
                        [
                            H100_7 / "quick-tokens-h100ai-quick-1024-1.profile.json",
                            H100_7 / "quick-transfer-h100ai.profile.json",
                            H100_7 / "quick-tokens-h100ai-quick-1024-3.profile.json",
                        ]
                    )
                ),
                "--sweeps",
                *_s(sorted(H100_7.glob("quick-transfer-crossover-*-h100ai.json"))),
                "--out",
                "{out}/quick-tokens-h100ai",
            ),
            ("quick-tokens-h100ai.json",),
            C7,
        ),
        Recipe(
            "shape-law-constants-emr",
            _bench(
                "bench_shape_law_constants.py",
                "--results",
                RESULTS,
                *constants_instances,
                "--more-runs",
                *(
                    H100_6 / f"quick-transfer-{t}.profile.json"
                    for t in ("h100n", "h100o", "h100o-late", "h100p", "h100q")
                ),
                "--out",
                "{out}/shape-law-constants-emr",
            ),
            ("shape-law-constants-emr.json",),
            C6,
        ),
        Recipe(
            "cpu-generation",
            _bench("bench_cpu_generation.py", "--out", "{out}/cpu-generation"),
            ("cpu-generation.json",),
            C6,
        ),
        Recipe(
            "cpu-generation-r-bf16",
            _bench(
                "bench_cpu_generation.py", "--r-bf16", "3078,4500,6000,8000", "--out", "{out}/cpu-generation-r-bf16"
            ),
            ("cpu-generation-r-bf16.json",),
            C6,
        ),
        Recipe(
            "same-machine-one-instance",
            _bench("bench_same_machine.py", *one, "--out", "{out}", "--tag", "h200-seven-models-one-instance"),
            ("same-machine-h200-seven-models-one-instance.json",),
        ),
        Recipe(
            "same-machine-leave-one-model-out",
            _bench(
                "bench_same_machine.py",
                *one,
                "--leave-one-model-out",
                "--out",
                "{out}",
                "--tag",
                "h200-seven-models-leave-one-model-out",
            ),
            ("same-machine-h200-seven-models-leave-one-model-out.json",),
        ),
        Recipe(
            "same-machine-switch-sweeps",
            _bench("bench_same_machine.py", *switch, "--out", "{out}", "--tag", "h200-switch-sweeps"),
            ("same-machine-h200-switch-sweeps.json",),
        ),
        Recipe(
            "same-machine-two-new-models",
            _bench("bench_same_machine.py", *new_models, "--out", "{out}", "--tag", "h200-two-new-models"),
            ("same-machine-h200-two-new-models.json",),
        ),
        Recipe(
            "same-machine-expert-shape-law",
            _bench(
                "bench_same_machine.py",
                *law,
                "--leave-one-model-out",
                "--others",
                H4 / "probe-qwen3-30b-a3b-law-instance.profile.json",
                H4 / "probe-mixtral-8x7b-law-instance.profile.json",
                "--flops-alone",
                "--out",
                "{out}",
                "--tag",
                "h200-expert-shape-law-held-out",
            ),
            ("same-machine-h200-expert-shape-law-held-out.json",),
        ),
        Recipe(
            "shape-law-probe-b",
            _bench(
                "bench_shape_law_probe.py",
                "--base",
                f"{b}-probe-quick-shape-law.profile.json",
                "--law",
                f"{b}-probe-quick-shape-law.profile.json",
                "--law",
                f"{b}-probe-quick-shape-law-2.profile.json",
                "--models",
                *[f"{b}-probe-{x}.profile.json" for x in shape_models],
                "--out",
                "{out}/shape-law-probe-held-out.md",
            ),
            ("shape-law-probe-held-out.json",),
        ),
        Recipe(
            "shape-law-probe-c",
            _bench(
                "bench_shape_law_probe.py",
                "--base",
                f"{c}-probe-quick-shape-law.profile.json",
                "--models",
                *[f"{c}-probe-{x}.profile.json" for x in shape_models],
                "--out",
                "{out}/shape-law-probe-held-out-c.md",
            ),
            ("shape-law-probe-held-out-c.json",),
        ),
        *[
            Recipe(
                f"tp-paths-{m}",
                _bench(
                    "bench_tp_paths.py",
                    "analyse",
                    *sorted(X2.glob(f"{m}-tp*.json")),
                    "--profile",
                    f"probe={X2 / f'probe-{m}-x2.profile.json'}",
                    "--profile",
                    "shipped=h200-pcie5-xeon-amx-16c",
                    "--out",
                    "{out}",
                    "--tag",
                    f"tp-paths-h200x2-{m}",
                ),
                (f"tp-paths-h200x2-{m}.json",),
            )
            for m in sorted({f.name.split("-tp")[0] for f in X2.glob("*-tp[12]-*.json")})  # the models run at TP 2
        ],
    ]
    return _merges() + out


# When a file was made is no result: a recomputed profile's provenance carries its own.
NOT_RESULTS = ("created",)


def differences(old, new, path: str = "") -> list[str]:
    """Where two JSON documents disagree: a number beyond the tolerance, a key in one only, another
    length or value."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(old.keys() | new.keys(), key=str):
            if k in NOT_RESULTS:
                continue
            q = f"{path}.{k}" if path else str(k)
            if k not in new or k not in old:
                out.append(f"{q}: only in the {'committed' if k in old else 'recomputed'} file")
            else:
                out += differences(old[k], new[k], q)
        return out
    if isinstance(old, list) and isinstance(new, list):
        out = [f"{path}: {len(old)} -> {len(new)} entries"] if len(old) != len(new) else []
        for i, (a, b) in enumerate(zip(old, new)):
            out += differences(a, b, f"{path}[{i}]")
        return out
    numbers = (int, float)
    if (
        isinstance(old, numbers)
        and isinstance(new, numbers)
        and not isinstance(old, bool)
        and not isinstance(new, bool)
    ):
        if isinstance(old, float) and isinstance(new, float) and math.isnan(old) and math.isnan(new):
            return []
        d = abs(new - old)
        return [f"{path}: {old:g} -> {new:g}"] if d > ABS_TOL and d > REL_TOL * max(abs(old), abs(new)) else []
    return [] if old == new else [f"{path}: {old!r} -> {new!r}"]


def run(recipe: Recipe, out: Path) -> None:
    """The recipe's command, writing into `out`; raises with its output when it fails."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [a.replace("{out}", str(out)) for a in recipe.argv]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{recipe.name}: {' '.join(argv)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def check(recipe: Recipe, scratch: Path, results: Path = RESULTS) -> dict[str, list[str]]:
    """Per file of the recipe, how the recomputed JSON differs from the committed one (a file not
    committed yet: one difference saying so). The recomputed files stay in `scratch`/NAME."""
    out = scratch / recipe.name
    run(recipe, out)
    found = {}
    for f in recipe.files:
        committed = results / recipe.folder / f
        new = json.loads((out / f).read_text())
        found[f"{recipe.folder}/{f}"] = (
            differences(json.loads(committed.read_text()), new) if committed.exists() else [f"{f}: not committed"]
        )
    return found


def write(recipe: Recipe, scratch: Path, results: Path = RESULTS) -> bool:
    """Recompute `recipe` into `scratch` and, where any of its files moved (or is new), copy everything
    the command wrote into its folder of `results`; a recipe whose files are as committed is left as
    committed (its provenance, timestamps and rounding untouched). True when it wrote."""
    if not any(check(recipe, scratch, results).values()):
        return False
    out = scratch / recipe.name
    for f in out.rglob("*"):
        if f.is_file():
            dest = results / recipe.folder / f.relative_to(out)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="only recipes whose name contains one of these")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="compare with the committed files; exit 1 if any moved")
    mode.add_argument(
        "--write", action="store_true", help="recompute, and rewrite in place the recipes whose results moved"
    )
    args = ap.parse_args()
    chosen = [r for r in recipes() if not args.names or any(n in r.name for n in args.names)]
    if args.write:
        with tempfile.TemporaryDirectory() as tmp:
            for r in chosen:
                wrote = write(r, Path(tmp))
                print(f"{r.name}: " + (f"wrote {', '.join(r.files)} in {r.folder}" if wrote else "as committed, left"))
        return
    moved = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in chosen:
            for f, diffs in check(r, Path(tmp)).items():
                moved += bool(diffs)
                print(f"{f}: " + ("as committed" if not diffs else f"{len(diffs)} differences"))
                for d in diffs[:10]:
                    print(f"    {d}")
    sys.exit(1 if moved else 0)


if __name__ == "__main__":
    main()
