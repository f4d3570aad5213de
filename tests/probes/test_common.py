"""A disturbed point is timed again and the tighter measurement kept; points that stay scattered are
reported. The disturbance is real: a host that is busy for part of the first timing (sleeps on most
calls), quiet for the second."""

from __future__ import annotations

import time

from kttune.hw.profile import Curve, Point
from kttune.probes.common import (
    SCATTER_LIMIT,
    NullReporter,
    measure,
    remeasure_scattered,
    scatter,
    scattered_note,
)
from kttune.probes.cpu_moe import CpuMoeOptions, CpuMoeTask, _measure_curve
from kttune.spec.moe_shape import MoeLayerShape


def _work(ms: float = 0.5) -> None:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < ms / 1e3:
        pass


def test_a_scattered_point_is_timed_again_and_the_tighter_kept():
    first = Point(x=4, t_ms=3.0, t_ms_p10=1.0, t_ms_p90=9.0, n=10)
    tight = Point(x=4, t_ms=1.1, t_ms_p10=1.0, t_ms_p90=1.2, n=10)
    calm = Point(x=16, t_ms=2.0, t_ms_p10=1.9, t_ms_p90=2.2, n=10)
    asked = []

    def again(p):
        asked.append(p.x)
        return tight

    out = remeasure_scattered([first, calm], again, NullReporter(), "t")
    assert asked == [4]  # the calm point is not timed again
    assert out[0].t_ms == 1.1 and out[0].extra["remeasured"]["first_ms"] == 3.0
    assert out[0].extra["remeasured"]["first_scatter"] == 9.0 and out[1] == calm
    # a second timing no tighter than the first leaves the first, and says it tried
    worse = Point(x=4, t_ms=5.0, t_ms_p10=1.0, t_ms_p90=20.0, n=10)
    (kept,) = remeasure_scattered([first], lambda p: worse, NullReporter(), "t")
    assert kept.t_ms == 3.0 and kept.extra["remeasured"]["again_scatter"] == 20.0


def test_the_cpu_moe_curve_times_a_disturbed_size_again():
    busy = {"on": True, "calls": 0}

    def run(n):
        def fn():
            busy["calls"] += 1
            _work(0.5)
            if busy["on"] and busy["calls"] % 5 < 3:  # three calls in five delayed while the host is busy
                time.sleep(0.005)

        return fn

    opts = CpuMoeOptions(shapes=(), tokens=(4,), warmup=1, repeats=10, min_total_s=0.0, max_repeats=10)
    task = CpuMoeTask("BF16", 1, 1, MoeLayerShape(64, 32, 4, 2), (4,))

    class Quiet(NullReporter):
        def step(self, description, advance=1.0):
            if "4 tok" in description:  # the first timing is over: the host quietens
                busy["on"] = False

    (pt,), _ = _measure_curve(run, task, [4], opts, Quiet(), "t")
    rec = pt.extra["remeasured"]
    assert rec["first_scatter"] > SCATTER_LIMIT and rec["first_ms"] > 4.0  # most first samples slept 5 ms
    assert pt.t_ms < 3.0 and scatter(pt) <= rec["first_scatter"]


def test_points_that_stay_scattered_are_reported():
    calm = measure(_work, x=1, warmup=1, repeats=5)
    noisy = Point(x=2, t_ms=3.0, t_ms_p10=1.0, t_ms_p90=9.0, n=10)
    quiet = Curve(kind="cpu_moe", x_unit="tokens", points=(calm,))
    assert scattered_note([quiet], "CPU MoE") is None or scatter(calm) > SCATTER_LIMIT
    note = scattered_note([Curve(kind="cpu_moe", x_unit="tokens", points=(noisy,))], "CPU MoE")
    assert note.startswith("CPU MoE: 1 of 1 points scattered") and "--fresh" in note
