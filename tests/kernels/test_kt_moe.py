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


@pytest.mark.kt
@pytest.mark.parametrize("writer", [False, True])
def test_a_layer_builds_no_class_this_cpu_refuses(writer):
    """Without `isa`, a layer tries only the classes whose extra ISA this host's /proc/cpuinfo lists:
    kt-kernel 0.7.2 leaves a refused class's scratch registered, and the next layer that grows the
    shared buffer writes into freed memory (docs/path-runner.md#a-refused-kt-kernel-class-corrupts-the-heap;
    an AVX2 host once tried AVX-VNNI-256 RawInt4 first for every writer, and CI aborted two tests later)."""
    from kttune.kernels.expert_weights import HostExperts
    from kttune.kernels.kt_ext import host_cpu_flags, load_kt_kernel
    from kttune.kernels.kt_moe import KtMoeLayer

    kt = load_kt_kernel()
    flags = host_cpu_flags()
    assert "avx2" in flags  # the reader found this x86-64 host's flags
    built = 0
    for method, prefs in KT_CLASS_PREFERENCE.items():
        if not class_candidates(kt.ext.moe, method, flags, writer=writer):
            continue
        host = HostExperts.random(method, 256, 128, 4, seed=11)
        layer = KtMoeLayer(host, top_k=1, threads=1, max_tokens=1, isa=None, writer=writer)
        with layer:
            assert layer.refused == [], (method, layer.refused)
            needs = dict(prefs)[layer.kernel_class]
            assert all(f in flags for f in needs), (method, layer.kernel_class)
        built += 1
    assert built >= 3
