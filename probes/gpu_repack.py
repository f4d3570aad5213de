"""Stage C: the 4-bit repack on the GPU against bytes repacked (experts at a time), ours (Triton)
and sgl-kernel's `gptq_marlin_repack` where it imports. RAWINT4 and MXFP4 repack the same bytes the
same way (MXFP4's read as int32 words, `kttune.kernels.int4`); the curve names the shape's method."""

from __future__ import annotations

from kttune.hw.profile import Curve, Point
from kttune.probes.common import NullReporter, Reporter
from kttune.probes.gpu_common import cuda_time_point
from kttune.spec.moe_shape import MoeLayerShape

EXPERT_COUNTS = (1, 2, 4, 16, 64)


def probe_repack(
    shape: MoeLayerShape, *, quick: bool = False, gpu: int = 0, reporter: Reporter | None = None
) -> list[Curve]:
    import torch

    from kttune.kernels.expert_weights import slot_kinds, word_kinds
    from kttune.spec.methods import REPACKED_METHODS
    from kttune.kernels.int4 import repack_int4

    rep = reporter or NullReporter()
    device = torch.device("cuda", gpu)
    method = shape.method if shape.method in REPACKED_METHODS else "RAWINT4"
    kinds = {k.name: k for k in word_kinds(slot_kinds(method, shape.hidden, shape.inter))}
    per_expert = sum(k.nbytes for k in kinds.values())
    counts = (1, 4, 64) if quick else EXPERT_COUNTS
    n = max(counts)
    src = {
        k.name: torch.randint(-(2**31), 2**31 - 1, (n,) + k.shape, device=device, dtype=torch.int32).view(k.dtype)
        if k.dtype == torch.int32
        else torch.rand((n,) + k.shape, device=device).to(k.dtype)
        for k in kinds.values()
    }
    dst = {name: torch.empty((n, t.shape[2], t.shape[1]), dtype=t.dtype, device=device) for name, t in src.items()}
    pts = []
    backend = ""
    for c in counts:
        rep.step(f"stage C repack {shape.name} {c} experts", 0)

        def fn(c=c):
            nonlocal backend
            _, _, backend = repack_int4(src["w13"][:c], src["s13"][:c], dst["w13"][:c], dst["s13"][:c])
            repack_int4(src["w2"][:c], src["s2"][:c], dst["w2"][:c], dst["s2"][:c])

        p = cuda_time_point(fn, x=c * per_expert, repeats=10, min_total_ms=20, max_repeats=100)
        gbps = 2 * c * per_expert / (p.t_ms * 1e-3) / 1e9  # read + write
        pts.append(Point(p.x, p.t_ms, p.t_ms_p10, p.t_ms_p90, p.n, {"experts": c, "rw_gbps": round(gbps, 1)}))
    params = {"method": method, "hidden": shape.hidden, "inter": shape.inter, "model": shape.name}
    curves = [
        Curve(
            "stage_c_repack",
            "bytes",
            tuple(pts),
            params,
            backend=f"ours: {backend} (4-bit g32 -> k-packed [in/8, out])",
        )
    ]
    try:
        from sgl_kernel import gptq_marlin_repack

        mpts = []
        for c in counts:

            def mfn(c=c):
                for e in range(c):
                    for name, (k_, n_) in (
                        ("w13", (shape.hidden, 2 * shape.inter)),
                        ("w2", (shape.inter, shape.hidden)),
                    ):
                        gptq_marlin_repack(dst[name][e], None, k_, n_, 4)

            p = cuda_time_point(mfn, x=c * per_expert, repeats=5)
            mpts.append(p)
        curves.append(Curve("stage_c_repack", "bytes", tuple(mpts), params, backend="sgl-kernel gptq_marlin_repack"))
    except Exception:
        pass
    return curves
