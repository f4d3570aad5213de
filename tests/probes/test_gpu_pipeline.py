"""The pipeline probe's plan (kttune.probes.gpu_pipeline): how much of each layer a quick probe streams
(the mechanism itself: tests/runner/test_pipeline.py), the probe run on the CPU device, and which
points it times again."""

import importlib.util

import pytest


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
    shapes = shapes_for(None)
    assert [f.shape for f in quick] == [f.shape for f in full] == list(shapes.moe + shapes.pipeline_only)
    assert all(f.max_layer_bytes is None for f in full)
    for f in quick:
        n = gpu_pipeline.layer_experts(f.shape, f.max_layer_bytes)
        assert n * gpu_pipeline.expert_stream_bytes(f.shape) <= gpu_pipeline.QUICK_LAYER_BYTES
        # only the 1.2 GB Qwen3 layer and the narrow ones are whole
        assert n < f.shape.experts or f.shape.method == "BF16" or f.shape in shapes.pipeline_only
    assert len(gpu_pipeline.QUICK_EXPERT_FRACTIONS) >= 2  # a slope, not a constant, for the cost fit
    # every point a median with its spread, quick or full (a single layer timing carried a busy moment)
    assert all(f.repeats >= 3 for f in quick + full) and {f.repeats for f in quick} == {f.repeats for f in full}


def test_the_pipeline_probe_runs_on_the_cpu_with_kt_kernels_writer():
    """The whole probe (host layer, kt-kernel's writer where installed, every point measured, the
    retime pass) on the CPU device, where the stages run one after another: one curve per thread
    count, its points the bytes of the experts streamed, each a median of the repeats."""
    from kttune.probes.gpu_pipeline import probe_pipeline_layer
    from kttune.runner.pipeline import PipelineConfig
    from kttune.spec.moe_shape import MoeLayerShape

    shape = MoeLayerShape(hidden=256, inter=128, experts=8, top_k=2, method="FP8", name="tiny")
    curves, results, _ = probe_pipeline_layer(
        shape,
        threads_options=(1,),
        configs=(PipelineConfig(2, 1),),
        repeats=3,
        expert_fractions=(0.5, 1.0),
        device="cpu",
    )
    (curve,) = curves
    assert curve.kind == "pipeline" and "copy on the CPU" in curve.backend
    if importlib.util.find_spec("kt_kernel"):
        assert curve.backend.startswith("A: kt-kernel:")
    half, full = curve.points
    assert [half.extra["experts_streamed"], full.extra["experts_streamed"]] == [4, 8]
    assert full.x == 2 * half.x == results[0].layer_bytes
    for p in curve.points:
        assert p.n == 3 and p.t_ms_p10 <= p.t_ms <= p.t_ms_p90 and p.extra["stage_a_ms"] > 0
        assert "run" not in p.extra  # the retime's bookkeeping stays out of the profile


def test_the_curve_is_timed_in_sglang_kts_loop_and_every_configs_full_layer_is_kept():
    """With the quick probe's configurations, the curve's points are sglang-kt's own loop (host, two
    slots, one expert a step: what a server runs) whichever is faster, and the full point keeps each
    configuration's layer (the cost model's ratio for a run in another); without the loop among the
    configurations, the fastest is the curve."""
    from kttune.cost.components import SGLANG_KT_PIPELINE
    from kttune.probes import gpu_pipeline
    from kttune.runner.pipeline import PipelineConfig
    from kttune.spec.moe_shape import MoeLayerShape

    assert gpu_pipeline.SGLANG_KT_LOOP.label() == SGLANG_KT_PIPELINE
    assert gpu_pipeline.SGLANG_KT_LOOP in gpu_pipeline.QUICK_CONFIGS
    shape = MoeLayerShape(hidden=256, inter=128, experts=8, top_k=2, method="BF16", name="tiny")
    kw = dict(threads_options=(1,), repeats=2, expert_fractions=(0.5, 1.0), device="cpu")
    (curve,), results, _ = gpu_pipeline.probe_pipeline_layer(shape, configs=gpu_pipeline.QUICK_CONFIGS, **kw)
    full = curve.points[-1]
    assert set(full.extra["configs"]) == {r.config.label() for r in results}
    assert len(full.extra["configs"]) == 2  # on the CPU the stream config runs host-driven
    for p in curve.points:
        assert (p.extra["slots"], p.extra["group"], p.extra["driver"]) == (2, 1, "host")
    assert full.extra["configs"][SGLANG_KT_PIPELINE]["layer_ms"] == pytest.approx(full.t_ms, abs=1e-3)
    other = PipelineConfig(2, 2)
    (curve,), results, _ = gpu_pipeline.probe_pipeline_layer(shape, configs=(other, PipelineConfig(3, 1)), **kw)
    fastest = min(results, key=lambda r: r.layer_ms)
    assert curve.points[-1].extra["group"] == fastest.config.group
    assert curve.points[-1].extra["slots"] == fastest.config.slots


def _result(mib: int, ms: float, p10: float | None = None, p90: float | None = None):
    from kttune.runner.pipeline import PipelineConfig, PipelineResult

    return PipelineResult(
        config=PipelineConfig(2, 2, 1, "stream"),
        experts=mib // 24,
        layer_bytes=mib * 2**20,
        stage_a_ms=ms,
        stage_b_ms=ms / 2,
        stage_c_ms=1.0,
        layer_ms=ms,
        layer_ms_p10=p10 or 0.98 * ms,
        layer_ms_p90=p90 or 1.02 * ms,
        repeats=3,
    )


def test_a_layer_slower_per_byte_than_a_smaller_one_is_timed_again_and_the_faster_kept():
    """The first H100 quick probe's Kimi-K2 RAWINT4 curve at 11 threads: 1,016 MiB in 32.2 ms, 2,032
    MiB in 116.5 ms (each tight), where the same instance's next probe read the larger 56.2 ms. The
    larger point is timed again on the same config and experts; the smaller, consistent, is not."""
    from kttune.probes.common import NullReporter
    from kttune.probes.gpu_pipeline import retimed_runs

    small, big = _result(1016, 32.2), _result(2032, 116.5)
    asked = []

    def measure(cfg, e):
        asked.append((cfg, e))
        return _result(2032, 56.2)

    out = retimed_runs([(small, 42), (big, 84)], measure, NullReporter(), "pipeline")
    assert asked[0] == (big.config, 84) and all(a == asked[0] for a in asked)
    # 116.5 against 56.2 disagree by more than 1.3x: a third timing, and the fastest kept
    assert len(asked) == 2
    (r0, e0, rec0), (r1, e1, rec1) = out
    assert (r0, e0, rec0) == (small, 42, {})
    assert e1 == 84 and r1.layer_ms == 56.2
    assert [t["ms"] for t in rec1["timings"]] == [116.5, 56.2, 56.2]


def test_a_half_layer_dearer_per_byte_than_the_whole_is_timed_again_and_the_faster_kept():
    """The h100h quick probe's DeepSeek-V3 FP8 half layer: 46.1 ms for 1.06 GB beside 48.5 ms for
    2.1 GB. The smaller point is timed again (the larger is not); the two timings disagree by more
    than 1.3x, so a third is taken, and the fastest kept with every timing."""
    from kttune.probes.common import NullReporter
    from kttune.probes.gpu_pipeline import retimed_runs

    half, whole = _result(1008, 46.1), _result(2016, 48.5)
    asked = []

    def measure(cfg, e):
        asked.append((cfg, e))
        return _result(1008, 25.0)

    (r0, e0, rec0), (r1, e1, rec1) = retimed_runs([(half, 24), (whole, 48)], measure, NullReporter(), "pipeline")
    assert asked and all(a == (half.config, 24) for a in asked)
    assert e0 == 24 and r0.layer_ms == 25.0 and rec0["timings"][0]["ms"] == 46.1
    assert (r1, e1, rec1) == (whole, 48, {})


def test_a_loop_slower_than_its_stages_in_turn_is_timed_again_and_the_faster_kept():
    """H100 instance am's late quick probe: the narrow BF16 layer's host loop took 110 ms at 11
    threads beside its 43 ms write and 16 ms copy alone. It is timed again on a pipeline built anew
    and the fastest timing kept; its half layer, within its stages' sum, is not."""
    from dataclasses import replace as _replace

    from kttune.probes.common import NullReporter
    from kttune.probes.gpu_pipeline import retimed_runs

    half = _replace(_result(384, 20.0), stage_a_ms=24.5, stage_b_ms=8.1, stage_c_ms=0.0, layer_ms=30.0)
    whole = _replace(half, layer_bytes=768 * 2**20, stage_a_ms=42.8, stage_b_ms=16.1, layer_ms=110.5)
    asked = []

    def measure(cfg, e):
        asked.append((cfg, e))
        return _replace(whole, layer_ms=39.0, layer_ms_p10=38.0, layer_ms_p90=40.0)

    (r0, e0, rec0), (r1, e1, rec1) = retimed_runs([(half, 128), (whole, 256)], measure, NullReporter(), "p")
    assert asked and all(a == (whole.config, 256) for a in asked)
    assert (r0, e0, rec0) == (half, 128, {})
    assert e1 == 256 and r1.layer_ms == 39.0 and rec1["timings"][0]["ms"] == 110.5


def test_a_consistent_curve_is_not_timed_again_and_a_failed_repeat_keeps_the_first():
    from kttune.probes.common import NullReporter
    from kttune.probes.gpu_pipeline import retimed_runs

    calm = [(_result(1016, 28.7), 42), (_result(2032, 56.2), 84)]

    def never(cfg, e):
        raise AssertionError("a consistent, tight curve is not timed again")

    assert [(r, e) for r, e, _ in retimed_runs(calm, never, NullReporter(), "p")] == calm
    scattered = [(_result(1016, 30.0, p10=12.0, p90=60.0), 42)]

    def fails(cfg, e):
        raise RuntimeError("CUDA out of memory")

    ((r, e, rec),) = retimed_runs(scattered, fails, NullReporter(), "p")
    assert r.layer_ms == 30.0 and rec["retime_error"] == "RuntimeError: CUDA out of memory"


def _tiny_step(**kw):
    from kttune.probes.gpu_suite import PipelineStep
    from kttune.spec.moe_shape import MoeLayerShape

    # a shape no other test builds, so that no closed layer of it is kept yet (kt_spares)
    shape = MoeLayerShape(hidden=256, inter=192, experts=6, top_k=2, method="BF16", name="tiny")
    return PipelineStep(shape, (1,), quick=False, device="cpu", **kw)


def _shape_of(curves):
    """What a curve says apart from its timings (and the retime's record, which a scattered point adds)."""
    from kttune.hw.point_quality import RETIME_KEYS

    return [
        (
            c.kind,
            c.params,
            c.backend,
            [(p.x, p.n, p.extra["experts_streamed"], sorted(set(p.extra) - set(RETIME_KEYS))) for p in c.points],
        )
        for c in curves
    ]


@pytest.mark.skipif(not importlib.util.find_spec("kt_kernel"), reason="kt-kernel not installed")
def test_a_pipeline_step_run_apart_returns_the_same_curve_and_leaves_no_writer_layer_here():
    """The full probe's pipeline step in a process of its own (real kt-kernel writer, real spawned
    child, the stages on the CPU): the same curve as measured here (kind, params, backend, points,
    what each point records), the child's progress reaches this reporter as it happens, a note says
    where it ran, and this process keeps none of its writer layers, where measuring it here keeps
    one per thread count for a class kt-kernel cannot free."""
    from kttune.kernels import kt_spares
    from tests.probes.test_isolated import Recorder

    rep = Recorder()
    kept = kt_spares.spare_count()
    apart = _tiny_step(isolate=True, reporter=rep)()
    assert kt_spares.spare_count() == kept

    here_step = _tiny_step(isolate=False)
    here = here_step()
    assert kt_spares.spare_count() - kept == (1 if here_step.kept_bytes() else 0)
    assert _shape_of(apart) == _shape_of(here)
    (curve,) = apart
    assert [p.extra["experts_streamed"] for p in curve.points] == [2, 3, 6]
    assert all(p.t_ms_p10 <= p.t_ms <= p.t_ms_p90 for p in curve.points)
    steps = [c[1] for c in rep.calls if c[0] == "step"]
    assert any(s.startswith("pipeline tiny BF16 threads=1") for s in steps)
    notes = [c[1] for c in rep.calls if c[0] == "note"]
    assert any("measured in a process of its own" in n for n in notes)


@pytest.mark.skipif(not importlib.util.find_spec("kt_kernel"), reason="kt-kernel not installed")
def test_only_a_full_probes_step_whose_kept_writers_pass_the_bound_runs_apart():
    """By size: a model's own layer streamed whole at three thread counts (DeepSeek-V3's 256 experts
    of 7168 x 2048) runs apart when kt-kernel keeps its writers (one layer per count), the quick
    probe's capped layer of the same shape and a small full layer stay here; `isolate` decides
    where it is given."""
    from kttune.kernels.kt_ext import load_kt_kernel
    from kttune.kernels.kt_moe import kt_method_leaks
    from kttune.probes.cpu_moe import ISOLATE_ABOVE_BYTES
    from kttune.probes.gpu_pipeline import expert_stream_bytes
    from kttune.probes.gpu_suite import PipelineStep
    from kttune.spec.moe_shape import MoeLayerShape

    big = MoeLayerShape(hidden=7168, inter=2048, experts=256, top_k=8, method="BF16", name="dsv3")
    full = PipelineStep(big, (15, 11, 8), quick=False)
    quick = PipelineStep(big, (15, 11), quick=True)
    if not kt_method_leaks(load_kt_kernel(), "BF16"):
        assert full.kept_bytes() == 0 and not full.apart
        pytest.skip("kt-kernel frees its BF16 class here: nothing would stay")
    assert full.kept_bytes() == 3 * 256 * expert_stream_bytes(big) > ISOLATE_ABOVE_BYTES
    assert full.apart and not quick.apart and not _tiny_step().apart
    assert not PipelineStep(big, (15,), quick=False, isolate=False).apart and _tiny_step(isolate=True).apart


def test_a_layer_slower_than_a_larger_pool_allows_is_timed_again_and_the_faster_kept():
    """The thread law on the pipeline: only stage A depends on the writer count, so a layer streamed
    by fewer writers takes at most a larger count's layer x the ratio of the counts (x the law's
    slack). H100 instance aq's second quick probe (2026-12-07): Qwen3-30B-A3B's layer at 11 threads
    took 70.8 ms beside 44.2 ms at 13 (the bound 57.5 ms). Named by the bound, it is timed again and
    the fastest kept; its half layer (21.0 ms at 13 threads, so 27.3 allowed) at 24.0 ms is not."""
    from kttune.hw.point_quality import THREAD_LAW_SLACK
    from kttune.probes.common import NullReporter
    from kttune.probes.gpu_pipeline import pools_allow, retimed_runs

    allowed = pools_allow(11, {13: {64: 21.0, 128: 44.2}, 11: {128: 1.0}, 9: {128: 1.0}})
    assert allowed == pytest.approx({64: THREAD_LAW_SLACK * 21.0 * 13 / 11, 128: THREAD_LAW_SLACK * 44.2 * 13 / 11})
    assert pools_allow(13, {13: {128: 44.2}, 11: {128: 39.2}}) == {}  # no larger count timed before it
    # two larger counts: the tighter bound
    assert pools_allow(9, {11: {128: 39.2}, 13: {128: 44.2}})[128] == pytest.approx(THREAD_LAW_SLACK * 39.2 * 11 / 9)

    half, whole = _result(576, 24.0), _result(1152, 70.8)
    asked = []

    def measure(cfg, e):
        asked.append((cfg, e))
        return _result(1152, 40.1)

    (r0, e0, rec0), (r1, e1, rec1) = retimed_runs([(half, 64), (whole, 128)], measure, NullReporter(), "p", allowed)
    assert asked and all(a == (whole.config, 128) for a in asked)
    assert (r0, e0, rec0) == (half, 64, {})
    assert e1 == 128 and r1.layer_ms == 40.1 and rec1["timings"][0]["ms"] == 70.8


def test_the_pipeline_probe_holds_a_smaller_thread_count_to_the_larger_ones_timed_before_it(monkeypatch):
    """In the whole probe on the CPU (two kt-kernel thread counts, the larger first), the smaller
    count's retime pass is given what the larger count's kept layers allow (`pools_allow`)."""
    if not importlib.util.find_spec("kt_kernel"):
        pytest.skip("kt-kernel's writer has the thread counts; torch's writer times one")
    from kttune.hw.point_quality import pool_allows
    from kttune.probes import gpu_pipeline
    from kttune.runner.pipeline import PipelineConfig
    from kttune.spec.moe_shape import MoeLayerShape

    given = []
    real = gpu_pipeline.retimed_runs

    def spy(runs, measure, reporter, label, allowed_ms=None):
        given.append((label, dict(allowed_ms or {})))
        return real(runs, measure, reporter, label, allowed_ms)

    monkeypatch.setattr(gpu_pipeline, "retimed_runs", spy)
    shape = MoeLayerShape(hidden=256, inter=128, experts=8, top_k=2, method="FP8", name="tiny")
    curves, _, _ = gpu_pipeline.probe_pipeline_layer(
        shape,
        threads_options=(2, 1),
        configs=(PipelineConfig(2, 1),),
        repeats=2,
        expert_fractions=(0.5, 1.0),
        device="cpu",
    )
    assert [c.params["threads"] for c in curves] == [2, 1]
    (first, none), (second, bound) = given
    assert first.endswith("threads=2") and none == {}
    assert second.endswith("threads=1") and set(bound) == {4, 8}
    two = {p.extra["experts_streamed"]: p.t_ms for p in curves[0].points}
    assert bound == pytest.approx({e: pool_allows(ms, 2, 1) for e, ms in two.items()})
