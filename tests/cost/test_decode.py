"""Decode step time: always the hybrid path (docs/sglang-kt.md#the-per-forward-switch), growing
with the batch and the context."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kttune.cost.components import Components
from kttune.cost.decode import decode_step_ms
from tests.helpers import cfg, model, profile

COMP = Components(profile(), model("qwen3-30b-a3b"), "BF16")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.integers(1, 256), threshold=st.sampled_from([0, 1, 64, 4096]))
def test_decode_never_goes_layerwise(batch, threshold):
    # even a threshold the batch reaches leaves decode on the hybrid path: no layer load in the step
    plain = decode_step_ms(COMP, cfg("BF16"), batch, 4096)
    assert decode_step_ms(COMP, cfg("BF16", gpu_prefill_token_threshold=threshold), batch, 4096) == plain


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batch=st.integers(1, 128), more=st.integers(1, 128), ctx=st.integers(1, 100_000), more_ctx=st.integers(1, 100_000)
)
def test_a_bigger_batch_or_context_is_never_faster(batch, more, ctx, more_ctx):
    # kt-kernel switches GEMM kernels above 4E/k tokens and is faster just past the switch (measured
    # on the 16-core box: 64 -> 128 tokens; docs/cost-model.md#kt-kernels-two-gemm-kernels): on each
    # side of it a bigger batch is never faster, but by the measured curves' largest dip.
    t = decode_step_ms(COMP, cfg("BF16"), batch, ctx)
    above = COMP.cpu_matmul_above()
    assert above == 4 * COMP.model.num_experts // COMP.model.top_k
    smaller = decode_step_ms(COMP, cfg("BF16"), above + 1, ctx) if batch <= above < batch + more else t
    assert decode_step_ms(COMP, cfg("BF16"), batch + more, ctx) >= smaller * (1 - _measured_cpu_dip())
    assert decode_step_ms(COMP, cfg("BF16"), batch, ctx + more_ctx) >= t


def _measured_cpu_dip() -> float:
    """The largest relative drop of time with more tokens in the profile's CPU MoE curves."""
    worst = 0.0
    for c in COMP.profile.curves_of("cpu_moe", method="BF16"):
        top = 0.0
        for p in sorted(c.points, key=lambda q: q.x):
            top = max(top, p.t_ms)
            worst = max(worst, (top - p.t_ms) / top)
    return worst


def test_all_experts_on_the_gpu_leaves_only_gpu_work():
    cpu_side = decode_step_ms(COMP, cfg("BF16", num_gpu_experts=0), 8, 4096)
    gpu_side = decode_step_ms(COMP, cfg("BF16", num_gpu_experts=COMP.model.num_experts), 8, 4096)
    assert gpu_side < cpu_side
    assert gpu_side >= COMP.decode_dense_ms(8, 4096)
