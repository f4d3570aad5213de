"""kt-kernel 0.7.2's MoE classes: which class runs a KT method on a host, and which classes switch
GEMM kernels with the forward's length. Facts read from kt-kernel's code (docs/cost-model.md#kt-kernels-two-gemm-kernels,
docs/weight-formats.md); pure, no import of kt-kernel (the measuring code checks them against the
loaded extension, `kttune.kernels.kt_moe.class_candidates`)."""

from __future__ import annotations

# kt-kernel MoE classes per method, most preferred first (the order kt-kernel 0.7.2's own
# selection uses: `utils/amx.py` `_select_rawint4_backend`, FP8/BF16 "prefer AMX, fall back to
# AVX2"). A class is used only if the loaded extension variant compiled it in; `needs` names host
# ISA flags a class needs beyond that (kt-kernel checks AVX-VNNI at run time, and a class that refuses
# leaves its scratch registered: docs/path-runner.md#a-refused-kt-kernel-class-corrupts-the-heap). The AMX-family
# classes (`AMX*`) are compiled into the AMX and the AVX-512 builds, the `AVX2*` ones into every build.
KT_CLASS_PREFERENCE: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "AMXINT4": (("AMXInt4_MOE", ()),),
    "AMXINT8": (("AMXInt8_MOE", ()),),
    "BF16": (("AMXBF16_MOE", ()), ("AVX2BF16_MOE", ())),
    "FP8": (("AMXFP8_MOE", ()), ("AVX2FP8_MOE", ())),
    "FP8_PERCHANNEL": (("AMXFP8PerChannel_MOE", ()),),
    # MXFP4 / MXFP8: `_select_mxfp4_backend` / `_select_mxfp8_backend`; the AMX MXFP8 class only where
    # the host has AMX tiles (kt-kernel checks the CPU flags), else the AVX2 one.
    "MXFP4": (("AMXFP4_KGroup_MOE", ()), ("AVX2MXFP4_MOE", ())),
    "MXFP8": (("AMXMXFP8_KGroup_MOE", ("amx_tile", "amx_bf16")), ("AVX2MXFP8_MOE", ())),
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


# The MoE kernel's cost per output element, in flop-equivalents of its own rate (the flops it could
# have run in the time it spends on one element), per (build variant, class), measured: each routed
# (token, expert) pair runs 6HI flops and writes 2I gate/up and H down outputs in fp32 accumulators
# that the kernel converts, activates and combines elementwise, so a narrow expert runs fewer flops
# per second than a wide one (docs/cost-model.md#the-expert-shape-law). Each constant is the median
# of its runs: `benchmarks/bench_cpu_moe_shapes.py --interleaved` (seven expert shapes from
# 2048 x 512 to 4096 x 14336 built once and timed in shuffled rounds at 128-1,024 rows per expert;
# results `cpu-moe-shapes-interleaved*.md`) and the probe's own shape sets (`kttune probe
# --shape-law`: five shapes, 256-1,024 rows per expert; `shape-law-probe-{b,c}-*` profiles), on the
# H200 box's AMX Xeon at 11 threads unless said: the AMX tile kernels BF16 2,140 / 2,512 / 3,078 /
# 3,567 (6, 11, 15 threads on one instance, 11 on another) and 2,212 / 3,186 / 3,966 (sets of two
# more instances), INT4 3,541 and 4,930 / 5,202 / 7,802, INT8 3,677 and 4,781 / 3,950 / 5,041; its
# FP8, FP8 per-channel and RAWINT4 classes, which compute without AMX tiles, 282, 503 and 505 and
# 267 / 161, 256 / 302, 490 / 735; on an AMD EPYC, the avx512_bf16 build (1 thread), BF16 127 and
# INT8 0. A ratio of two costs of one kernel on the same cores, so the instance's speed cancels in it
# (BF16's flop rate moved 2x between two instances, the ratio 1.7x); over the runs' range the
# predictions move by a few points (docs/cost-model.md#the-expert-shape-law). Where the MACs are
# fast (AMX tiles) the elementwise work shows; where they are slow it vanishes. A class or build not
# measured has none (0: the flops alone), and so has a curve `profile derive` carried to another ISA
# class (its backend then names no build).
MATRIX_OUTPUT_FLOPS: dict[tuple[str, str], float] = {
    ("amx", "AMXBF16_MOE"): 3078.0,
    ("amx", "AMXInt4_MOE"): 5066.0,
    ("amx", "AMXInt8_MOE"): 4366.0,
    ("amx", "AMXFP8_MOE"): 267.0,
    ("amx", "AMXFP8PerChannel_MOE"): 302.0,
    ("amx", "AMXInt4_KGroup_MOE"): 505.0,
    ("avx512_bf16", "AMXBF16_MOE"): 127.0,
    ("avx512_bf16", "AMXInt8_MOE"): 0.0,
}


# The H100 box's Emerald Rapids shape-law sets (instances n-q, 2026-12-06) are not counted: counted,
# they move the 40 held-out model curves' error 16.2% -> 16.1% and the README's figures by a point at
# most (docs/cost-model.md#the-expert-shape-law, 2026-12-06-computed/shape-law-constants-emr.md).
# The runs each constant of MATRIX_OUTPUT_FLOPS is the median of, as paths under the repository's
# benchmarks/results/ (not installed with the package: provenance, read by tests/hw/test_shape_law.py
# and benchmarks/bench_shape_law_constants.py): `bench_cpu_moe_shapes.py --interleaved` runs (JSON)
# and profiles whose probe measured the class's shape set (`kttune probe --shape-law`).
_H200, _EPYC = "2026-12-04-h200-pcie5-xeon-amx-16c", "2026-12-04-epyc-avx512-2c"
_SETS_B, _SETS_B2, _SETS_C = (
    f"{_H200}/shape-law-probe-b-probe-quick-shape-law.profile.json",
    f"{_H200}/shape-law-probe-b-probe-quick-shape-law-2.profile.json",
    f"{_H200}/shape-law-probe-c-probe-quick-shape-law.profile.json",
)
MATRIX_OUTPUT_FLOPS_RUNS: dict[tuple[str, str], tuple[str, ...]] = {
    ("amx", "AMXBF16_MOE"): (
        f"{_H200}/cpu-moe-shapes-interleaved.json",
        f"{_H200}/cpu-moe-shapes-interleaved-bf16-11t.json",
        f"{_H200}/cpu-moe-shapes-interleaved-bf16-15t.json",
        f"{_H200}/cpu-moe-shapes-interleaved-bf16-6t.json",
        _SETS_B,
        _SETS_B2,
        _SETS_C,
    ),
    ("amx", "AMXInt4_MOE"): (f"{_H200}/cpu-moe-shapes-interleaved-amxint4-11t.json", _SETS_B, _SETS_B2, _SETS_C),
    ("amx", "AMXInt8_MOE"): (f"{_H200}/cpu-moe-shapes-interleaved-amxint8-11t.json", _SETS_B, _SETS_B2, _SETS_C),
    ("amx", "AMXFP8_MOE"): (f"{_H200}/cpu-moe-shapes-interleaved-fp8-11t.json", _SETS_B, _SETS_C),
    ("amx", "AMXFP8PerChannel_MOE"): (f"{_H200}/cpu-moe-shapes-interleaved-fp8-perchannel-11t.json", _SETS_B, _SETS_C),
    ("amx", "AMXInt4_KGroup_MOE"): (f"{_H200}/cpu-moe-shapes-interleaved-rawint4-11t.json", _SETS_B, _SETS_C),
    ("avx512_bf16", "AMXBF16_MOE"): (f"{_EPYC}/cpu-moe-shapes-interleaved-bf16-1t.json",),
    ("avx512_bf16", "AMXInt8_MOE"): (f"{_EPYC}/cpu-moe-shapes-interleaved-amxint8-1t.json",),
}


# The CPUs each build's constants were measured on, as (vendor, CPUID family, model number) from the
# runs' machine files (lscpu): the AMX build's on the H200 box, whose instances were all Emerald
# Rapids; the avx512_bf16 build's on the development VM's Zen 4 EPYC. r is a ratio of two costs of
# one kernel on one kind of core: another generation's cores may hold another ratio
# (docs/probe.md#one-name-two-cpus), which `kttune probe --shape-law` measures on the host.
MATRIX_OUTPUT_FLOPS_CPUS: dict[str, tuple[tuple[str, int, int], ...]] = {
    "amx": (("GenuineIntel", 6, 207),),
    "avx512_bf16": (("AuthenticAMD", 25, 17),),
}


def matrix_output_flops(backend: str | None, kernel: str | None) -> float:
    """`MATRIX_OUTPUT_FLOPS` of the class `kernel` of the build named by a curve's `backend`
    ("kt-kernel:<variant>", `kttune.kernels.kt_ext.KtKernel.backend`); 0 where not measured."""
    if not backend or not kernel or not backend.startswith("kt-kernel:"):
        return 0.0
    return MATRIX_OUTPUT_FLOPS.get((backend.split(":", 1)[1], kernel), 0.0)


def kt_class_on_isa(method: str, isa_class: str) -> str | None:
    """The class kt-kernel runs `method` with on a host of ISA class `isa_class` ("amx", "avx512",
    "avx2"; `kttune.hw.derive.isa_class`): the first AMX-family class on AMX and AVX-512 hosts (one
    that needs AMX tiles on AMX hosts alone), else the first AVX2 class (AVX-VNNI-256 classes need a
    flag the class alone does not say); None where the method has none there."""
    prefs = KT_CLASS_PREFERENCE.get(method.upper(), ())
    if isa_class != "avx2":
        for name, needs in prefs:
            if name.startswith("AMX") and (isa_class == "amx" or not any(f.startswith("amx") for f in needs)):
                return name
    return next((name for name, _ in prefs if name.startswith("AVX2")), None)


# kt-kernel 0.7.2 never frees an AMX-family layer's packed weights: `~AMX_MOE_BASE()` is defaulted and
# the per-expert blocks it aligned_alloc'd have no owner, so every build of such a class keeps its
# packed layer until the process ends (measured on AMX hosts: the resident size grows by the packed
# layer at each build and close; docs/path-runner.md#kt-kernels-amx-layers-are-never-freed). Upstream
# frees them after 0.7.2 (`owned_aligned_allocs_`), the last release there is.
KT_LEAKING_CLASS_PREFIX = "AMX"
KT_LEAK_LAST_VERSION = (0, 7, 2)


def kt_class_leaks(kernel: str, version: str) -> bool:
    """True where kt-kernel `version` keeps class `kernel`'s packed weights after the layer is
    destroyed; a version that does not parse is taken to leak (keeping a layer costs no more)."""
    if not kernel.startswith(KT_LEAKING_CLASS_PREFIX):
        return False
    parts = version.split("+")[0].split(".")[:3]
    try:
        release = tuple(int(p) for p in parts)
    except ValueError:
        return True
    return len(release) < 3 or release <= KT_LEAK_LAST_VERSION
