"""The expert-shape law's probe: kt-kernel's MoE layer at a set of expert shapes, timed alike, so a
profile carries the cost per output element of the build and class that ran it
(docs/cost-model.md#the-expert-shape-law).

kt-kernel's matrix kernel runs fewer flops per second on narrow experts: each routed (token, expert)
pair runs 6HI flops and writes 2I + H outputs that it converts, activates and combines, and that
elementwise work is a third to over half of the kernel's time at some shapes. The cost model charges
`flops x (1 + r (2I + H) / 6HI)`; r is a property of the build and class, measured once per pair by
`benchmarks/bench_cpu_moe_shapes.py` for the builds this project has run
(`kttune.spec.kt_classes.MATRIX_OUTPUT_FLOPS`). A build or class outside that table (an AVX2 or
avx512_vnni build, another AMX generation) is read by flops alone unless its own probe measures r:
this probe does.

Per method: every shape of `SHAPES` (E = 16 experts, top-4: 256 / 512 / 1,024 rows per expert at
1,024 / 2,048 / 4,096 tokens, as `benchmarks/bench_cpu_moe_shapes.py` measures) built once, then
`rounds` rounds; in each, the shapes in a shuffled order and every size once after one warm-up call
(the host's drift over the run falls on every shape alike, and the law's r is a ratio of two costs of
one kernel on the same cores, where the instance's speed cancels). Each point is the median over
rounds with its 10th and 90th percentiles and the per-round samples. One `cpu_moe_shape` curve per
shape; `kttune.hw.shape_law.measured_shape_law` judges the set: r is used only where it predicts a
shape left out of the fit better than flops alone and stays above 0 over resampled rounds. Three
rounds at 512 / 1,024 tokens were too few (one class's r anywhere in 144-117,800 over resampled
rounds on the H200 box); five at 1,024-4,096 agree with the benchmark's constants
(benchmarks/results/2026-12-04-computed/shape-law-probe-held-out.md).
"""

from __future__ import annotations

import gc
import random
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from kttune.hw.profile import CpuInfo, Curve, Point
from kttune.hw.shape_law import MIN_SHAPES, measured_shape_law
from kttune.kernels.expert_weights import HostExperts
from kttune.kernels.kt_ext import KtKernel, load_kt_kernel, quiet_stdout
from kttune.kernels.kt_moe import KtMoeLayer
from kttune.probes.common import NullReporter, Reporter, quantiles
from kttune.probes.cpu_moe import (
    _inputs,
    available_ram_bytes,
    host_bytes_needed,
    moe_curve_params,
    supported_methods,
)
from kttune.spec.moe_shape import MoeLayerShape
from kttune.units import GIB

# (hidden, intermediate): output elements per flop from 6.5e-4 (1024 x 512) to 1.6e-4 (4096 x 2048),
# a 4x span, in 1.5 GB of BF16 weights for the five layers (E = 16)
SHAPES = ((1024, 512), (2048, 512), (1024, 2048), (2048, 1536), (4096, 2048))
EXPERTS, TOP_K = 16, 4
TOKENS = (1024, 2048, 4096)
ROUNDS = 5


@dataclass(frozen=True)
class ShapeLawOptions:
    """What to measure: the methods (empty: every one the host's kt-kernel runs), the kt-kernel
    worker count, the shapes, the token counts and the rounds."""

    threads: int
    methods: tuple[str, ...] = ()
    shapes: tuple[tuple[int, int], ...] = SHAPES
    tokens: tuple[int, ...] = TOKENS
    rounds: int = ROUNDS
    experts: int = EXPERTS
    top_k: int = TOP_K
    ram_fraction: float = 0.5  # of the RAM available, for every shape's layer at once
    seed: int = 0


@dataclass
class ShapeLawPlan:
    """Per method, the shapes whose layers fit in RAM together (largest dropped first, with a note)."""

    shapes: dict[str, tuple[tuple[int, int], ...]]
    options: ShapeLawOptions
    notes: list[str] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return sum(len(s) + self.options.rounds for s in self.shapes.values())


def _layer_bytes(method: str, h: int, i: int, opts: ShapeLawOptions) -> int:
    w, s = host_bytes_needed(method, MoeLayerShape(h, i, opts.experts, opts.top_k, method), max(opts.tokens))
    return w + s


def plan_shape_law(opts: ShapeLawOptions, cpu: CpuInfo, ram_bytes: int | None = None) -> ShapeLawPlan:
    """The shapes measured per method. Needs kt-kernel (the torch fallback is no kt-kernel build: its r
    would describe nothing a server runs); methods the host's build has no class for are left out."""
    kt = load_kt_kernel()
    if kt is None:
        return ShapeLawPlan({}, opts, ["expert-shape law not measured: kt-kernel is not importable"])
    supported = supported_methods(kt, cpu.isa)
    asked = [m.strip().upper().replace("-", "_") for m in opts.methods]  # as the CPU MoE probe reads them
    methods = [m for m in (asked or supported) if m in supported]
    budget = int((available_ram_bytes() if ram_bytes is None else ram_bytes) * opts.ram_fraction)
    shapes, notes = {}, []
    for m in methods:
        keep = sorted(opts.shapes, key=lambda s: _layer_bytes(m, *s, opts))
        while keep and sum(_layer_bytes(m, *s, opts) for s in keep) > budget:
            dropped = keep.pop()
            notes.append(
                f"expert-shape law {m}: {dropped[0]}x{dropped[1]} left out, the {len(keep) + 1} layers need "
                f"more than {budget / GIB:.1f} GiB together"
            )
        if len(keep) < 3:
            notes.append(f"expert-shape law {m}: not measured, fewer than 3 shapes fit in RAM")
            continue
        shapes[m] = tuple(s for s in opts.shapes if s in keep)
    return ShapeLawPlan(shapes, opts, notes)


def measure_shape_set(
    method: str,
    shapes: Sequence[tuple[int, int]],
    opts: ShapeLawOptions,
    *,
    kt: KtKernel,
    isa: Sequence[str] | None = (),
    numa_nodes: Sequence[int] = (0,),
    reporter: Reporter | None = None,
) -> list[Curve]:
    """One method's shapes, built once and timed in shuffled rounds (the module docstring); one
    `cpu_moe_shape` curve per shape."""
    reporter = reporter or NullReporter()
    layers: dict[tuple[int, int], KtMoeLayer] = {}
    inputs: dict[tuple[int, int], dict[int, Any]] = {}
    layer_shapes = {(h, i): MoeLayerShape(h, i, opts.experts, opts.top_k, method) for h, i in shapes}
    try:
        for (h, i), shape in layer_shapes.items():
            with quiet_stdout(to_stderr=True):
                layers[(h, i)] = KtMoeLayer(
                    HostExperts.random(method, h, i, opts.experts, seed=opts.seed),
                    top_k=opts.top_k,
                    threads=opts.threads,
                    numa_nodes=list(numa_nodes),
                    max_tokens=max(opts.tokens),
                    isa=isa,
                    kt=kt,
                )
            inputs[(h, i)] = {n: _inputs(n, shape, opts.seed) for n in opts.tokens}
            reporter.step(f"shape law {method}: built {h}x{i}")
        samples: dict[tuple[int, int], dict[int, list[float]]] = {k: {n: [] for n in opts.tokens} for k in layers}
        rng = random.Random(opts.seed)
        for r in range(opts.rounds):
            order = list(layers)
            rng.shuffle(order)
            for key in order:
                for n in opts.tokens:
                    x, ids, w, out = inputs[key][n]
                    layers[key].forward(x, ids, w, out)  # warm-up: this shape's buffers after another's
                    t0 = time.perf_counter()
                    layers[key].forward(x, ids, w, out)
                    samples[key][n].append((time.perf_counter() - t0) * 1e3)
            reporter.step(f"shape law {method}: round {r + 1}/{opts.rounds}")
        curves = []
        for key, per in samples.items():
            pts = []
            for n, xs in per.items():
                p10, med, p90 = quantiles(xs)
                pts.append(Point(x=n, t_ms=med, t_ms_p10=p10, t_ms_p90=p90, n=len(xs), extra={"samples_ms": xs}))
            curves.append(
                Curve(
                    kind="cpu_moe_shape",
                    x_unit="tokens",
                    points=tuple(pts),
                    params={
                        **moe_curve_params(method, opts.threads, 1, layer_shapes[key], layers[key].kernel_class),
                        "rounds": opts.rounds,
                    },
                    backend=kt.backend,
                )
            )
        return curves
    finally:
        for layer in layers.values():
            layer.close()
        layers.clear()
        gc.collect()


def probe_shape_law(
    plan: ShapeLawPlan,
    cpu: CpuInfo,
    reporter: Reporter | None = None,
    numa_ids: Sequence[int] = (0,),
) -> list[Curve]:
    """Every method of `plan`; a method kt-kernel cannot build or run is a note, the others stand."""
    reporter = reporter or NullReporter()
    for n in plan.notes:
        reporter.note(n)
    kt = load_kt_kernel()
    if kt is None:
        return []
    curves: list[Curve] = []
    for method, shapes in plan.shapes.items():
        try:
            got = measure_shape_set(
                method, shapes, plan.options, kt=kt, isa=cpu.isa, numa_nodes=list(numa_ids)[:1], reporter=reporter
            )
        except (RuntimeError, ValueError, MemoryError) as e:
            reporter.note(f"expert-shape law {method}: not measured ({type(e).__name__}: {e})")
            reporter.step(f"shape law {method}: failed", advance=len(shapes) + plan.options.rounds)
            continue
        curves += got
        if got:
            reporter.note(shape_law_verdict(method, got))
    return curves


def shape_law_verdict(method: str, curves: Sequence[Curve]) -> str:
    """The line the probe prints for one method's shape set: the law's verdict, or why it was not
    judged (on a busy host a shape's time may not grow with the tokens; r then stays the build's
    constant)."""
    kernel = curves[0].params["kernel"]
    fit = measured_shape_law(curves, curves[0].backend, kernel)
    if fit is not None:
        return f"expert-shape law {method} ({kernel}): {fit.describe()}"
    return (
        f"expert-shape law {method} ({kernel}): not judged, fewer than {MIN_SHAPES} shapes took longer at more "
        "tokens (timed in the noise of a busy host); the build's constant stays, re-probe with `--shape-law` on a "
        "quiet host"
    )
