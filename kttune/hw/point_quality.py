"""Whether a measured point can be trusted: its spread and, where the probe timed it more than once,
whether its timings agree (docs/probe.md#disturbed-points). The probes time by these rules
(`kttune.probes.common.retime`) and the reports mark what they find. Pure."""

from __future__ import annotations

from kttune.hw.profile import Point

# A point whose 90th percentile is more than this multiple of its 10th was disturbed while it was
# timed (its samples come back to back, in well under a second): on the H200 box 3-6 of a quick
# probe's 68 kt-kernel MoE points on quiet instances, 16 on one busy instance, where kt-kernel's RAWINT4 call at
# 1-16 tokens read 2-3x the other instances' and predicted Kimi-K2's hybrid layer 107% slow
# (docs/probe.md#disturbed-points).
SCATTER_LIMIT = 2.0
# Two timings of one point whose medians differ by more than this were not both quiet (one process,
# seconds apart: on the development VM a quiet host's probes a minute apart agree within 5%).
AGREE_LIMIT = 1.3


def scatter(p: Point) -> float:
    """p90 / p10 of a point's samples (1.0 where it has no spread)."""
    return p.t_ms_p90 / p.t_ms_p10 if p.t_ms_p10 and p.t_ms_p90 else 1.0


def disturbed(p: Point) -> bool:
    """Whether a point still reads as disturbed: scattered beyond `SCATTER_LIMIT`, or its two fastest
    timings (`extra["timings"]`, where it was timed more than once) more than `AGREE_LIMIT` apart."""
    if scatter(p) > SCATTER_LIMIT:
        return True
    ms = sorted(t["ms"] for t in p.extra.get("timings", ()))
    return len(ms) >= 2 and ms[1] > AGREE_LIMIT * ms[0]
