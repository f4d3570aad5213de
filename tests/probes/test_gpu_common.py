"""Pure parts of the GPU probes: link rates, sizes, shapes, NUMA parsing."""

import os

import pytest

from kttune.probes import gpu_copy, gpu_suite
from kttune.probes.common import NullReporter
from kttune.probes.gpu_common import (
    DEEPSEEK_V3,
    bound_to_node,
    node_cpus,
    pcie_theoretical_gbps,
    shapes_for,
)
from kttune.spec.loader import load_model
from kttune.units import GIB, MIB


def test_pcie_rates():
    assert pcie_theoretical_gbps(5, 16) == pytest.approx(63.015, abs=1e-3)
    assert pcie_theoretical_gbps(4, 16) == pytest.approx(31.508, abs=1e-3)
    assert pcie_theoretical_gbps(3, 8) == pytest.approx(7.877, abs=1e-3)
    assert pcie_theoretical_gbps(None, 16) is None


def test_copy_sizes_end_at_the_layer():
    s = gpu_copy.copy_sizes(3 * GIB + 5)
    assert s[0] == MIB and s[-1] == 3 * GIB + 5 and s == sorted(s)
    assert gpu_copy.copy_sizes(MIB) == [MIB]


def test_representative_shapes_and_layer_bytes():
    ss = shapes_for(None)
    names = [m.name for m in ss.moe]
    assert "Qwen3-30B-A3B" in names and "DeepSeek-V3" in names
    assert DEEPSEEK_V3.layer_bytes == 256 * DEEPSEEK_V3.bytes_per_expert
    assert {a.attention for a in ss.attention} == {"gqa", "mla"}


def test_without_a_model_the_pipeline_streams_a_second_expert_size_of_each_method_but_rawint4():
    """So the cost model can tell the loop's cost per step from its cost per byte for a layer the
    probe did not stream (`kttune.cost.components._fit_pipeline_steps`): per method, an expert of
    another size than the representative layer's (a fixed cost per step is told apart only where the
    bytes per step differ well), no bundled model's layer (that one would be read as measured), the
    pipeline alone (no GPU MoE or attention of it)."""
    from kttune.spec.catalog import catalog_names

    from kttune.probes.gpu_common import NARROW_LAYERS

    ss = shapes_for(None)
    rep = {s.method: s for s in ss.moe}
    assert {s.method for s in NARROW_LAYERS} == set(rep) - {"RAWINT4"}
    assert set(NARROW_LAYERS) <= set(ss.pipeline_only)
    bundled = {(load_model(n).hidden_size, load_model(n).moe_intermediate_size) for n in catalog_names()}
    for s in NARROW_LAYERS:
        assert rep[s.method].bytes_per_expert / s.bytes_per_expert >= 3
        assert (s.hidden, s.inter) not in bundled
    assert shapes_for(load_model("qwen3-30b-a3b")).pipeline_only == ()  # a model's own layer needs no other
    steps = [n for n, _ in gpu_suite.plan_gpu_probes(None, None, True, NullReporter())]
    assert sum(n.startswith("pipeline") for n in steps) == len(ss.moe) + len(ss.pipeline_only)
    assert not any(s.name in n for s in ss.pipeline_only for n in steps if not n.startswith("pipeline"))


def test_shapes_for_model():
    from kttune.spec.model_spec import ModelSpec

    m = ModelSpec(
        name="m",
        family="qwen3_moe",
        hidden_size=2048,
        num_layers=2,
        moe_layer_ids=(0, 1),
        num_experts=128,
        top_k=8,
        moe_intermediate_size=768,
        shared_expert_intermediate_size=0,
        dense_intermediate_size=6144,
        vocab_size=10,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        attention="gqa",
        num_attention_heads=32,
        num_kv_heads=4,
        head_dim=128,
        v_head_dim=128,
        default_method="AMXINT4",
    )
    ss = shapes_for(m)
    assert ss.moe[0].method == "BF16" and ss.notes  # AMXINT4 has no layerwise GPU path
    assert ss.attention[0].kv_heads == 4


def test_bound_to_node_restores_affinity():
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no affinity API")
    before = os.sched_getaffinity(0)
    with bound_to_node(0 if node_cpus(0) else None):
        pass
    assert os.sched_getaffinity(0) == before


def test_the_pipeline_runs_in_each_layerwise_method_asked_for():
    """`kttune probe --model glm-4.7 --methods FP8_PERCHANNEL` streams the layer the runner streams
    (FP8 per channel: half the BF16 layer's bytes), not the model's default method's; the GPU MoE
    runs once per expert geometry (it times its methods itself)."""
    from kttune.probes import gpu_suite
    from kttune.probes.common import NullReporter
    from kttune.spec.loader import load_model

    glm = load_model("glm-4.7")
    (fp8,) = shapes_for(glm, ("FP8_PERCHANNEL", "AMXINT4")).moe  # AMXINT4 has no layerwise path
    assert fp8.method == "FP8_PERCHANNEL" and (fp8.hidden, fp8.inter, fp8.experts) == (5120, 1536, 160)
    assert fp8.layer_bytes < 0.6 * shapes_for(glm).moe[0].layer_bytes  # the default (BF16) layer
    none = shapes_for(glm, ("AMXINT4",))
    assert [s.method for s in none.moe] == [shapes_for(glm).moe[0].method] and none.notes
    steps = [
        n for n, _ in gpu_suite.plan_gpu_probes(None, glm, False, NullReporter(), methods=("BF16", "FP8_PERCHANNEL"))
    ]
    assert [n for n in steps if n.startswith("pipeline")] == [
        "pipeline glm-4.7 BF16",
        "pipeline glm-4.7 FP8_PERCHANNEL",
    ]
    assert [n for n in steps if n.startswith("gpu_moe")] == ["gpu_moe glm-4.7"]


def test_deepseek_v4_is_probed_at_representative_attention_shapes():
    """DeepSeek-V4's compressed attention runs SGLang's kernels, which the probe does not run: its
    attention and attention blocks are timed at the representative shapes, with a note; its experts
    in its own method, MXFP4, at its own shape (the 4-bit GEMM with the e2m1 decode)."""
    from kttune.probes.gpu_common import DEEPSEEK_ATTN, REPRESENTATIVE_BLOCKS, shapes_for
    from kttune.spec.loader import load_model

    s = shapes_for(load_model("deepseek-v4-flash"))
    assert s.attention == (DEEPSEEK_ATTN,)
    assert [b.name for b in s.blocks] == list(REPRESENTATIVE_BLOCKS)
    assert [(m.hidden, m.inter, m.experts, m.top_k, m.method) for m in s.moe] == [(4096, 2048, 256, 6, "MXFP4")]
    assert any("compressed sparse attention" in n for n in s.notes)
    assert not any("no layerwise GPU path" in n for n in s.notes)


def test_without_a_model_the_pipeline_streams_each_unasked_mx_methods_layer():
    """The MX methods the CPU probe times unasked (UNASKED_MX) get their loop too: gpt-oss-20b's own
    MXFP4 layer, pipeline alone, through kt-kernel's MXFP4 writer; as on the CPU side, not when
    --methods leaves MXFP4 out. The cost model then reads an MXFP4 layer from MXFP4's loop, not from
    RAWINT4's by bytes (PIPELINE_TWIN)."""
    from kttune.spec.methods import UNASKED_MX

    assert UNASKED_MX == ("MXFP4",)
    mx = [s for s in shapes_for(None).pipeline_only if s.method == "MXFP4"]
    gpt = load_model("gpt-oss-20b")
    assert [(s.hidden, s.inter, s.experts, s.top_k) for s in mx] == [
        (gpt.hidden_size, gpt.moe_intermediate_size, gpt.num_experts, gpt.top_k)
    ]
    assert not any(s.method == "MXFP4" for s in shapes_for(None, ("BF16", "FP8")).pipeline_only)
    assert any(s.method == "MXFP4" for s in shapes_for(None, ("mxfp4",)).pipeline_only)
    steps = [n for n, _ in gpu_suite.plan_gpu_probes(None, None, True, NullReporter())]
    assert "pipeline gpt-oss-20b MXFP4" in steps
    assert not any("gpt-oss" in n for n in steps if not n.startswith("pipeline"))
