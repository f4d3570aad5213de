"""Whether a point can be trusted (kttune.hw.point_quality): its spread, and whether its timings agree."""

from __future__ import annotations

from kttune.hw.point_quality import AGREE_LIMIT, SCATTER_LIMIT, disturbed, scatter
from kttune.hw.profile import Point


def _pt(ms, p10, p90, timings=None):
    extra = {"timings": [{"ms": t} for t in timings]} if timings else {}
    return Point(x=4, t_ms=ms, t_ms_p10=p10, t_ms_p90=p90, n=5, extra=extra)


def test_a_point_is_disturbed_when_scattered_or_timed_apart():
    assert scatter(_pt(1.0, 0.5, 1.5)) == 3.0 and scatter(Point(x=1, t_ms=1.0)) == 1.0
    assert disturbed(_pt(1.0, 0.5, 0.5 * SCATTER_LIMIT + 0.01))
    assert not disturbed(_pt(1.0, 0.9, 1.1))
    # timed three times: the two fastest decide, a slow first timing does not
    assert not disturbed(_pt(1.0, 0.9, 1.1, [3.0, 1.0, 1.05]))
    assert disturbed(_pt(1.0, 0.9, 1.1, [1.0, AGREE_LIMIT * 1.0 + 0.05]))
