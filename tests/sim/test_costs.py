"""Iteration costs are the cost model's: a decode-only step is decode_step_ms, a prefill forward
alone is forward_time, and the groups of a layered stage add up to the whole forward."""

from __future__ import annotations

import math

from hypothesis import given, settings, strategies as st

from kttune.cost.components import FORWARD_OVERHEAD_MS, Components
from kttune.cost.decode import decode_step_ms
from kttune.cost.prefill import forward_time
from kttune.sim.costs import IterationCosts
from tests.helpers import cfg, model, profile

CASES = {}


def costs(name: str, threshold: int) -> IterationCosts:
    key = (name, threshold)
    if key not in CASES:
        m = model(name)
        # nsa: SGLang's backend for sparse attention, whose decode reads are capped at the top-k
        c = Components(profile("h200-pcie5-xeon-amx-16c"), m, m.default_method, attention_backend="nsa")
        CASES[key] = IterationCosts(c, cfg(m.default_method, gpu_prefill_token_threshold=threshold, num_gpu_experts=4))
    return CASES[key]


NAMES = st.sampled_from(["qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b", "qwen3-next-80b-a3b", "deepseek-v3.2"])


@settings(max_examples=30, deadline=None)
@given(name=NAMES, batch=st.integers(1, 256), ctx=st.floats(1, 100000, allow_subnormal=False))
def test_decode_step_is_the_cost_models(name, batch, ctx):
    ic = costs(name, 0)
    assert math.isclose(ic.decode(batch, batch * ctx).ms, decode_step_ms(ic.comp, ic.cfg, batch, ctx), rel_tol=1e-9)


@settings(max_examples=30, deadline=None)
@given(
    name=NAMES,
    tokens=st.integers(1, 8192),
    prefix=st.integers(0, 30000),
    groups=st.integers(1, 64),
    threshold=st.sampled_from([0, 1024]),
)
def test_groups_add_up_to_the_whole_forward(name, tokens, prefix, groups, threshold):
    ic = costs(name, threshold)
    whole = forward_time(ic.comp, ic.cfg, tokens, prefix).total_ms
    assert math.isclose(ic.forward([(tokens, prefix)], 0, 0.0).ms, whole, rel_tol=1e-9)
    g = min(groups, ic.num_layers)
    parts = [ic.forward([(tokens, prefix)], 0, 0.0, g, i) for i in range(g)]
    assert math.isclose(sum(p.ms for p in parts), whole + (g - 1) * FORWARD_OVERHEAD_MS, rel_tol=1e-9)
    assert math.isclose(
        sum(p.pcie_bytes for p in parts), ic.forward([(tokens, prefix)], 0, 0.0).pcie_bytes, rel_tol=1e-9
    )
