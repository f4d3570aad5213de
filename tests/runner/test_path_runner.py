"""The path runner's logic on the CPU variant (the GPU side in torch on the CPU, kt-kernel for the CPU
experts): the switch and the chunking, the hybrid sum against a dense reference MoE computed from the
checkpoint weights, and the layerwise output against the hybrid output for the same weights."""

from __future__ import annotations

import pytest
import torch

from kttune.kernels.grouped_moe import moe_reference
from kttune.runner.result import PathRun
from kttune.runner.path_runner import PathRunner
from kttune.runner.stack import StackOptions, build_stack, small_spec
from kttune.spec.loader import load_model


MODELS = [
    ("qwen3-30b-a3b", "BF16"),
    ("kimi-k2-thinking", "RAWINT4"),
    ("deepseek-v3", "FP8"),
    ("gpt-oss-20b", "MXFP4"),  # sliding-window GQA with sinks, e2m1 experts
]


@pytest.fixture(scope="module", params=MODELS, ids=lambda p: p[1])
def runner(request):
    name, method = request.param
    spec = load_model(name, method)
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # kt-kernel's worker takes the other core
    stack = build_stack(
        small_spec(spec),
        spec.router,
        method,
        StackOptions(layers=2, gpu_experts=5, cpuinfer=1, max_tokens=128, device="cpu"),
    )
    yield PathRunner(stack)
    stack.close()
    torch.set_num_threads(before)


def _rel(a, b) -> float:
    return ((a.double() - b.double()).abs().mean() / b.double().abs().mean()).item()


def _hidden(runner, t=24, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(t, runner.st.spec.hidden_size, generator=g).to(torch.bfloat16)


def test_hybrid_sum_equals_the_dense_moe(runner):
    """GPU experts 0..4 (torch) + CPU experts 5.. (kt-kernel, masked) summed = the whole layer's MoE on
    the dequantised checkpoint weights, computed in float64 by an independent reference."""
    h = _hidden(runner)
    y, ids, w = runner.moe_output(h, "hybrid")
    assert (ids < 5).any() and (ids >= 5).any()  # both sides contribute
    gate, up, down = runner.st.host.dense()
    ref = moe_reference(h, torch.cat([gate, up], 1), down, ids, w)
    assert _rel(y, ref) < 0.03


def test_layerwise_output_equals_hybrid_output(runner):
    h = _hidden(runner, seed=2)
    yh, _, _ = runner.moe_output(h, "hybrid")
    yl, _, _ = runner.moe_output(h, "layerwise")
    assert _rel(yl, yh) < 0.03


def test_prompt_runs_chunk_by_chunk_with_the_switch(runner):
    run = runner.run_prompt(100, 64, 64)
    assert [(f.tokens, f.prefix, f.path) for f in run.forwards] == [(64, 0, "layerwise"), (36, 64, "hybrid")]
    assert all(len(f.layer_ms) == 2 and min(f.layer_ms) > 0 for f in run.forwards)
    assert run.measured_ms == pytest.approx(sum(sum(f.layer_ms) for f in run.forwards))
    back = PathRun.from_dict(run.to_dict())
    assert back.to_dict() == run.to_dict()
    # the layerwise forward ran in sglang-kt 0.7.2's own loop (docs/path-runner.md#pipeline)
    assert run.backends["layerwise_pipeline"] == "slots=2,group=1"
    assert run.pipeline_driver == "sglang-kt"
    with pytest.raises(ValueError, match="max_len|buffers"):
        runner.run_prompt(400, 200, 0)


def test_prefix_attention_matches_one_shot():
    """A chunked prompt attends to its prefix: two chunks of a layer give the same outputs as one
    forward of the whole prompt (the cache and the lower-right causal mask are right), with each
    family's q/k norm: per head (Qwen3, GLM-4.5), over the layer's heads (MiniMax-M2), none (MLA),
    and Qwen3-Next's output gate."""
    from kttune.kernels.decoder import Attention, AttnCache
    from kttune.kernels.attention_shape import attention_shape

    for name, qk_norm in (
        ("qwen3-30b-a3b", "per_head"),
        ("kimi-k2-thinking", ""),
        ("glm-4.5", "per_head"),
        ("minimax-m2", "per_layer"),
        ("qwen3-next-80b-a3b", "per_head"),
    ):
        spec = small_spec(load_model(name))
        shape = attention_shape(spec, spec.full_attention_layer_ids[0])
        attn = Attention(shape, "cpu", seed=3)
        assert shape.qk_norm == qk_norm and shape.output_gate == (name == "qwen3-next-80b-a3b")
        if shape.kind == "gqa":  # a gate doubles q's rows
            assert attn.w["q"].shape[0] == shape.heads * shape.head_dim * (2 if shape.output_gate else 1)
        if qk_norm:
            width = shape.head_dim * (shape.heads if qk_norm == "per_layer" else 1)
            assert attn.w["q_norm"].numel() == width
        x = torch.randn(40, spec.hidden_size).to(torch.bfloat16)
        pos = torch.arange(40)
        whole = attn.forward(x, pos, AttnCache())
        cache = AttnCache()
        parts = torch.cat([attn.forward(x[:25], pos[:25], cache), attn.forward(x[25:], pos[25:], cache)])
        assert _rel(parts, whole) < 0.02


@pytest.mark.gpu
@pytest.mark.parametrize("name,method", MODELS)
def test_gpu_paths_agree_and_record_memory(name, method):
    """On CUDA: kt-kernel submitted on the side stream, the stream-driven pipeline, our GPU kernels;
    the same laws as on the CPU, and a peak memory per prompt."""
    spec = load_model(name, method)
    st = build_stack(
        small_spec(spec, hidden=512, inter=256, experts=32),
        spec.router,
        method,
        StackOptions(layers=2, gpu_experts=5, cpuinfer=4, max_tokens=256, device="cuda"),
    )
    r = PathRunner(st)
    try:
        h = _hidden(r).cuda()
        yh, ids, w = r.moe_output(h, "hybrid")
        gate, up, down = st.host.dense()
        ref = moe_reference(h, torch.cat([gate, up], 1), down, ids, w)
        tol = 0.08 if method == "FP8" else 0.03  # FP8 on CUDA: activations quantised to fp8 per token
        assert _rel(yh.cpu(), ref) < tol
        yl, _, _ = r.moe_output(h, "layerwise")
        assert _rel(yl.cpu(), yh.cpu()) < tol
        run = r.run_prompt(300, 256, 256)
        assert [f.path for f in run.forwards] == ["layerwise", "hybrid"]
        assert run.peak_allocated_bytes >= run.baseline_allocated_bytes > 0
    finally:
        st.close()


def test_the_runners_own_bookkeeping_between_phases_is_charged_to_no_phase(runner):
    """`_phase_end` notes device peaks between phases (0.5-1.5 ms of host time a call on the H200
    box, which the server never spends). Made a 40 ms sleep here, it must stay out of the phase
    times: the run's wall clock holds every sleep beside its phases, whatever the host's load."""
    import time

    class Slow(PathRunner):
        def _bookkeeping(self) -> None:
            time.sleep(0.04)

    slow = Slow(runner.st)
    runner.run_prompt(48, 48, 0, "hybrid")  # warm-up
    t0 = time.perf_counter()
    run = slow.run_prompt(48, 48, 0, "hybrid")
    wall_ms = (time.perf_counter() - t0) * 1e3
    (f,) = run.forwards
    sleeps_ms = 40 * 2 * len(runner.st.layers)  # twice a layer, at least
    for att, moe, lay in zip(f.attn_ms, f.moe_ms, f.layer_ms):
        assert lay == pytest.approx(att + moe)
    assert wall_ms - sum(f.layer_ms) >= 0.95 * sleeps_ms, (wall_ms, f.layer_ms)
