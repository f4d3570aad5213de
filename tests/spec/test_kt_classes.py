"""Which kt-kernel class runs a method on a host of each ISA class (`profile derive` carries curves
across ISA classes with it)."""

from kttune.spec.kt_classes import kt_class_on_isa


def test_the_class_on_each_isa_class_follows_kt_kernels_selection():
    # kt-kernel 0.7.2's utils/amx.py: AMX family first where compiled in (AMX and AVX-512 builds);
    # its MXFP8 AMX class only on a CPU with AMX tiles (`_select_mxfp8_backend`), else AVX2's
    assert kt_class_on_isa("BF16", "avx512") == "AMXBF16_MOE"
    assert kt_class_on_isa("BF16", "avx2") == "AVX2BF16_MOE"
    assert kt_class_on_isa("MXFP4", "avx512") == "AMXFP4_KGroup_MOE"
    assert kt_class_on_isa("MXFP4", "avx2") == "AVX2MXFP4_MOE"
    assert kt_class_on_isa("MXFP8", "amx") == "AMXMXFP8_KGroup_MOE"
    assert kt_class_on_isa("MXFP8", "avx512") == "AVX2MXFP8_MOE"
    assert kt_class_on_isa("FP8_PERCHANNEL", "avx2") is None
    assert kt_class_on_isa("LLAMAFILE", "amx") is None
