"""Deriving profiles: the measured 16-core box scaled to the measured 32-core two-GPU box must agree
with what was measured there (the judged 1.5x), and the derive rules obey their laws."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from kttune.errors import UserError
from kttune.hw.derive import (
    Change, CpuTarget, allreduce_ms, derive_profile, scale_cpu_time, serial_fraction,
)
from kttune.hw.gpu_table import GPUS, gpu_spec
from kttune.hw.profile import profile_from_dict, profile_to_dict
from kttune.hw.registry import load_shipped

SRC = "h200-pcie5-xeon-amx-16c"
DST = "h200x2-pcie5-xeon-amx-32c"


def scaling_check() -> list[tuple[str, int, float, float, float]]:
    """(method, threads, tokens, predicted ms, measured ms) at every CPU MoE shape and thread count
    both measured profiles hold, the 16-core one scaled to 32 cores."""
    src, dst = load_shipped(SRC), load_shipped(DST)
    cpu = dst.inventory.cpu
    derived = derive_profile(src, Change(cpu=CpuTarget(cores=cpu.physical_cores, isa=cpu.isa))).profile
    rows = []
    for c in dst.curves_of("cpu_moe"):
        p = c.params
        if p["threads"] >= cpu.physical_cores:
            continue
        want = {k: p[k] for k in ("method", "threads", "hidden", "inter", "experts", "top_k")}
        pred = derived.curves_of("cpu_moe", **want)
        if not pred:
            continue
        pts = {q.x: q.t_ms for q in pred[0].points}
        rows += [(p["method"], p["threads"], q.x, pts[q.x], q.t_ms) for q in c.points if q.x in pts]
    return rows


def test_16_core_box_scaled_to_32_cores_is_within_1_5x_of_its_measurement():
    rows = scaling_check()
    assert len(rows) >= 20  # five methods x five token counts at the shared shape
    worst = max(max(a / b, b / a) for *_, a, b in rows)
    assert worst <= 1.5, worst


def test_stage_a_scaled_to_32_cores_is_within_1_5x():
    src, dst = load_shipped(SRC), load_shipped(DST)
    derived = derive_profile(src, Change(cpu=CpuTarget(cores=32, isa=dst.inventory.cpu.isa))).profile
    n = 0

    def key(q):  # stage A points carry the layer shape they were written for
        return q.x, q.extra.get("hidden"), q.extra.get("inter"), q.extra.get("layer_experts")

    for c in dst.curves_of("stage_a_write", threads=31):
        pred = {key(q): q.t_ms for cc in derived.curves_of("stage_a_write", method=c.params["method"], threads=31) for q in cc.points}
        for q in c.points:
            if key(q) in pred:
                n += 1
                assert 1 / 1.5 <= pred[key(q)] / q.t_ms <= 1.5, (c.params, key(q), pred[key(q)], q.t_ms)
    assert n >= 3


def test_serial_fraction_is_fitted_on_the_measured_sweep():
    s = serial_fraction(load_shipped(SRC))
    assert 0.05 < s < 0.6


@given(t=st.floats(0.01, 1e4), s=st.floats(0, 0.8, allow_subnormal=False), a=st.integers(1, 64), b=st.integers(1, 256))
def test_more_threads_never_slower(t, s, a, b):
    lo, hi = sorted((a, b))
    assert scale_cpu_time(t, s, a, hi) <= scale_cpu_time(t, s, a, lo) + 1e-9


@given(x=st.floats(1e3, 1e10), n=st.integers(2, 8))
def test_allreduce_grows_with_gpus_and_bytes(x, n):
    assert allreduce_ms(x, n + 1, 50, 0.02) >= allreduce_ms(x, n, 50, 0.02)
    assert allreduce_ms(2 * x, n, 50, 0.02) >= allreduce_ms(x, n, 50, 0.02)
    assert allreduce_ms(x, 1, 50, 0.02) == 0


def test_derived_profile_is_labelled_curve_by_curve_and_round_trips():
    d = derive_profile(load_shipped(SRC), Change(gpu="rtx5090", n_gpus=2))
    p = d.profile
    assert all(c.params["label"] in ("measured", "scaled", "datasheet") for c in p.curves)
    assert {c.params["label"] for c in p.curves_of("gpu_moe")} == {"scaled"}
    assert {c.params["label"] for c in p.curves_of("cpu_moe")} == {"measured"}
    assert len(p.inventory.gpus) == 2 and p.inventory.gpus[0].vram_total_bytes == GPUS["rtx5090"].vram_bytes
    assert p.provenance.kind == "mixed"
    assert profile_from_dict(profile_to_dict(p)).curves == p.curves


def test_a_slower_gpu_is_slower_at_large_sizes():
    src = load_shipped(SRC)
    p = derive_profile(src, Change(gpu="rtx4090")).profile
    for a, b in zip(src.curves_of("gpu_gemm"), p.curves_of("gpu_gemm")):
        assert b.points[-1].t_ms > 2 * a.points[-1].t_ms
    h2d_src = [c for c in src.curves_of("h2d", pinned=True) if c.params["gpu"] == 0][0]
    h2d = [c for c in p.curves_of("h2d", pinned=True) if c.params["gpu"] == 0][0]
    assert h2d.points[-1].t_ms == pytest.approx(h2d_src.points[-1].t_ms * 2, rel=0.02)  # Gen4 is half of Gen5


def test_bad_change_is_a_user_error():
    with pytest.raises(UserError):
        gpu_spec("rtx9999")
    with pytest.raises(UserError):
        derive_profile(load_shipped(SRC), Change(n_gpus=0))


def test_allreduce_is_datasheet_without_a_measurement_and_grows_with_gpus():
    src = load_shipped(SRC)  # one GPU: nothing to fit
    two = derive_profile(src, Change(n_gpus=2)).profile.curves_of("allreduce")
    eight = derive_profile(src, Change(n_gpus=8)).profile.curves_of("allreduce")
    nv = derive_profile(src, Change(n_gpus=8, link="nvlink")).profile.curves_of("allreduce")
    assert two[0].params["label"] == "datasheet" and two[0].params["ranks"] == 2
    for a, b, c in zip(two[0].points, eight[0].points, nv[0].points):
        assert b.t_ms > a.t_ms and c.t_ms < b.t_ms
    assert not derive_profile(src, Change(n_gpus=1)).profile.curves_of("allreduce")


def test_a_measured_allreduce_is_fitted_and_moved_to_more_gpus():
    from dataclasses import replace as dc_replace

    from kttune.hw.profile import Curve, Point

    src = load_shipped(DST)  # two GPUs
    lat, bw = 0.025, 40.0  # ms per step, GB/s
    xs = [2.0 ** e for e in range(16, 30, 2)]
    meas = Curve("allreduce", "bytes", tuple(Point(x=x, t_ms=allreduce_ms(x, 2, bw, lat)) for x in xs),
                 {"ranks": 2, "link": "pcie", "dtype": "bf16"}, backend="nccl")
    src = dc_replace(src, curves=src.curves + (meas,))
    four = derive_profile(src, Change(n_gpus=4)).profile.curves_of("allreduce")[0]
    assert four.params["label"] == "scaled"
    for p in four.points:  # the ring model with the fitted latency and link, at 4 GPUs
        assert p.t_ms == pytest.approx(allreduce_ms(p.x, 4, bw, lat), rel=1e-6)
