"""All GPU probes in one call, for `kttune probe` (probes/run.py calls this when CUDA is present).

    run_gpu_probes(inventory, model, quick, reporter) -> list[Curve]

Order: copy bandwidth (up to one full MoE layer of the largest shape), stage C repack, the layerwise
pipeline per shape, GPU MoE per method and shape, bf16 GEMM, attention. A probe that fails or does not
fit is skipped with a note to the reporter; the others still run.
"""

from __future__ import annotations

import traceback

from kttune.hw.profile import Curve
from kttune.probes.common import NullReporter, Reporter
from kttune.probes.gpu_common import shapes_for
from kttune.units import GIB


def cuda_present() -> bool:
    try:
        import torch

        return torch.cuda.is_available() and torch.cuda.device_count() > 0
    except Exception:
        return False


PROBES = ("copy", "repack", "pipeline", "moe", "gemm", "attention")


def count_steps(inventory, model, quick: bool, only: tuple[str, ...] | None = None) -> int:
    """How many progress steps `run_gpu_probes` reports (one per probe of one shape)."""
    if not cuda_present():
        return 0
    return len(_plan(inventory, model, quick, NullReporter(), only))


def run_gpu_probes(inventory, model, quick: bool, reporter: Reporter | None = None, *, only: tuple[str, ...] | None = None) -> list[Curve]:
    """Measure the GPU side of this machine. `model` is a ModelSpec or None (representative shapes).
    `only` restricts to some of: copy, repack, pipeline, moe, gemm, attention."""
    rep = reporter or NullReporter()
    if not cuda_present():
        rep.note("no CUDA GPU: GPU probes skipped")
        return []
    shapes = shapes_for(model)
    for n in shapes.notes:
        rep.note(n)
    from kttune.probes.gpu_moe import sglang_ops_available

    ops = sglang_ops_available()
    ran = [k for k, v in ops.items() if v]
    rep.note("GPU kernels timed: kttune's own (Triton repack and int4 MoE, torch grouped GEMMs, SDPA)"
             + (f"; also sglang/sgl-kernel {', '.join(ran)}" if ran else "; sglang / sgl-kernel not importable, their "
                "gptq_marlin_repack, fused_marlin_moe and fused_moe were not run"))
    steps = _plan(inventory, model, quick, rep, only)
    rep.plan(len(steps), "GPU probes")
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


def _plan(inventory, model, quick: bool, rep: Reporter, only) -> list:
    from kttune.probes import gpu_attention, gpu_copy, gpu_gemm, gpu_moe, gpu_pipeline, gpu_repack

    shapes = shapes_for(model)
    want = set(only or ("copy", "repack", "pipeline", "moe", "gemm", "attention"))
    steps = []
    if "copy" in want:
        max_layer = max(s.layer_bytes for s in shapes.moe)
        if quick:
            max_layer = min(max_layer, 2 * GIB)
        steps.append(("copy", lambda: gpu_copy.probe_copy(max_layer, quick=quick, inventory=inventory, reporter=rep)))
    if "repack" in want:
        for s in shapes.moe:
            if s.method == "RAWINT4" or model is None:
                steps.append((f"repack {s.name}", lambda s=s: gpu_repack.probe_repack(s, quick=quick, reporter=rep)))
                break
    if "pipeline" in want:
        for s in shapes.moe:
            def pipe(s=s):
                cfgs = gpu_pipeline.QUICK_CONFIGS if quick else gpu_pipeline.DEFAULT_CONFIGS
                curves, _, notes = gpu_pipeline.probe_pipeline_layer(s, configs=cfgs, repeats=1 if quick else 3, reporter=rep,
                                                                     threads_options=gpu_pipeline.default_thread_options(quick),
                                                                     expert_fractions=(1.0,) if quick else (0.25, 0.5, 1.0))
                for n in notes:
                    rep.note(n)
                return curves
            steps.append((f"pipeline {s.name} {s.method}", pipe))
    if "moe" in want:
        for s in shapes.moe:
            def moe(s=s):
                # quick: each shape in its own method only (the method its layerwise path runs)
                methods = (s.method,) if quick and s.method in gpu_moe.GPU_MOE_METHODS else gpu_moe.GPU_MOE_METHODS
                curves, notes = gpu_moe.probe_gpu_moe_shape(s, methods, quick=quick, reporter=rep)
                for n in notes:
                    rep.note(n)
                return curves
            steps.append((f"gpu_moe {s.name}", moe))
    if "gemm" in want:
        for h, o in shapes.gemm:
            steps.append((f"gpu_gemm {h}x{o}", lambda h=h, o=o: [gpu_gemm.probe_gpu_gemm(h, o, quick=quick, reporter=rep)]))
    if "attention" in want:
        for a in shapes.attention:
            steps.append((f"attention {a.name}", lambda a=a: [gpu_attention.probe_attention(a, quick=quick, reporter=rep)]))

    return steps
