"""The forwards a prompt runs and the path of each (kttune.spec.forwards): laws of SGLang's chunking
and sglang-kt's per-forward switch, which the cost model, the simulator and the path runner share."""

from __future__ import annotations

from itertools import accumulate

from hypothesis import given, settings
from hypothesis import strategies as st

from kttune.spec.forwards import chunks_of, forward_plan
from kttune.spec.methods import get_method


@settings(max_examples=200, deadline=None)
@given(
    L=st.integers(1, 200_000),
    c=st.integers(1, 70_000),
    t=st.integers(0, 70_000),
    method=st.sampled_from(["BF16", "FP8", "RAWINT4", "AMXINT4", "LLAMAFILE"]),
    force=st.sampled_from([None, "hybrid", "layerwise"]),
)
def test_the_plan_covers_the_prompt_in_chunks_and_switches_per_forward(L, c, t, method, force):
    plan = forward_plan(get_method(method).layerwise, L, c, t, force)
    sizes = [m for _, m, _ in plan]
    assert sizes == chunks_of(L, c)
    assert sum(sizes) == L and all(s == c for s in sizes[:-1]) and 0 < sizes[-1] <= c
    assert [p for _, _, p in plan] == list(accumulate(sizes[:-1], initial=0))  # prefix = tokens before
    for path, m, _ in plan:
        lw = method in ("BF16", "FP8", "RAWINT4") and 0 < t <= m
        assert path == (force or ("layerwise" if lw else "hybrid"))
