"""Building a kt-kernel MoE: class choice and per-expert pointers."""

import pytest
import torch

from kttune.kernels.kt_moe import class_candidates, expert_ptrs
from kttune.spec.kt_classes import KT_CLASS_PREFERENCE


class FakeMoeModule:
    """Stands in for `kt_kernel_ext.moe` only to list class names (no kt-kernel behaviour is faked)."""

    class AMXBF16_MOE:
        write_weight_scale_to_buffer_task = None

    class AVX2BF16_MOE:
        write_weight_scale_to_buffer_task = None

    class AVXVNNI256RawInt4_MOE:  # compiled in, but without a stage A writer
        pass

    class AVX2RawInt4_MOE:
        write_weight_scale_to_buffer_task = None


def test_candidates_follow_the_preference_and_what_is_compiled_in():
    m = FakeMoeModule
    assert class_candidates(m, "bf16") == ["AMXBF16_MOE", "AVX2BF16_MOE"]
    assert class_candidates(m, "RAWINT4", isa=["avx2"]) == ["AVX2RawInt4_MOE"]  # VNNI class needs avx_vnni
    assert class_candidates(m, "RAWINT4", isa=["avx2", "avx_vnni"]) == ["AVXVNNI256RawInt4_MOE", "AVX2RawInt4_MOE"]
    assert class_candidates(m, "RAWINT4", writer=True) == ["AVX2RawInt4_MOE"]
    assert class_candidates(m, "AMXINT4") == []
    assert class_candidates(m, "LLAMAFILE") == []


def test_every_preferred_class_is_named_once():
    for method, prefs in KT_CLASS_PREFERENCE.items():
        names = [n for n, _ in prefs]
        assert len(names) == len(set(names)), method


def test_expert_pointers_step_by_one_expert():
    t = torch.zeros(5, 3, 7, dtype=torch.bfloat16)
    ptrs = expert_ptrs(t)
    assert ptrs == [t[e].data_ptr() for e in range(5)]


@pytest.mark.kt
def test_real_extension_has_a_bf16_writer_class():
    from kt_kernel import kt_kernel_ext as ext

    names = class_candidates(ext.moe, "BF16", writer=True)
    assert names and all(hasattr(getattr(ext.moe, n), "write_weight_scale_to_buffer_task") for n in names)
