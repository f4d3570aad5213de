"""kt-kernel 0.7.2's MoE classes: which class runs a KT method on a host, and which classes switch
GEMM kernels with the forward's length. Facts read from kt-kernel's code (docs/cost-model.md#kt-kernels-two-gemm-kernels,
docs/weight-formats.md); pure, no import of kt-kernel (the measuring code checks them against the
loaded extension, `kttune.kernels.kt_moe.class_candidates`)."""

from __future__ import annotations

# kt-kernel MoE classes per method, most preferred first (the order kt-kernel 0.7.2's own
# selection uses: `utils/amx.py` `_select_rawint4_backend`, FP8/BF16 "prefer AMX, fall back to
# AVX2"). A class is used only if the loaded extension variant compiled it in; `needs` names host
# ISA flags a class needs beyond that (kt-kernel checks AVX-VNNI at run time). The AMX-family
# classes (`AMX*`) are compiled into the AMX and the AVX-512 builds, the `AVX2*` ones into every build.
KT_CLASS_PREFERENCE: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "AMXINT4": (("AMXInt4_MOE", ()),),
    "AMXINT8": (("AMXInt8_MOE", ()),),
    "BF16": (("AMXBF16_MOE", ()), ("AVX2BF16_MOE", ())),
    "FP8": (("AMXFP8_MOE", ()), ("AVX2FP8_MOE", ())),
    "FP8_PERCHANNEL": (("AMXFP8PerChannel_MOE", ()),),
    "RAWINT4": (
        ("AMXInt4_KGroup_MOE", ()),
        ("AVXVNNI256RawInt4_MOE", ("avx_vnni",)),
        ("AVX2RawInt4_MOE", ()),
    ),
}

# The classes that choose their GEMM per forward: `qlen > 4 * expert_num / num_experts_per_tok`
# runs the tiled matrix-matrix kernel (AMX tiles in the AMX build), anything shorter a row-by-row
# vector-matrix kernel (kt-kernel 0.7.2 `operators/amx/`: bf16-moe.hpp, k2-moe.hpp, moe.hpp,
# fp4-moe.hpp, mxfp8-moe.hpp, `do_gate_up_gemm` / `do_down_gemm`). The FP8 and FP8 per-channel
# classes and the AVX2 build's classes run one kernel at every length.
KT_GEMM_DISPATCH_KERNELS = frozenset(
    {
        "AMXBF16_MOE",
        "AMXInt4_KGroup_MOE",
        "AMXInt4_MOE",
        "AMXInt8_MOE",
        "AMXFP4_KGroup_MOE",
        "AMXMXFP8_KGroup_MOE",
    }
)


def kt_matmul_above(kernel: str | None, experts_total: int, top_k: int) -> int | None:
    """The forward length above which kt-kernel's `kernel` class runs its matrix-matrix GEMM (C++
    integer arithmetic: 4 * E / k, E the layer's routed experts whatever runs on the GPU, k its
    top-k); None for a class with one kernel at every length."""
    if kernel not in KT_GEMM_DISPATCH_KERNELS or top_k <= 0:
        return None
    return 4 * experts_total // top_k


def kt_class_on_isa(method: str, isa_class: str) -> str | None:
    """The class kt-kernel runs `method` with on a host of ISA class `isa_class` ("amx", "avx512",
    "avx2"; `kttune.hw.derive.isa_class`): the first AMX-family class on AMX and AVX-512 hosts, the
    first AVX2 class on an AVX2 host (AVX-VNNI-256 classes need a flag the class alone does not
    say); None where the method has none there."""
    prefix = "AVX2" if isa_class == "avx2" else "AMX"
    return next((name for name, _ in KT_CLASS_PREFERENCE.get(method.upper(), ()) if name.startswith(prefix)), None)
