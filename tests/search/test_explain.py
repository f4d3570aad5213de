"""The explanation of a flag set, against laws of chunked prefill and the cost model itself."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from kttune.cost.components import Components
from kttune.cost.prefill import prefill_time_ms
from kttune.search.explain import explain
from kttune.search.evaluate import Budget, evaluate
from kttune.search.workload import load_workload
from kttune.units import GIB
from tests.helpers import cfg, model, profile

BUDGET = Budget(80 * GIB, 1024 * GIB)


def setup(name="qwen3-30b-a3b", method=None, **flags):
    m = model(name)
    meth = method or m.default_method
    comp = Components(profile(), m, meth, 1)
    return comp, cfg(meth, **flags), load_workload("rag").clipped(m.max_position_embeddings)


def test_forwards_per_prompt_follow_the_chunking_and_the_threshold():
    """A prompt of L tokens runs ceil(L / chunk) forwards; those of >= threshold tokens go layerwise."""
    chunk, thr = 4096, 1024
    comp, c, wl = setup(chunked_prefill_size=chunk, gpu_prefill_token_threshold=thr)
    ex = explain(comp, c, wl, BUDGET)
    for r in ex.rows:
        sizes = [chunk] * (r.prompt_tokens // chunk) + ([r.prompt_tokens % chunk] if r.prompt_tokens % chunk else [])
        assert len(sizes) == math.ceil(r.prompt_tokens / chunk)
        n_lw = sum(s >= thr for s in sizes)
        want = " + ".join(
            p
            for p in ([f"{n_lw} layerwise"] if n_lw else [])
            + ([f"{len(sizes) - n_lw} hybrid"] if len(sizes) - n_lw else [])
        )
        assert r.chosen_paths == want, r.prompt_tokens
        assert (r.traffic_bytes > 0) == (n_lw > 0)


def test_rows_are_the_cost_model_on_each_path():
    comp, c, wl = setup(chunked_prefill_size=8192, gpu_prefill_token_threshold=2048)
    ex = explain(comp, c, wl, BUDGET)
    for r in ex.rows:
        assert r.hybrid_ms == pytest.approx(
            prefill_time_ms(comp, replace(c, gpu_prefill_token_threshold=0), r.prompt_tokens)
        )
        assert r.chosen_ms == pytest.approx(prefill_time_ms(comp, c, r.prompt_tokens))
        # the picked flags mix both paths: never slower than both, never faster than both
        lo, hi = sorted((r.hybrid_ms, r.layerwise_ms))
        assert lo * (1 - 1e-9) <= r.chosen_ms <= hi * (1 + 1e-9) or r.prompt_tokens > c.chunked_prefill_size
    assert all(r.prompt_tokens <= comp.model.max_position_embeddings for r in ex.rows)


def test_a_given_evaluation_is_used_as_is_and_must_match():
    comp, c, wl = setup()
    ev = evaluate(comp, c, wl, BUDGET)
    a, b = explain(comp, c, wl, BUDGET, evaluation=ev), explain(comp, c, wl, BUDGET)
    assert a.evaluation is ev and a.evaluation == b.evaluation and a.rows == b.rows
    with pytest.raises(ValueError):
        explain(comp, replace(c, chunked_prefill_size=4096), wl, BUDGET, evaluation=ev)


def test_amx_method_has_no_layerwise_path():
    comp, c, wl = setup("deepseek-v3", "AMXINT4")
    ex = explain(comp, c, wl, Budget(80 * GIB, 2048 * GIB))
    assert ex.crossover_tokens is None and ex.layer_layerwise_ms is None
    assert all(r.layerwise_ms is None and "layerwise" not in r.chosen_paths for r in ex.rows)
    assert any("threshold stays 0" in r for r in ex.reasons)


def test_a_threshold_above_the_chunk_is_called_out():
    comp, c, wl = setup(chunked_prefill_size=2048, gpu_prefill_token_threshold=4096)
    ex = explain(comp, c, wl, BUDGET)
    assert any("can never fire" in r for r in ex.reasons)
    assert all("layerwise" not in r.chosen_paths for r in ex.rows)


@pytest.mark.parametrize("name, method, switch", [("kimi-k2-thinking", "RAWINT4", 192), ("minimax-m2.1", "FP8", None)])
def test_where_kt_kernel_changes_gemm_kernels_is_said(name, method, switch):
    """docs/cost-model.md#kt-kernels-two-gemm-kernels: a method whose kt-kernel class switches kernels
    at 4E/k tokens gets a reason naming the length and the CPU experts' time on each side of it; a
    class with one kernel (FP8) gets none, and nor does a layer with every expert on the GPU."""
    comp, c, wl = setup(name, method)
    said = [r for r in explain(comp, c, wl, Budget(80 * GIB, 2048 * GIB)).reasons if "vector GEMM" in r]
    assert len(said) == (1 if switch else 0)
    if switch:
        assert f"up to {switch} tokens" in said[0] and f"{switch + 1}-token" in said[0]
        all_gpu = replace(c, num_gpu_experts=comp.model.num_experts)
        assert not [r for r in explain(comp, all_gpu, wl, Budget(80 * GIB, 2048 * GIB)).reasons if "vector GEMM" in r]


def test_the_expert_shape_law_is_said_with_the_share_it_gives_the_outputs(monkeypatch):
    """docs/cost-model.md#the-expert-shape-law: on the AMX box's BF16 class the matrix GEMM's output
    work is a larger share of a narrow expert's time than of a wide one's; a class without a measured
    cost per element gets no such reason, and nor does a layer with every expert on the GPU."""
    import kttune.spec.kt_classes as kt_classes

    def share(name: str, method: str = "BF16", **flags) -> float | None:
        comp, c, wl = setup(name, method, **flags)
        said = [r for r in explain(comp, c, wl, Budget(80 * GIB, 2048 * GIB)).reasons if "on the outputs" in r]
        return float(said[0].split(" spends ")[1].split("%")[0]) / 100 if said else None

    narrow, wide = share("qwen3-30b-a3b"), share("mixtral-8x7b")
    assert narrow is not None and wide is not None and 0 < wide < narrow < 1
    assert share("qwen3-30b-a3b", num_gpu_experts=128) is None
    monkeypatch.setattr(kt_classes, "MATRIX_OUTPUT_FLOPS", {})
    assert share("qwen3-30b-a3b") is None
