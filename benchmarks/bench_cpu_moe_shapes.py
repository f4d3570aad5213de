"""How kt-kernel's matrix-kernel time per token depends on the expert's shape, on one machine, in one
process: the same number of rows per expert (E = 16 experts, top-4, 512 / 1,024 / 2,048 tokens:
128 / 256 / 512 rows each) at expert shapes (H, I) from Qwen3-Next's 2048 x 512 to Mixtral's
4096 x 14336. The cost model charges the matrix kernel one rate per flop; the 2026-12-04 probes of
Mixtral-8x7B and Qwen3-Next-80B-A3B on one instance ran it at 12.8 and 5.8 TFLOP/s.

`--measure` times the curves (kttune.probes.cpu_moe, the probe's own protocol, one shape after
another; with `--interleaved ROUNDS`, every shape's layer built once and measured in shuffled rounds)
and writes cpu-moe-shapes.json to --out. `--analyse FILE` fits each shape's time per token (the least-squares
slope over its sizes) on the other shapes, leave one shape out, with two laws, and writes
cpu-moe-shapes.md beside it:

- flops: slope = a x flops per token (the model's matrix term);
- flops + outputs: slope = a x flops + b x output elements per token (each routed pair writes 2I
  gate/up and H down outputs in fp32 accumulators, converted and combined elementwise), a, b >= 0.

    python benchmarks/bench_cpu_moe_shapes.py --measure --out DIR [--threads 11]
    python benchmarks/bench_cpu_moe_shapes.py --analyse DIR/cpu-moe-shapes.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from kttune.hw.shape_law import ShapeSlope, fit_shape_law, held_out_errors, slopes_of

SHAPES = [(2048, 512), (2048, 768), (1024, 2048), (4096, 1408), (2048, 3072), (7168, 2048), (4096, 14336)]
EXPERTS, TOP_K = 16, 4
TOKENS = (512, 1024, 2048)


def _document(host: str, threads: int, tokens, protocol: str, method: str = "BF16") -> dict:
    """The results document both ways of measuring write (curves appended per shape)."""
    return {
        "host": host,
        "method": method,
        "threads": threads,
        "experts": EXPERTS,
        "top_k": TOP_K,
        "tokens": list(tokens),
        "protocol": protocol,
        "curves": [],
    }


def measure(out: Path, threads: int, shapes=SHAPES, tokens=TOKENS, method: str = "BF16") -> None:
    from kttune.probes.cpu_moe import CpuMoeOptions, probe_cpu_moe
    from kttune.probes.inventory import collect_cpu, host_line, usable_cores
    from kttune.spec.moe_shape import MoeLayerShape

    cpu = collect_cpu()
    t0 = time.perf_counter()
    doc = _document(host_line(), threads, tokens, "one shape after another (kttune.probes.cpu_moe)", method)
    for h, i in shapes:
        opts = CpuMoeOptions(
            shapes=(MoeLayerShape(h, i, EXPERTS, TOP_K, method, f"{h}x{i}"),),
            tokens=tuple(tokens),
            methods=(method,),
            threads=(threads,),
            warmup=2,
            repeats=5,
            min_total_s=0.3,
            max_repeats=15,
        )
        for c in probe_cpu_moe(opts, cpu, cores=usable_cores(cpu), numa_ids=[0]):
            pts = [{"x": p.x, "t_ms": p.t_ms, "p10": p.t_ms_p10, "p90": p.t_ms_p90, "n": p.n} for p in c.points]
            doc["curves"].append({"hidden": h, "inter": i, "kernel": c.params.get("kernel"), "points": pts})
            print(
                f"[{time.perf_counter() - t0:6.1f}s] {h}x{i}: "
                + ", ".join(f"{p['x']:.0f}: {p['t_ms']:.1f}" for p in pts),
                flush=True,
            )
        out.mkdir(parents=True, exist_ok=True)
        (out / "cpu-moe-shapes.json").write_text(json.dumps(doc, indent=1) + "\n")


def measure_interleaved(
    out: Path, threads: int, shapes=SHAPES, tokens=TOKENS, rounds: int = 5, method: str = "BF16"
) -> None:
    """Every shape's layer built once, then `rounds` rounds; in each, the shapes in a shuffled order and
    every size of a shape once (one warm-up call first): the host's drift over the run falls on every
    shape alike. Each point: the median over rounds with its 10th and 90th percentiles. The probe's
    own measurement (probes/cpu_moe_shape.py, what `kttune probe --shape-law` runs) at this
    benchmark's shapes and sizes."""
    from kttune.kernels.kt_ext import load_kt_kernel
    from kttune.probes.cpu_moe_shape import ShapeLawOptions, measure_shape_set
    from kttune.probes.inventory import collect_cpu, host_line

    t0 = time.perf_counter()
    opts = ShapeLawOptions(
        threads=threads,
        methods=(method,),
        shapes=tuple(shapes),
        tokens=tuple(tokens),
        rounds=rounds,
        experts=EXPERTS,
        top_k=TOP_K,
    )
    kt = load_kt_kernel()
    if kt is None:
        raise SystemExit("kt-kernel is not importable: this benchmark times its kernels")
    curves = measure_shape_set(method, shapes, opts, kt=kt, isa=collect_cpu().isa, reporter=_Printer(t0))
    protocol = f"interleaved: {rounds} rounds, shapes shuffled per round, one warm-up call per point"
    doc = _document(host_line(), threads, tokens, protocol, method)
    for c in curves:
        pts = [
            {"x": p.x, "t_ms": p.t_ms, "p10": p.t_ms_p10, "p90": p.t_ms_p90, "n": p.n, "samples": p.extra["samples_ms"]}
            for p in c.points
        ]
        h, i = c.params["hidden"], c.params["inter"]
        doc["curves"].append({"hidden": h, "inter": i, "kernel": c.params["kernel"], "points": pts})
        print(f"{h}x{i}: " + ", ".join(f"{p['x']}: {p['t_ms']:.1f} [{p['p10']:.1f}-{p['p90']:.1f}]" for p in pts))
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu-moe-shapes.json").write_text(json.dumps(doc, indent=1) + "\n")


class _Printer:
    """The probe's progress steps as timed lines (the benchmark's logs)."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0

    def step(self, description: str, advance: float = 1.0) -> None:
        print(f"[{time.perf_counter() - self.t0:6.1f}s] {description}", flush=True)

    def note(self, message: str) -> None:
        print(message, flush=True)

    def plan(self, total_steps: int, title: str) -> None:
        pass


def _fit(rows: list[ShapeSlope], law: str) -> tuple[float, float]:
    """(ms per flop, ms per output element) of `law`, by the package's fit (kttune.hw.shape_law)."""
    fit = fit_shape_law(rows, with_outputs=law == "flops + outputs")
    return fit.coef[0], fit.coef[1] if len(fit.coef) > 1 else 0.0


def analyse(path: Path) -> str:
    doc = json.loads(path.read_text())
    rows = slopes_of(doc)
    laws = ("flops", "flops + outputs")
    lines = [
        "# kt-kernel's matrix kernel against the expert's shape",
        "",
        f"Host: {doc['host']}; {doc.get('method', 'BF16')}, {doc['threads']} threads, E = {doc['experts']}, top-{doc['top_k']}, "
        f"{', '.join(map(str, doc['tokens']))} tokens (the least-squares slope over them); "
        f"{doc.get('protocol', 'one shape after another (kttune.probes.cpu_moe)')}. Each shape predicted "
        "from a fit on the others (leave one shape out); error = predicted / measured - 1.",
        "",
        "| shape (H x I) | measured ms / token | TFLOP/s | " + " | ".join(f"{law}: held out" for law in laws) + " |",
        "|---|---|---|" + "---|" * len(laws),
    ]
    held = {law: held_out_errors(rows, with_outputs=law == "flops + outputs") for law in laws}
    summary = {law: [abs(e) for e in errs] for law, errs in held.items()}
    for j, r in enumerate(rows):
        cells = [f"{held[law][j]:+.0%}" for law in laws]
        tf = r.flops / (r.ms_per_token * 1e-3) / 1e12
        lines.append(f"| {r.hidden}x{r.inter} | {r.ms_per_token:.4f} | {tf:.1f} | " + " | ".join(cells) + " |")
    lines.append("")
    for law in laws:
        a, b = _fit(rows, law)
        errs = summary[law]
        lines.append(
            f"- {law}: held-out mean |error| {sum(errs) / len(errs):.0%}, worst {max(errs):.0%}; fitted on all: "
            f"{1 / (a * 1e-3) / 1e12 if a else float('inf'):.1f} TFLOP/s"
            + (f", {b * 1e6:.3f} ns per output element" if b else "")
            + (f" ({b / a:,.0f} flop-equivalents each)" if a and b else "")
        )
    md = "\n".join(lines) + "\n"
    path.with_suffix(".md").write_text(md)
    return md


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--out", default=".")
    ap.add_argument("--threads", type=int, default=11)
    ap.add_argument("--analyse", default=None)
    ap.add_argument("--shapes", default=None, help="HxI,HxI,... instead of the default set (a quick check)")
    ap.add_argument("--tokens", default=None, help="token counts instead of 512,1024,2048")
    ap.add_argument("--interleaved", type=int, default=0, help="ROUNDS: all shapes built once, measured in rounds")
    ap.add_argument("--method", default="BF16", help="the KT method whose kt-kernel class runs the layers")
    a = ap.parse_args()
    if a.measure:
        shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")] if a.shapes else SHAPES
        tokens = [int(v) for v in a.tokens.split(",")] if a.tokens else TOKENS
        if a.interleaved:
            measure_interleaved(Path(a.out), a.threads, shapes, tokens, a.interleaved, a.method)
        else:
            measure(Path(a.out), a.threads, shapes, tokens, a.method)
    if a.analyse:
        print(analyse(Path(a.analyse)))


if __name__ == "__main__":
    main()
