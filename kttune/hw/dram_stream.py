"""What reading a kt-kernel MoE layer's experts from DRAM adds to its call, from the same layer timed
warm (one layer, held by the last-level cache between calls) and cold (cycled over copies past it).

A server's forward reads each layer's experts from DRAM; the quick probe's layer stays in the cache.
The difference of the two timings at one token count, over the bytes of the experts those tokens
touch (uniform routing, `kttune.hw.features.expected_experts_touched`), is the cost per GB the
stream adds. Measured (docs/probe.md#the-quick-layer-in-the-cache): 5.6-7.4 ms per GB on the H200
box's instance of 2026-12-04 (11 threads), 22-24 on the development VM (1 thread); at 1,024 tokens
the VM's compute hides the stream, so the rate is read where the calls touch the whole layer and
the compute does not yet hide it. Not yet a term of the cost model. Pure.
"""

from __future__ import annotations

import statistics

from kttune.hw.curve_kinds import host_expert_bytes
from kttune.hw.features import expected_experts_touched
from kttune.hw.profile import Curve

# The token counts the rate is read over: from the first that touches most of a small layer's experts
# to the last where the VM's compute had not yet hidden the stream.
STREAM_TOKENS = (4, 256)


def expert_bytes(curve: Curve) -> float:
    """Bytes of one expert of a `cpu_moe` curve's layer as its calls read them
    (`kttune.hw.curve_kinds.host_expert_bytes`)."""
    return host_expert_bytes(curve.shape)


def cycled_bytes(curve: Curve) -> float:
    """The most bytes any point of `curve` cycled over (`source_bytes`, a cold curve's copies; 0 where
    none says)."""
    return max((float(p.extra.get("source_bytes") or 0) for p in curve.points), default=0.0)


def touched_gb(curve: Curve, tokens: float) -> float:
    """GB of expert weights a call of `curve`'s layer on `tokens` tokens reads (uniform routing)."""
    s = curve.shape
    return expected_experts_touched(tokens, s.top_k, s.experts, s.routed_experts) * expert_bytes(curve) / 1e9


def stream_ms_per_gb(warm: Curve, cold: Curve) -> dict[int, float]:
    """Per token count both `cpu_moe` curves timed (the same layer, warm and cold): (cold - warm) ms
    over the GB its calls touch. ValueError where the two are not one measurement (their params
    differ) or the cold curve cycled over no more bytes than the warm one (a second warm timing)."""
    if warm.kind != "cpu_moe" or cold.kind != "cpu_moe" or warm.params != cold.params:
        raise ValueError("warm and cold must be cpu_moe curves of one layer, method and thread count")
    if cycled_bytes(cold) <= cycled_bytes(warm):
        raise ValueError(
            f"the cold curve cycled over {cycled_bytes(cold) / 2**20:.0f} MiB, no more than the warm one: "
            "a second warm timing, not a cold one"
        )
    w = {p.x: p.t_ms for p in warm.points}
    return {int(p.x): (p.t_ms - w[p.x]) / touched_gb(warm, p.x) for p in cold.points if p.x in w}


def stream_rate(warm: Curve, cold: Curve, tokens: tuple[int, int] = STREAM_TOKENS) -> float:
    """The median of `stream_ms_per_gb` over the token counts in `tokens` (inclusive): ms per GB."""
    lo, hi = tokens
    per = [v for t, v in stream_ms_per_gb(warm, cold).items() if lo <= t <= hi]
    if not per:
        raise ValueError(f"the two curves share no token count in {lo}-{hi}")
    return statistics.median(per)
