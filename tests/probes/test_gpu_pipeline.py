"""The pipeline probe's plan (kttune.probes.gpu_pipeline): how much of each layer a quick probe streams
(the mechanism itself: tests/runner/test_pipeline.py)."""


def test_quick_layer_cap_keeps_whole_experts_within_the_cap():
    from hypothesis import given, strategies as st

    from kttune.spec.moe_shape import MoeLayerShape
    from kttune.probes.gpu_pipeline import expert_stream_bytes, layer_experts
    from kttune.units import GIB, MIB

    @given(
        st.sampled_from(["BF16", "FP8", "RAWINT4"]),
        st.sampled_from([1024, 2048, 4096, 7168]),
        st.sampled_from([256, 512, 768, 1536, 2048]),
        st.integers(8, 512),
        st.sampled_from([2, 4, 8]),
        st.integers(64 * MIB, 8 * GIB),
    )
    def law(method, h, i, e, k, cap):
        shape = MoeLayerShape(hidden=h, inter=i, experts=e, top_k=k, method=method, name="s")
        n = layer_experts(shape, cap)
        assert layer_experts(shape, None) == e  # a full probe streams the whole layer
        assert 1 <= n <= e
        assert n * expert_stream_bytes(shape) <= cap or n == min(e, 2 * k)  # within the cap, or the floor
        assert n == e or (n + 1) * expert_stream_bytes(shape) > cap  # as many as fit

    law()


def test_quick_pipeline_plan_caps_the_10gb_layers_and_keeps_two_points():
    from kttune.probes import gpu_pipeline, gpu_suite
    from kttune.probes.common import NullReporter
    from kttune.probes.gpu_common import shapes_for

    quick = [f for n, f in gpu_suite.plan_gpu_probes(None, None, True, NullReporter()) if n.startswith("pipeline")]
    full = [f for n, f in gpu_suite.plan_gpu_probes(None, None, False, NullReporter()) if n.startswith("pipeline")]
    assert [f.shape for f in quick] == [f.shape for f in full] == list(shapes_for(None).moe)
    assert all(f.max_layer_bytes is None for f in full)
    for f in quick:
        n = gpu_pipeline.layer_experts(f.shape, f.max_layer_bytes)
        assert n * gpu_pipeline.expert_stream_bytes(f.shape) <= gpu_pipeline.QUICK_LAYER_BYTES
        assert n < f.shape.experts or f.shape.method == "BF16"  # only the 1.2 GB Qwen3 layer is whole
    assert len(gpu_pipeline.QUICK_EXPERT_FRACTIONS) >= 2  # a slope, not a constant, for the cost fit
    # every point a median with its spread, quick or full (a single layer timing carried a busy moment)
    assert all(f.repeats >= 3 for f in quick + full) and {f.repeats for f in quick} == {f.repeats for f in full}
