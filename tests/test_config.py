"""LaunchConfig: when layerwise can fire (docs/sglang-kt.md#the-per-forward-switch)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import cfg


@given(chunk=st.integers(1, 2048), threshold=st.integers(0, 2048), native=st.booleans())
def test_layerwise_fires_only_for_a_reachable_positive_threshold(chunk, threshold, native):
    c = cfg("BF16", chunked_prefill_size=chunk, gpu_prefill_token_threshold=threshold)
    # a forward carries 1..chunk tokens; layerwise needs one of them with tokens >= threshold > 0
    reachable = threshold > 0 and any(m >= threshold for m in range(1, chunk + 1))
    assert c.layerwise_can_fire(native) == (native and reachable)


def test_to_dict_rebuilds_the_config():
    c = cfg("RAWINT4", num_gpu_experts=3)
    assert c.__class__(**c.to_dict()) == c
