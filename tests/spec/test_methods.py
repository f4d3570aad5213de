"""KT methods and bytes per expert, against an independent count: the tensors each format stores
for one expert (docs/weight-formats.md, "Layouts on disk and on the GPU"), their shapes times their
element sizes, matrix by matrix."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kttune.errors import UserError
from kttune.spec.methods import (
    FORMATS,
    METHODS,
    NATIVE_METHOD_FOR_FORMAT,
    bytes_per_expert,
    get_method,
    gpu_format,
    layerwise_slot_bytes_per_expert,
)
from kttune.units import MIB


def matrices(h: int, i: int) -> list[tuple[int, int]]:
    """(out, in) of gate, up and down."""
    return [(i, h), (i, h), (h, i)]


def _tensors(fmt: str, out: int, inn: int) -> list[tuple[tuple[int, ...], float]]:
    """(shape, bytes per element) of what `fmt` stores for one [out, in] matrix."""
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    return {
        "bf16": [((out, inn), 2)],
        "fp8_block": [((out, inn), 1), ((cdiv(out, 128), cdiv(inn, 128)), 4)],  # weight_scale_inv fp32
        "fp8_channel": [((out, inn), 1), ((out,), 4)],
        "int4_g32": [((out, inn // 8), 4), ((out, inn // 32), 2)],  # weight_packed int32, bf16 scale
        "mxfp4": [((out, inn // 2), 1), ((out, inn // 32), 1)],  # e2m1 pairs, ue8m0
        "mxfp8": [((out, inn), 1), ((out, inn // 32), 1)],
        "nvfp4": [((out, inn // 2), 1), ((out, inn // 16), 1)],  # e4m3 scale per 16
        "gptq_int4": [((inn // 8, out), 4), ((inn // 128, out), 2)],  # qweight int32, fp16 scales
        "amx_int4": [((out * inn // 2,), 1), ((out,), 4)],  # kt-kernel BufferBInt4: n*k/2 + 4n
        "amx_int8": [((out * inn,), 1), ((out,), 4)],  # BufferB: n*k + 4n
        "gguf_q4k": [((out * inn // 256,), 144)],  # Q4_K: 256 weights in a 144-byte block
    }[fmt]


def by_tensor_shapes(fmt: str, h: int, i: int) -> int:
    return int(sum(math.prod(shape) * size for out, inn in matrices(h, i) for shape, size in _tensors(fmt, out, inn)))


dims = st.integers(1, 32).map(lambda k: 256 * k)  # every group size divides these


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(sorted(FORMATS)), h=dims, i=dims)
def test_bytes_per_expert_matches_the_stored_tensors(fmt, h, i):
    assert bytes_per_expert(fmt, h, i) == by_tensor_shapes(fmt, h, i)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.integers(1, 9000), i=st.integers(1, 3000))
def test_fp8_block_scales_cover_partial_tiles(h, i):
    # 128x128 tiles: a dimension that is not a multiple of 128 still gets a scale for its last tile
    assert bytes_per_expert("fp8_block", h, i) == by_tensor_shapes("fp8_block", h, i)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(sorted(FORMATS)), h=dims, i=dims, k=st.integers(1, 4))
def test_bytes_grow_with_both_dimensions(fmt, h, i, k):
    b = bytes_per_expert(fmt, h, i)
    assert bytes_per_expert(fmt, h * (k + 1), i) > b and bytes_per_expert(fmt, h, i * (k + 1)) > b


def test_documented_sizes():
    # docs/weight-formats.md: Kimi-K2 / DeepSeek-V3 expert (H 7168, I 2048)
    mib = {f: round(bytes_per_expert(f, 7168, 2048) / MIB, 1) for f in FORMATS}
    assert mib["bf16"] == 84.0 and mib["fp8_block"] == 42.0 and mib["int4_g32"] == 23.6


def test_unknown_format_is_an_error():
    with pytest.raises(ValueError, match="unknown weight format"):
        bytes_per_expert("int3", 128, 128)


def test_layerwise_methods_are_the_native_six():
    # docs/sglang-kt.md#the-threshold-must-be-0-for-non-native-methods
    assert {m.name for m in METHODS.values() if m.layerwise} == {
        "RAWINT4",
        "FP8",
        "FP8_PERCHANNEL",
        "BF16",
        "MXFP4",
        "MXFP8",
    }
    assert all(m.native for m in METHODS.values() if m.layerwise)


def test_native_method_for_each_checkpoint_format_reads_it_unconverted():
    for fmt, name in NATIVE_METHOD_FOR_FORMAT.items():
        m = METHODS[name]
        assert m.native and m.cpu_format == fmt
        assert gpu_format(m, fmt) == fmt


@pytest.mark.parametrize("name", ["AMXINT4", "AMXINT8", "LLAMAFILE", "MOE_INT4"])
@pytest.mark.parametrize("ckpt", ["bf16", "fp8_block"])
def test_converted_methods_leave_gpu_experts_in_the_checkpoint_format(name, ckpt):
    assert gpu_format(METHODS[name], ckpt) == ckpt


def test_method_names_are_forgiving_but_checked():
    assert get_method(" fp8-perchannel ").name == "FP8_PERCHANNEL"
    assert get_method("rawint4").name == "RAWINT4"
    with pytest.raises(UserError, match="unknown KT method") as e:
        get_method("INT3")
    assert "RAWINT4" in e.value.line()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=dims, i=dims)
def test_layerwise_slot_per_expert(h, i):
    for m in METHODS.values():
        if m.cpu_format == "mxfp4":
            # a raw copy with fp32 scales plus the prepared copy (docs/memory.md#layerwise-extra)
            raw = sum(out * inn // 2 + (out * inn // 32) * 4 for out, inn in matrices(h, i))
            assert layerwise_slot_bytes_per_expert(m, h, i) == raw + bytes_per_expert("mxfp4", h, i)
        else:
            assert layerwise_slot_bytes_per_expert(m, h, i) == bytes_per_expert(m.cpu_format, h, i)


def test_fp8_block_is_the_only_format_needing_tp_divisibility():
    assert {m.name for m in METHODS.values() if m.needs_fp8_tp_divisibility} == {"FP8"}
