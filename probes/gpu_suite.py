"""All GPU probes in one call, for `kttune probe` (probes/run.py calls this when CUDA is present).

    run_gpu_probes(inventory, model, quick, reporter, threads=...) -> list[Curve]

Order: copy bandwidth (up to one full MoE layer of the largest shape), stage C repack, the layerwise
pipeline per shape, GPU MoE per method and shape, bf16 GEMM, attention. A probe that fails or does not
fit is skipped with a note to the reporter; the others still run.

The layerwise pipeline runs at the kt-kernel thread counts of the CPU MoE and stage A probes
(`kttune.probes.common.probe_thread_counts`; `kttune probe` passes its own), since one
`--kt-cpuinfer` drives both paths. Quick mode streams at most `gpu_pipeline.QUICK_LAYER_BYTES` of
each shape's layer (two points per thread count) instead of the whole layer at three: building the
10 GB DeepSeek-V3 / Kimi-K2 layers, once for the host and once per thread count in kt-kernel, was
most of the quick probe's time, and a streaming pipeline's time is linear in the bytes streamed.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field, replace
from typing import Sequence

from kttune.hw.profile import Curve
from kttune.probes.common import NullReporter, Reporter, probe_thread_counts
from kttune.probes.gpu_common import shapes_for
from kttune.spec.methods import REPACKED_METHODS
from kttune.spec.moe_shape import MoeLayerShape
from kttune.units import GIB


def cuda_present() -> bool:
    try:
        import torch

        return torch.cuda.is_available() and torch.cuda.device_count() > 0
    except Exception:
        return False


PROBES = ("copy", "repack", "pipeline", "moe", "gemm", "attention")


def pipeline_threads(inventory, quick: bool, threads: Sequence[int] = ()) -> tuple[int, ...]:
    """The stage A thread counts the pipeline probe runs, largest first: `threads` when given, else
    those of the CPU probes for this inventory's usable cores (`probes/run.py` counts them the same way)."""
    from kttune.probes import gpu_pipeline
    from kttune.probes.inventory import smt_logical, usable_cores

    cores = usable_cores(inventory.cpu) if inventory is not None else gpu_pipeline._cores()
    logical = smt_logical(inventory.cpu, cores) if inventory is not None else None
    return tuple(sorted(probe_thread_counts(cores, quick, threads, logical), reverse=True))


@dataclass(frozen=True)
class PipelineStep:
    """The layerwise pipeline probe of one shape, as planned (its thread counts, configs, layer cap).

    A full probe's step (a model's own layer, streamed whole) whose kt-kernel writer layers would stay
    past `ISOLATE_ABOVE_BYTES` runs in a process of its own (`apart`): kt-kernel 0.7.2 never frees
    them, one per thread count, and DeepSeek-V3's BF16 layer is 22.5 GB. The quick probe's capped
    layers, the timings the calibrations rest on, stay in kttune's process, as the CPU MoE step's quick
    layer does (docs/probe.md#the-pipeline-step-and-kt-kernels-kept-writers). `isolate` forces
    either way (None: by size); `device` "cpu" runs the stages on the CPU (tests)."""

    shape: MoeLayerShape
    threads: tuple[int, ...]
    quick: bool
    reporter: Reporter = field(default_factory=NullReporter, compare=False, repr=False)
    isolate: bool | None = None
    device: str = "cuda"

    @property
    def max_layer_bytes(self) -> int | None:
        from kttune.probes import gpu_pipeline

        return gpu_pipeline.QUICK_LAYER_BYTES if self.quick else None

    @property
    def repeats(self) -> int:
        """Timed layers per point, quick or not: a point is a median with its spread. The quick probe
        took one until 2026-12-04, where a busy instance's single samples read every layer 1.2-1.7x
        another instance's (docs/probe.md#disturbed-points); three cost about 0.3 s a point."""
        from kttune.probes import gpu_pipeline

        return gpu_pipeline.PIPELINE_REPEATS

    def kept_bytes(self) -> int:
        """What the step's writer layers would leave in the process that measures it."""
        from kttune.probes import gpu_pipeline

        return gpu_pipeline.kept_writer_bytes(self.shape, self.max_layer_bytes, len(self.threads))

    @property
    def apart(self) -> bool:
        """Whether the step runs in a process of its own."""
        from kttune.probes.cpu_moe import ISOLATE_ABOVE_BYTES

        if self.isolate is not None:
            return self.isolate
        return not self.quick and self.kept_bytes() > ISOLATE_ABOVE_BYTES

    def __call__(self) -> list[Curve]:
        if not self.apart:
            return self.measure()
        from kttune.probes.isolated import run_isolated

        self.reporter.note(
            f"pipeline {self.shape.name} {self.shape.method}: measured in a process of its own, since kt-kernel "
            f"keeps its writer layers (about {self.kept_bytes() / GIB:.1f} GiB at {len(self.threads)} thread "
            "count(s)) until that process ends"
        )
        return run_isolated(_measure_here, replace(self, reporter=NullReporter()), reporter=self.reporter)

    def measure(self) -> list[Curve]:
        """The step in this process."""
        from kttune.probes import gpu_pipeline

        q = self.quick
        curves, _, notes = gpu_pipeline.probe_pipeline_layer(
            self.shape,
            configs=gpu_pipeline.QUICK_CONFIGS if q else gpu_pipeline.DEFAULT_CONFIGS,
            repeats=self.repeats,
            reporter=self.reporter,
            threads_options=self.threads,
            expert_fractions=gpu_pipeline.QUICK_EXPERT_FRACTIONS if q else (0.25, 0.5, 1.0),
            max_layer_bytes=self.max_layer_bytes,
            device=self.device,
        )
        for n in notes:
            self.reporter.note(n)
        return curves


def _measure_here(step: PipelineStep, reporter: Reporter) -> list[Curve]:
    """`step` measured in the calling process (the isolated child's entry), reporting to `reporter`."""
    return replace(step, reporter=reporter).measure()


def count_steps(
    inventory, model, quick: bool, only: tuple[str, ...] | None = None, methods: tuple[str, ...] = ()
) -> int:
    """How many progress steps `run_gpu_probes` reports (one per probe of one shape)."""
    if not cuda_present():
        return 0
    return len(plan_gpu_probes(inventory, model, quick, NullReporter(), only, methods=methods))


def run_gpu_probes(
    inventory,
    model,
    quick: bool,
    reporter: Reporter | None = None,
    *,
    only: tuple[str, ...] | None = None,
    threads: Sequence[int] = (),
    methods: tuple[str, ...] = (),
) -> list[Curve]:
    """Measure the GPU side of this machine. `model` is a ModelSpec or None (representative shapes).
    `only` restricts to some of: copy, repack, pipeline, moe, gemm, attention. `threads`: the
    pipeline's stage A thread counts (default: `pipeline_threads(inventory, quick)`). `methods`: the
    probe's KT methods; with a model, its layerwise ones each get the pipeline (`shapes_for`)."""
    rep = reporter or NullReporter()
    if not cuda_present():
        rep.note("no CUDA GPU: GPU probes skipped")
        return []
    shapes = shapes_for(model, methods)
    for n in shapes.notes:
        rep.note(n)
    from kttune.probes.gpu_moe import sglang_ops_available

    ops = sglang_ops_available()
    ran = [k for k, v in ops.items() if v]
    rep.note(
        "GPU kernels timed: kttune's own (Triton repack and int4 MoE, torch grouped GEMMs, SDPA)"
        + (
            f"; also sglang/sgl-kernel {', '.join(ran)}"
            if ran
            else "; sglang / sgl-kernel not importable, their "
            "gptq_marlin_repack, fused_marlin_moe and fused_moe were not run"
        )
    )
    steps = plan_gpu_probes(inventory, model, quick, rep, only, threads, methods)
    rep.plan(len(steps), "GPU probes")
    return run_steps(steps, rep)


def run_steps(steps, rep: Reporter) -> list[Curve]:
    """Run (step name, callable returning curves) steps in order, one progress step each: a step
    that fails is a note (with its traceback) and the others stand; the allocator's cache is given
    back after each."""
    curves: list[Curve] = []
    for name, fn in steps:
        rep.step(name)
        try:
            curves += fn()
        except Exception as e:  # one probe failing must not lose the others
            rep.note(f"{name}: failed ({type(e).__name__}: {e})")
            rep.note(traceback.format_exc(limit=3))
        finally:
            try:
                import torch

                torch.cuda.empty_cache()
            except Exception:
                pass
    return curves


def plan_gpu_probes(
    inventory,
    model,
    quick: bool,
    rep: Reporter,
    only=None,
    threads: Sequence[int] = (),
    methods: tuple[str, ...] = (),
) -> list:
    """The GPU probes to run, in order: (step name, callable returning curves). Imports no CUDA.
    The pipeline runs once per MoE shape (one per layerwise method asked for: `shapes_for`), and
    without a model once per narrow layer (`ShapeSet.pipeline_only`); the GPU
    MoE once per expert geometry, whatever the methods (it measures each of its methods itself)."""
    from kttune.probes import gpu_attention, gpu_copy, gpu_gemm, gpu_moe, gpu_repack

    shapes = shapes_for(model, methods)
    want = set(only or ("copy", "repack", "pipeline", "moe", "gemm", "attention"))
    steps = []
    if "copy" in want:
        max_layer = max(s.layer_bytes for s in shapes.moe)
        if quick:
            max_layer = min(max_layer, 2 * GIB)
        steps.append(("copy", lambda: gpu_copy.probe_copy(max_layer, quick=quick, inventory=inventory, reporter=rep)))
    if "repack" in want:
        for s in shapes.moe:
            if s.method in REPACKED_METHODS or model is None:
                steps.append((f"repack {s.name}", lambda s=s: gpu_repack.probe_repack(s, quick=quick, reporter=rep)))
                break
    if "pipeline" in want:
        ts = pipeline_threads(inventory, quick, threads)
        for s in shapes.moe + shapes.pipeline_only:
            steps.append((f"pipeline {s.name} {s.method}", PipelineStep(s, ts, quick, rep)))
    if "moe" in want:
        geometries = {}
        for s in shapes.moe:  # the first shape of each geometry, in order
            geometries.setdefault((s.hidden, s.inter, s.experts, s.top_k), s)
        for s in geometries.values():

            def moe(s=s):
                # quick: each shape in its own method only (the method its layerwise path runs); else
                # the default set and the shape's own method (MXFP4 is timed for a model served in it)
                own = (s.method,) if s.method in gpu_moe.GPU_MOE_KERNELS else ()
                methods = own if quick and own else tuple(dict.fromkeys(gpu_moe.GPU_MOE_METHODS + own))
                curves, notes = gpu_moe.probe_gpu_moe_shape(s, methods, quick=quick, reporter=rep)
                for n in notes:
                    rep.note(n)
                return curves

            steps.append((f"gpu_moe {s.name}", moe))
    if "gemm" in want:
        for h, o in shapes.gemm:
            steps.append(
                (f"gpu_gemm {h}x{o}", lambda h=h, o=o: [gpu_gemm.probe_gpu_gemm(h, o, quick=quick, reporter=rep)])
            )
    if "attention" in want:
        for a in shapes.attention:
            steps.append(
                (f"attention {a.name}", lambda a=a: [gpu_attention.probe_attention(a, quick=quick, reporter=rep)])
            )
    # the attention block is its own probe record (kttune.probes.run.PROBES), run with this suite or alone
    return steps
