"""Resident memory of the layerwise pipeline step of a model's own layer, run in the probe's process or
in a process of its own (`kttune.probes.gpu_suite.PipelineStep.apart`). The step builds kt-kernel's
writer layer once per stage A thread count, and kt-kernel 0.7.2 never frees an AMX-family layer
(docs/path-runner.md#kt-kernels-amx-layers-are-never-freed): in the probe's process those layers stay
until kttune exits, beside `kttune tune`'s runner workers.

Each mode in a fresh process: the full step (five configurations, the layer at 1/4, 1/2 and 1) of one
model's layer, `--steps` times in that process (as `kttune probe --repeat` and `kttune tune` run
probes one after another), with the resident size after each step, the largest ended child's peak
(`RUSAGE_CHILDREN`), the wall time and the whole layer's time. Without a GPU the stages run on the
CPU one after another (`--device cpu`, the step's dry run): what it measures there is the memory, not
the pipeline's speed (the GPU box's check of the timings: benchmarks/diag/diag_pipeline_modes.py
--apart).

    python benchmarks/bench_pipeline_step_memory.py [--model qwen3-30b-a3b] [--threads 1 2] [--steps 2]
        [--device cpu] [--out FILE]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench_kt_layer_memory import after_each, fresh
from results_layout import results_dir, write_result

GIB = 2**30
MODES = ("here", "apart")


def run_steps(model: str, method: str, threads: list[int], steps: int, device: str, apart: bool, save) -> list:
    """In this process: the full pipeline step `steps` times, each row saved as it ends (`after_each`)
    with the whole layer's time per thread count."""
    from kttune import app
    from kttune.probes.common import NullReporter
    from kttune.probes.gpu_suite import PipelineStep
    from kttune.spec.moe_shape import MoeLayerShape

    shape = MoeLayerShape.of_model(app.model_spec(model), method=method)
    step = PipelineStep(shape, tuple(threads), quick=False, reporter=NullReporter(), isolate=apart, device=device)
    return after_each(
        steps,
        lambda i: step(),
        save,
        lambda curves: {"layer_ms": [max(c.points, key=lambda p: p.x).t_ms for c in curves]},
    )


def run_mode(mode: str, a: argparse.Namespace) -> dict:
    """One mode in a fresh process (what kt-kernel keeps is the process's)."""
    return fresh(
        "import bench_pipeline_step_memory as p;"
        f"p.run_steps({a.model!r}, {a.method!r}, {a.threads!r}, {a.steps}, {a.device!r}, {mode == 'apart'}, "
        "lambda rows: save({'steps': rows}))",
        mode,
        {"steps": []},
        key="steps",
        what="step",
    )


def markdown(doc: dict) -> str:
    a = doc["args"]
    lines = [
        "# The pipeline step of a model's own layer: kttune's process or one of its own",
        "",
        f"{doc['host']}; `{a['model']}` {a['method']}, stage A at {a['threads']} thread(s), device {a['device']}, "
        f"{a['steps']} full steps in each mode's fresh process (`python benchmarks/bench_pipeline_step_memory.py`). "
        "Single runs: the wall times are not intervals.",
        "",
        "| mode | step | resident after it | largest ended child's peak | wall | whole layer, per thread count |",
        "|---|---|---|---|---|---|",
    ]
    for m in MODES:
        for i, r in enumerate(doc["modes"][m]["steps"]):
            peak = f"{r['child_peak_bytes'] / GIB:.2f} GiB" if r["child_peak_bytes"] else "none"
            layer = " / ".join(f"{x:.0f} ms" for x in r["layer_ms"])
            lines.append(f"| {m} | {i + 1} | {r['rss_bytes'] / GIB:.2f} GiB | {peak} | {r['wall_s']:.0f} s | {layer} |")
        if "ended" in doc["modes"][m]:
            lines.append(f"| {m} | ended early: {doc['modes'][m]['ended']} | | | | |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen3-30b-a3b")
    ap.add_argument("--method", default="BF16")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cuda on the GPU box")
    ap.add_argument("--out", type=Path, default=None, help="FILE (.json and .md; default: this machine's folder)")
    a = ap.parse_args()
    import psutil

    from kttune.probes.inventory import collect_cpu

    cpu = collect_cpu()
    doc = {
        "args": {k: v for k, v in vars(a).items() if k != "out"},
        "host": f"{cpu.model}, {cpu.physical_cores} cores, {psutil.virtual_memory().total / GIB:.1f} GiB RAM",
        "modes": {m: run_mode(m, a) for m in MODES},
    }
    out = a.out or results_dir() / "pipeline-step-memory"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_result(out, doc, markdown(doc))


if __name__ == "__main__":
    main()
